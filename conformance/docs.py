"""``rlconform docs --out DIR``: the contract reference rendered from the code itself.

One page per area and an index. Each clause (anchored by its id) shows its statement, the
operations a target implements for it, the profile keys it reads with their contract
defaults, the formulas stated by the oracle functions that implement it, its worked
examples (fixture cases rebuilt now, so the expected values are computed live by the
oracle) and its status across the committed certification reports
(``docs/certification/*.json``). Output is deterministic: same code and reports, same pages.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlconform.conformance.registry import AREAS, Clause, load_all

# Where the pages are committed relative to the repository root (links to fixture files).
FIXTURE_LINK = "../../fixtures/cases"
LONG_LIST = 12  # flat lists longer than this are abbreviated in the worked examples


def _reports(report_dir: Path) -> list[tuple[str, dict[str, dict[str, Any]]]]:
    """(report name, {clause id: entry}) for each committed JSON report, sorted by name."""
    found = []
    for path in sorted(report_dir.glob("*.json")) if report_dir.exists() else []:
        data = json.loads(path.read_text(encoding="utf-8"))
        target = data.get("target", {})
        label = f"{target.get('name', path.stem)} {target.get('version', '')}".strip()
        profile = target.get("profile")
        if profile:
            label += f" ({profile})"
        settings = target.get("settings")
        if settings and settings != "trainer defaults":
            label += f", {settings.split(' (')[0]} settings"
        found.append((label, {c["id"]: c for c in data.get("clauses", [])}))
    return found


def oracle_functions() -> dict[str, list[tuple[str, str]]]:
    """Clause id -> [(qualified name, docstring)] of the oracle functions that name it.

    An oracle docstring starts with the clause id (``"reward.place_last: ..."``), so the
    formula shown in the docs is the one the oracle itself states.
    """
    import importlib
    import pkgutil

    import rlconform.oracle as oracle_pkg

    found: dict[str, list[tuple[str, str]]] = {}
    for info in sorted(pkgutil.iter_modules(oracle_pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"rlconform.oracle.{info.name}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ != module.__name__ or name.startswith("_"):
                continue
            doc = inspect.getdoc(fn) or ""
            head = doc.split(":", 1)[0].strip()
            if head and " " not in head and "." in head:
                found.setdefault(head, []).append((f"{info.name}.{name}", doc))
    return found


# ---- profile keys ---------------------------------------------------------------------

_GET = re.compile(
    r"profile\.get\(\s*\"([A-Za-z_][A-Za-z0-9_]*)\"\s*(?:,\s*([^()\n]*(?:\([^()\n]*\))?[^()\n]*?))?\)"
)
_ATTR = re.compile(r"profile\.([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()")


def _related_functions(fn: Callable[..., Any], depth: int = 2) -> list[Callable[..., Any]]:
    """``fn``, the module functions it calls and the callables in its closure, ``depth`` deep."""
    seen: list[Callable[..., Any]] = []

    def visit(f: Any, level: int) -> None:
        if not inspect.isfunction(f) or f in seen:
            return
        seen.append(f)
        if level == 0:
            return
        for name in f.__code__.co_names:
            g = f.__globals__.get(name)
            if inspect.isfunction(g) and g.__module__ == f.__module__:
                visit(g, level - 1)
        for cell in f.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if inspect.isfunction(value):
                visit(value, level - 1)
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                for item in dataclasses.astuple(value):
                    if inspect.isfunction(item):
                        visit(item, level - 1)

    visit(fn, depth)
    return seen


def _default_text(expr: str | None, fn: Callable[..., Any]) -> str:
    """The contract default as written in the source, a module constant resolved."""
    if expr is None:
        return "None"
    expr = expr.strip()
    if re.fullmatch(r"[A-Z_][A-Z0-9_]*", expr) and expr in fn.__globals__:
        return repr(fn.__globals__[expr])
    try:
        return repr(ast.literal_eval(expr))
    except (ValueError, SyntaxError):
        return expr


def profile_keys(clause: Clause) -> dict[str, str]:
    """Profile key -> contract default (as source text) for every key the clause's check reads.

    Keys that are fields of ``Profile`` report that field's default (what ``Profile.get``
    returns); ``extra`` keys report the default written at the ``profile.get`` call.
    """
    from rlconform.adapters.base import Profile

    fields = {f.name: f for f in dataclasses.fields(Profile)}
    keys: dict[str, str] = {}
    for fn in _related_functions(clause.check):
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            continue
        for match in _GET.finditer(source):
            key = match.group(1)
            if key in fields:
                keys[key] = repr(fields[key].default)
            else:
                keys.setdefault(key, _default_text(match.group(2), fn))
        for match in _ATTR.finditer(source):
            key = match.group(1)
            if key in fields and key not in ("name", "extra", "dtype"):
                keys[key] = repr(fields[key].default)
    return dict(sorted(keys.items()))


# ---- worked examples ------------------------------------------------------------------


def _abbreviate(value: Any) -> Any:
    """Long flat lists shortened for reading (the fixture file holds them in full)."""
    if isinstance(value, dict):
        return {k: _abbreviate(v) for k, v in value.items()}
    if isinstance(value, list):
        flat = all(not isinstance(v, (list, dict)) for v in value)
        if flat and len(value) > LONG_LIST:
            return [*value[:6], f"... {len(value) - 6} more (see the fixture file)"]
        return [_abbreviate(v) for v in value]
    return value


def _pretty(value: Any) -> str:
    from rlconform.fixtures.registry import dump

    return dump(_abbreviate(value))


def _examples_section(clause: Clause, cases: list[Any]) -> list[str]:
    if not cases:
        return []
    link = f"{FIXTURE_LINK}/{clause.id}.json"
    lines = [
        "### Worked examples",
        "",
        f"Fixture cases of this clause, rebuilt by the oracle when these pages were rendered; "
        f"the same cases, with their tolerances, are in [`fixtures/cases/{clause.id}.json`]"
        f"({link}). `certify` runs each as a pinned example of the clause.",
        "",
    ]
    for case in cases:
        data = case.as_json()
        lines += [
            f'<a id="{clause.id}/{case.name}"></a>',
            f"#### `{case.name}`",
            "",
            case.description,
            "",
            "Inputs (the clause's case):",
            "",
            "```json",
            _pretty(data["inputs"]),
            "```",
            "",
            "Expected (oracle):",
            "",
            "```json",
            _pretty(data["expected"]),
            "```",
            "",
        ]
    return lines


# ---- pages ----------------------------------------------------------------------------


def _status_table(clause: Clause, reports: list) -> list[str]:
    if not reports:
        return []
    lines = ["### Certification status", "", "| target | status | note |", "|---|---|---|"]
    for label, entries in reports:
        entry = entries.get(clause.id)
        status = entry["status"] if entry else "not run"
        note = " ".join((entry or {}).get("message", "").split()).replace("|", "\\|")
        if len(note) > 300:
            note = note[:297] + "..."
        lines.append(f"| {label} | {status} | {note} |")
    return [*lines, ""]


def _clause_section(clause: Clause, cases: list[Any], reports: list, formulas: dict) -> list[str]:
    lines = [f'<a id="{clause.id}"></a>', "", f"## `{clause.id}` — {clause.title}", ""]
    lines += [clause.statement, ""]
    lines.append(
        "**Operations:** "
        + (
            ", ".join(f"`{op}`" for op in clause.ops)
            or "(every operation of the area the target implements)"
        )
    )
    lines.append("")
    keys = profile_keys(clause)
    if keys:
        lines.append(
            "**Profile keys** (contract default): "
            + ", ".join(f"`{key}` ({default})" for key, default in keys.items())
        )
        lines.append("")
    note = " ".join((inspect.getdoc(clause.check) or "").split()).replace("``", "`")
    if note and note != clause.statement:
        lines += ["**Check notes:** " + note, ""]
    for qualname, doc in formulas.get(clause.id, []):
        lines += [f"Oracle `rlconform.oracle.{qualname}`:", "", "```text", doc, "```", ""]
    lines += _examples_section(clause, cases)
    lines += _status_table(clause, reports)
    return lines


def _module_notes(clauses: list[Clause]) -> list[str]:
    """The clause modules' docstrings: operations, profile keys and tolerances of the area."""
    docs: list[str] = []
    for clause in clauses:
        module = inspect.getmodule(clause.check)
        doc = inspect.getdoc(module) if module is not None else None
        if doc and doc not in docs and "\n" in doc.strip():
            docs.append(doc)
    lines: list[str] = []
    for doc in docs:
        lines += ["## How the checks work", "", "```text", doc, "```", ""]
    return lines


def render(report_dir: Path) -> dict[str, str]:
    """Page name -> Markdown text."""
    from rlconform.fixtures.registry import build_all

    clauses = list(load_all().values())
    cases_by_clause: dict[str, list[Any]] = {}
    for case in build_all():
        cases_by_clause.setdefault(case.clause, []).append(case)
    reports = _reports(report_dir)
    formulas = oracle_functions()
    pages: dict[str, str] = {}
    index = [
        "# The postprocess contract — reference",
        "",
        "Generated by `rlconform docs --out docs/contract`; do not edit by hand (a test checks "
        "that these pages are up to date). The specification itself is `CONTRACT.md`; these "
        "pages show, per clause, what the conformance suite checks: the statement, the "
        "operations, the profile keys, the oracle's formula, worked examples computed by the "
        "oracle from the golden fixtures (`fixtures/cases/`, see `fixtures/README.md`) and the "
        "status in the committed certification reports.",
        "",
        "| area | clauses | fixture cases |",
        "|---|---|---|",
    ]
    for area in AREAS:
        in_area = [c for c in clauses if c.area == area]
        if not in_area:
            continue
        n_cases = sum(len(cases_by_clause.get(c.id, [])) for c in in_area)
        links = ", ".join(f"[`{c.id}`]({area}.md#{c.id})" for c in in_area)
        index.append(f"| [{area}]({area}.md) | {links} | {n_cases} |")
        page = [f"# Area `{area}`", "", "[index](index.md)", ""]
        page += [f"- [`{c.id}`](#{c.id}) — {c.title}" for c in in_area] + [""]
        page += _module_notes(in_area)
        for clause in in_area:
            page += _clause_section(clause, cases_by_clause.get(clause.id, []), reports, formulas)
        pages[f"{area}.md"] = "\n".join(page).rstrip() + "\n"
    if reports:
        index += [
            "",
            "## Certification reports",
            "",
            "| target | " + " | ".join(("pass", "fail", "deviation", "skip", "error")) + " |",
            "|---" * 6 + "|",
        ]
        for label, entries in reports:
            counts = {s: 0 for s in ("pass", "fail", "deviation", "skip", "error")}
            for entry in entries.values():
                counts[entry["status"]] = counts.get(entry["status"], 0) + 1
            index.append(f"| {label} | " + " | ".join(str(v) for v in counts.values()) + " |")
    pages["index.md"] = "\n".join(index).rstrip() + "\n"
    return pages


def write(out: Path, report_dir: Path) -> list[Path]:
    """Write every page into ``out`` and remove stale ``*.md`` pages left there."""
    out.mkdir(parents=True, exist_ok=True)
    pages = render(report_dir)
    for stale in sorted(out.glob("*.md")):
        if stale.name not in pages:
            stale.unlink()
    written = []
    for name, text in pages.items():
        path = out / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written
