"""The committed contract reference (docs/contract/) is what ``rlconform docs`` renders now."""

from __future__ import annotations

import re
from pathlib import Path

from rlconform.conformance.cli import main
from rlconform.conformance.docs import profile_keys, render
from rlconform.conformance.registry import AREAS, load_all

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "contract"
REPORTS = ROOT / "docs" / "certification"

_FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?|-?\d+e[-+]?\d+")


def _normalized(text: str) -> str:
    """Floats to 10 significant digits: last-bit libm differences across platforms are not
    staleness (the fixture files and goldens pin the values themselves)."""
    return _FLOAT.sub(lambda m: f"{float(m.group()):.10g}", text)


def test_committed_docs_are_up_to_date(tmp_path):
    assert main(["docs", "--out", str(tmp_path), "--reports", str(REPORTS)]) == 0
    rendered = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.glob("*.md")}
    committed = {p.name: p.read_text(encoding="utf-8") for p in COMMITTED.glob("*.md")}
    assert sorted(committed) == sorted(rendered), "pages added or removed: re-run rlconform docs"
    stale = [
        name for name in rendered if _normalized(rendered[name]) != _normalized(committed[name])
    ]
    assert not stale, (
        f"docs/contract is stale ({', '.join(stale)}): run "
        "`rlconform docs --out docs/contract` and commit the result"
    )


def test_one_page_per_area_with_every_clause_anchored():
    pages = render(REPORTS)
    clauses = load_all()
    areas = {c.area for c in clauses.values()}
    assert set(pages) == {"index.md"} | {f"{a}.md" for a in areas}
    assert areas <= set(AREAS)
    for clause_id, clause in clauses.items():
        page = pages[f"{clause.area}.md"]
        assert f'<a id="{clause_id}"></a>' in page
        assert f"({clause.area}.md#{clause_id})" in pages["index.md"]


def test_worked_examples_are_computed_live_and_linked():
    page = render(REPORTS)["mask.md"]
    assert "#### `worked_28_over_9`" in page
    assert '"masked_mean": 3.111111111111111' in page
    assert "../../fixtures/cases/mask.loss.json" in page


def test_profile_keys_with_contract_defaults():
    clauses = load_all()
    assert profile_keys(clauses["mask.loss"]) == {"masked_mean_empty": "0.0"}
    assert profile_keys(clauses["reward.place_last"]) == {"reward_nonaction_tail": "'last_token'"}
    grpo = profile_keys(clauses["adv.grpo"])
    assert grpo["grpo_std_ddof"] == "1" and grpo["grpo_eps"] == "1e-06"


def test_stale_pages_are_removed(tmp_path):
    (tmp_path / "gone.md").write_text("old")
    assert main(["docs", "--out", str(tmp_path), "--reports", str(REPORTS)]) == 0
    assert not (tmp_path / "gone.md").exists()
    assert (tmp_path / "index.md").exists()
