"""Every registered clause is named by at least one mutant test in this folder.

A clause check that no deliberately broken implementation ever fails could be a check that
cannot fail; this guard keeps a new clause from landing without its mutant.
"""

from __future__ import annotations

from pathlib import Path

from rlconform.conformance.registry import load_all


def test_every_clause_id_appears_in_a_mutant_test():
    here = Path(__file__).parent
    text = "".join(p.read_text() for p in here.glob("test_*_mutants.py"))
    missing = [cid for cid in load_all() if f'"{cid}"' not in text and f"'{cid}'" not in text]
    assert missing == []
