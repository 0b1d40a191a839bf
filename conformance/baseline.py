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
    model = { grpo_std_ddof = 0 }             # optional: profile values that explain it
    composition = true                        # optional (step clauses): a break between
                                              # operations, not of one (see below)

What an entry excuses. An entry is in scope for a failure of one of its checks (under one
of its ``configs``) on a case that has at least one of its features. In scope is not
enough: the entry must explain the failing case, so that a second bug in the same check
still fails.

- With a ``model`` (profile keys and the values the framework uses instead, e.g.
  ``grpo_std_ddof = 0`` for a population std): the same check, run on the same case with
  the profile so overridden, must pass. Anything else the check finds is a new failure.
- With ``features``: the same case without the entry's features (``conformance/neutral.py``
  takes them out: NaN at padding becomes 0, a hole reward 0, an empty sample goes ...)
  must pass the check. A case that still fails without them fails for another reason: it
  is a new failure. Structural features (an empty batch, a group of one, a zero width: no
  "same case without it" exists) excuse a case that has them.
- With neither (``features = []``, a break seen on ordinary cases): every failure of the
  check. ``certify --write-baseline`` therefore writes a model whenever a legitimate
  profile value explains the break (``conformance/profile_values.py``), and otherwise a
  ``fingerprint`` (``conformance/fingerprint.py``): the minimal case and a digest of what
  the target returned on it. The case is replayed on every run; when the target answers
  it differently the clause fails, naming the entry (a second bug in the same code shows
  there, or a fix: review the entry). The report counts how each entry excused its
  failures (``excused_by``: ``model``, ``features``, ``presence``).

``composition = true`` marks a step entry whose break is in how the trainer composes its
operations (a score placed at a token the next stage carries nothing from): no operation's
own clause can show it. A step case it covers then says nothing about an operation's
finding when that finding's consequence is measured (``conformance/consequence.py``): the
divergence is this entry's, not the operation's.

Semantics are those of ``adapters.base.Deviation``: an entry must still be observed (a
stale entry fails, named), and a failure it does not cover is a new break. ``load``
validates every entry (unknown clause ids, checks, features and profile keys are one-line
errors, exit 2); ``render`` writes the file ``certify --write-baseline`` produces.
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
_ENTRY_KEYS = {
    "clause",
    "checks",
    "features",
    "rationale",
    "severity",
    "observed",
    "configs",
    "model",
    "fingerprint",
    "composition",
}
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
        model = _model(item.get("model"), where)
        pin = _fingerprint(item.get("fingerprint"), where)
        composition = item.get("composition", False)
        if not isinstance(composition, bool):
            raise SetupError(f"{where}: 'composition' must be true or false")
        if composition and not clause_id.startswith("step."):
            raise SetupError(
                f"{where}: 'composition' marks a break between operations: only a step "
                "clause's entry can have it"
            )
        entry = Deviation(
            " ".join(rationale.split()),
            tuple(checks),
            tuple(features),
            configs=tuple(configs),
            model=model,
            fingerprint=pin,
            composition=composition,
        )
        known = entries.setdefault(clause_id, [])
        if entry not in known:
            known.append(entry)
    return entries


def _model(value: Any, where: str) -> dict[str, Any]:
    """A ``model`` table: profile keys (``Profile`` fields or ``extra`` keys a clause reads)
    to scalar values."""
    from rlconform.conformance.profile_values import known_keys

    if value is None:
        return {}
    if not isinstance(value, dict) or not value:
        raise SetupError(f"{where}: 'model' must be a table of profile keys and values")
    known = known_keys()
    for key, item in value.items():
        if key not in known:
            raise SetupError(
                f"{where}: model names unknown profile key {key!r}; known: {', '.join(known)}"
            )
        if not isinstance(item, (bool, int, float, str)):
            raise SetupError(f"{where}: model value of {key!r} must be a number, bool or string")
    return dict(value)


def _fingerprint(value: Any, where: str) -> tuple[str, str] | tuple[()]:
    """A ``fingerprint`` table: ``case`` (JSON text) and ``digest`` (conformance/fingerprint.py)."""
    if value is None:
        return ()
    ok = isinstance(value, dict) and set(value) == {"case", "digest"}
    if not ok or not all(isinstance(v, str) for v in value.values()):
        raise SetupError(f"{where}: 'fingerprint' must be a table with string keys case and digest")
    try:
        json.loads(value["case"])
    except ValueError as exc:
        raise SetupError(f"{where}: fingerprint case is not JSON: {exc}") from None
    return (value["case"], value["digest"])


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    return repr(value)


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
        "# Each [[deviation]] covers failures of the clause's named checks that it explains:",
        "# the case without the listed CONTRACT features passes, or (model) the check passes",
        "# with the listed profile values; none listed: any case. Every entry must be",
        "# observed in a run (a stale entry fails, named); any other failure is new.",
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
        if row.get("model"):
            pairs = ", ".join(f"{k} = {_scalar(v)}" for k, v in sorted(dict(row["model"]).items()))
            lines.append(f"model = {{ {pairs} }}")
        if row.get("fingerprint"):
            case, digest = row["fingerprint"]
            lines.append(f"fingerprint = {{ case = {_string(case)}, digest = {_string(digest)} }}")
        if row.get("composition"):
            lines.append("composition = true")
        if row.get("severity"):
            lines.append(f"severity = {_string(row['severity'])}")
        if row.get("observed"):
            lines.append(f"observed = {_string(row['observed'])}")
    return "\n".join(lines) + "\n"
