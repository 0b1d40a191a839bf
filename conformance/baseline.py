"""Baseline files: declared breaks as data (TOML), one mechanism for shipped manifests and
a fork's own record of the breaks it inherited.

A baseline file::

    format = 1
    target = "verl"
    version = "0.9.1"

    [[deviation]]
    clause = "adv.grpo"                       # a clause id
    checks = ["advantages"]                   # checks of that clause (rlconform clauses --checks)
    features = ["padding_nonfinite"]          # CONTRACT §0a feature ids; [] = any case
    rationale = "scores sum every column ..." # one line: why the framework does this
    severity = "hardening"                    # what the run that wrote it saw (informational)
    configs = ["dr_grpo"]                     # optional (step clauses): only under these
                                              # trainer configs; absent = under any

Each entry covers failures of its checks on cases having at least one of its features
(and, with ``configs``, only failures under one of those trainer configs).
Semantics are those of ``adapters.base.Deviation``: an entry must still be observed (a
stale entry fails, named), and a failure it does not cover is a new break. ``load``
validates every entry (unknown clause ids, checks and features are one-line errors, exit
2); ``render`` writes the file ``certify --write-baseline`` produces.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rlconform.adapters.base import Deviation, SetupError, deviation_entries

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

FORMAT = 1
_ENTRY_KEYS = {"clause", "checks", "features", "rationale", "severity", "observed", "configs"}
_TOP_KEYS = {"format", "target", "version", "deviation", "note"}

Entries = dict[str, list[Deviation]]


def load(path: str | Path) -> Entries:
    """The entries of a baseline file, validated; SetupError (one line) on any problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SetupError(f"baseline {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SetupError(f"baseline {path}: cannot read it: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SetupError(f"baseline {path}: not valid TOML: {exc}") from None
    return parse(data, str(path))


def parse(data: Mapping[str, Any], source: str) -> Entries:
    """Validate parsed baseline data (see the module docstring) into entries per clause."""
    from rlconform.conformance.features import FEATURES
    from rlconform.conformance.registry import load_all

    unknown_top = sorted(set(data) - _TOP_KEYS)
    if unknown_top:
        raise SetupError(f"baseline {source}: unknown key(s) {unknown_top}")
    if data.get("format", FORMAT) != FORMAT:
        raise SetupError(f"baseline {source}: format {data.get('format')!r}, expected {FORMAT}")
    raw = data.get("deviation", [])
    if not isinstance(raw, list):
        raise SetupError(f"baseline {source}: 'deviation' must be an array of tables")
    clauses = load_all()
    entries: Entries = {}
    for number, item in enumerate(raw, start=1):
        where = f"baseline {source}: deviation #{number}"
        if not isinstance(item, dict):
            raise SetupError(f"{where}: must be a table")
        unknown_keys = sorted(set(item) - _ENTRY_KEYS)
        if unknown_keys:
            raise SetupError(f"{where}: unknown key(s) {unknown_keys}")
        clause_id = item.get("clause")
        if clause_id not in clauses:
            raise SetupError(f"{where}: unknown clause id {clause_id!r} (see 'rlconform clauses')")
        where = f"{where} ({clause_id})"
        checks = _strings(item.get("checks"), f"{where}: checks")
        if not checks:
            raise SetupError(
                f"{where}: name the checks it covers (a baseline entry never covers a whole "
                f"clause); checks of {clause_id}: {', '.join(clauses[clause_id].all_checks)}"
            )
        bad_checks = [c for c in checks if c not in clauses[clause_id].all_checks]
        if bad_checks:
            raise SetupError(
                f"{where}: unknown check(s) {bad_checks}; checks of {clause_id}: "
                f"{', '.join(clauses[clause_id].all_checks)}"
            )
        features = _strings(item.get("features", []), f"{where}: features")
        bad_features = [f for f in features if f not in FEATURES]
        if bad_features:
            raise SetupError(
                f"{where}: unknown feature id(s) {bad_features}; known: {', '.join(FEATURES)}"
            )
        rationale = item.get("rationale")
        if not isinstance(rationale, str) or not rationale.strip():
            raise SetupError(f"{where}: 'rationale' must be a non-empty string")
        configs = _strings(item.get("configs", []), f"{where}: configs")
        entry = Deviation(
            " ".join(rationale.split()), tuple(checks), tuple(features), configs=tuple(configs)
        )
        known = entries.setdefault(clause_id, [])
        if entry not in known:
            known.append(entry)
    return entries


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SetupError(f"{where} must be a list of strings")
    return list(value)


def merged(shipped: Mapping[str, Any], extra: Entries) -> dict[str, list[Deviation]]:
    """The shipped manifest with a baseline's entries on top (duplicates once)."""
    out = {clause_id: deviation_entries(value) for clause_id, value in shipped.items()}
    for clause_id, entries in extra.items():
        known = out.setdefault(clause_id, [])
        known.extend(entry for entry in entries if entry not in known)
    return out


def _string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_string(v) for v in values) + "]"


def render(
    target: Mapping[str, Any], rows: Iterable[Mapping[str, Any]], note: str | None = None
) -> str:
    """A baseline file: ``rows`` are dicts with clause, checks, features, rationale and
    optionally severity and observed (the message the run saw)."""
    lines = [
        f"# rlconform baseline: declared breaks of {target.get('name')} {target.get('version')}.",
        "# Each [[deviation]] covers failures of the clause's named checks on cases that have",
        "# at least one of the listed CONTRACT features (none listed: any case). Every entry",
        "# must be observed in a run (a stale entry fails, named); any other failure is new.",
        "# severity / observed: what the run that wrote this file saw (informational).",
        "",
        f"format = {FORMAT}",
        f"target = {_string(str(target.get('name', '')))}",
        f"version = {_string(str(target.get('version', '')))}",
    ]
    if note:
        lines.append(f"note = {_string(note)}")
    for row in rows:
        lines += [
            "",
            "[[deviation]]",
            f"clause = {_string(row['clause'])}",
            f"checks = {_list(row['checks'])}",
            f"features = {_list(row.get('features', ()))}",
            f"rationale = {_string(row['rationale'])}",
        ]
        if row.get("configs"):
            lines.append(f"configs = {_list(row['configs'])}")
        if row.get("severity"):
            lines.append(f"severity = {_string(row['severity'])}")
        if row.get("observed"):
            lines.append(f"observed = {_string(row['observed'])}")
    return "\n".join(lines) + "\n"
