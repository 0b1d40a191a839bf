"""The clause catalogue (CONTRACT §2) and the typed operation Protocol, generated from the
live registry.

``rlconform clauses`` lists the catalogue, shipped as data (``catalogue.json``), so that it
answers without importing torch or a clause module. Each row: the clause's id, area, title,
statement, checks, §0a features, its operations with their signatures, and the profile keys
its check reads by name. Signatures are those of ``torchref``, the reference binding of the
padded-layout protocol. ``adapters/operations.py`` is the same operations as a
``typing.Protocol`` (an adapter annotated with it gets a type-checker error for a wrong
signature). ``CONTRACT.md`` beside this module is the spec the clause ids refer to, copied
from the project's ``../shared/CONTRACT.md``. All three are generated here and a test keeps
them equal to their sources:

    python -m rlconform.conformance.catalogue --write
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CATALOGUE = Path(__file__).with_name("catalogue.json")
# The spec, shipped with the package (``rlconform contract``), copied from the project's
# ../shared/CONTRACT.md by --write; the test keeps the two identical.
CONTRACT = Path(__file__).with_name("CONTRACT.md")
SHARED_CONTRACT = Path(__file__).resolve().parents[2] / "shared" / "CONTRACT.md"
PROTOCOL = Path(__file__).resolve().parents[1] / "adapters" / "operations.py"

# profile.get("key") / profile.key / profile.extra.get("key") inside a check's source
_PROFILE_READ = re.compile(
    r"profile\.(?:extra\.)?(?:get\(\s*[\"']([a-z_0-9]+)[\"']|([a-z_0-9]+)\b)"
)
_NOT_KEYS = {"get", "choices", "as_dict", "extra", "name"}
# annotation names of torchref's signatures -> what the Protocol imports for them
_ANNOTATION_IMPORTS = {
    "StepBatch": "from rlconform.adapters.step_io import StepBatch, StepOutput",
    "StepOutput": "from rlconform.adapters.step_io import StepBatch, StepOutput",
    "TrainerConfig": "from rlconform.conformance.trainer_config import TrainerConfig",
    "TensorDict": "from tensordict import TensorDict",
}
# torchref's own batch container: any target's batch container takes its place
_GENERIC = {"TorchBatch": "Any"}


def load() -> list[dict[str, Any]]:
    """The shipped catalogue (no torch import)."""
    return json.loads(CATALOGUE.read_text(encoding="utf-8"))


def build() -> list[dict[str, Any]]:
    """The catalogue computed from the registry (imports every clause module and torchref)."""
    from rlconform.adapters.torchref import TorchRef
    from rlconform.conformance.registry import load_all

    rows = []
    for clause in load_all().values():
        rows.append(
            {
                "id": clause.id,
                "area": clause.area,
                "title": clause.title,
                "statement": clause.statement,
                "checks": list(clause.all_checks),
                "features": list(clause.meets),
                "operations": [
                    {"name": op, "signature": signature(getattr(TorchRef, op))} for op in clause.ops
                ],
                "profile_keys": profile_keys(clause),
            }
        )
    return rows


def signature(method: Any) -> str:
    """``(self, a: T, ...) -> R`` with torchref's batch container written as ``Any``."""
    sig = inspect.signature(method)

    def plain(annotation: Any) -> Any:
        if annotation is inspect.Signature.empty:
            return annotation
        text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
        for name, generic in _GENERIC.items():
            text = re.sub(rf"\b{name}\b", generic, text)
        return _Annotation(text)

    def default(value: Any) -> Any:  # a string default in double quotes, as ruff writes it
        return _Annotation(json.dumps(value)) if isinstance(value, str) else value

    params = [
        p.replace(annotation=plain(p.annotation), default=default(p.default))
        for p in sig.parameters.values()
    ]
    return str(sig.replace(parameters=params, return_annotation=plain(sig.return_annotation)))


class _Annotation(str):
    """An annotation written as its source text (no quotes) in a printed signature."""

    def __repr__(self) -> str:
        return str(self)


def profile_keys(clause: Any) -> list[str]:
    """Profile keys the clause's check reads by name: in the check, in the functions of its
    module registered next to its id (a table entry ``Estimator("adv.grpo", ..., _grpo_expect)``)
    and in the module functions those name, to any depth. A key read only inside the oracle
    through ``profile.choices()`` is not listed: the check passes every choice there."""
    from rlconform.adapters.base import Profile

    fields = {f for f in Profile.__dataclass_fields__} - _NOT_KEYS
    keys: set[str] = set()
    for source in _sources(clause.check, getattr(clause, "id", None)):
        for by_get, by_attr in _PROFILE_READ.findall(source):
            key = by_get or by_attr
            if by_get or key in fields:
                keys.add(key)
    return sorted(keys - _NOT_KEYS)


def _sources(function: Any, clause_id: str | None = None) -> Iterable[str]:
    """The source of ``function``, of the module functions named in a call, tuple or dict
    that also holds ``clause_id``, and of the module functions these name, transitively."""
    module = sys.modules[function.__module__]
    seen: set[str] = set()
    todo = [function, *_registered_with(module, clause_id)]
    while todo:
        fn = inspect.unwrap(todo.pop())
        if fn.__name__ in seen:
            continue
        seen.add(fn.__name__)
        try:
            source = textwrap.dedent(inspect.getsource(fn))
        except (OSError, TypeError):
            continue
        yield source
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name) and node.id not in seen:
                other = getattr(module, node.id, None)
                if inspect.isfunction(other) and other.__module__ == module.__name__:
                    todo.append(other)


def _registered_with(module: Any, clause_id: str | None) -> list[Any]:
    """Module functions named in the same call, tuple or dict as the literal ``clause_id``."""
    if clause_id is None:
        return []
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts = [*node.args, *(k.value for k in node.keywords)]
        elif isinstance(node, (ast.Tuple, ast.List)):
            parts = list(node.elts)
        else:
            continue
        if not any(isinstance(p, ast.Constant) and p.value == clause_id for p in parts):
            continue
        for part in parts:
            other = getattr(module, part.id, None) if isinstance(part, ast.Name) else None
            if inspect.isfunction(other) and other.__module__ == module.__name__:
                found.append(other)
    return found


def protocol_source(rows: list[dict[str, Any]]) -> str:
    """``adapters/operations.py``: every operation of the catalogue as a Protocol method."""
    ops: dict[str, str] = {}
    for row in rows:
        for op in row["operations"]:
            ops.setdefault(op["name"], op["signature"])
    used = " ".join(ops.values())
    imports = sorted({v for k, v in _ANNOTATION_IMPORTS.items() if re.search(rf"\b{k}\b", used)})
    lines = [
        '"""Every operation a clause calls, as a typed Protocol (generated by',
        "``python -m rlconform.conformance.catalogue --write``; do not edit).",
        "",
        "An adapter implements any subset: an operation it lacks skips its clauses. Annotate a",
        "full adapter's class or factory with ``Operations`` to have a type checker compare",
        "its signatures with these (torchref's, the reference binding). rlconform itself only",
        "duck-types: any object with these methods (and ``name``, ``version``, ``profile``)",
        'is a target."""',
        "",
        "from __future__ import annotations",
        "",
        "from collections.abc import Mapping, Sequence",
        "from typing import TYPE_CHECKING, Any, Protocol",
        "",
        "if TYPE_CHECKING:",
        "    import torch",
        *(f"    {line}" for line in imports if not line.startswith("from rlconform")),
        "",
        *(
            f"    {line}"
            for line in sorted(
                ["from rlconform.adapters.base import Profile"]
                + [x for x in imports if x.startswith("from rlconform")]
            )
        ),
        "",
        "__all__ = ['Operations']".replace("'", '"'),
        "",
        "",
        "class Operations(Protocol):",
        '    """The operations of the padded-layout protocol (CONTRACT §2), by name."""',
        "",
        "    name: str",
        "    version: str",
        "    profile: Profile",
    ]
    for name in sorted(ops):
        lines += ["", f"    def {name}{ops[name]}: ..."]
    text = "\n".join(lines) + "\n"
    return _formatted(text)


def _formatted(text: str) -> str:
    """Wrap long ``def`` lines the way ``ruff format`` leaves them (one parameter a line)."""
    out = []
    for line in text.splitlines():
        if len(line) <= 100 or not line.startswith("    def "):
            out.append(line)
            continue
        head, _, rest = line.partition("(")
        params, _, tail = rest.rpartition(")")
        out.append(f"{head}(")
        out += [f"        {p.strip()}," for p in _split_params(params)]
        out.append(f"    ){tail}")
    return "\n".join(out) + "\n"


def _split_params(params: str) -> list[str]:
    """Split a parameter list at top-level commas."""
    parts, depth, current = [], 0, ""
    for char in params:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rows = build()
    catalogue = json.dumps(rows, indent=2) + "\n"
    protocol = protocol_source(rows)
    files = [(CATALOGUE, catalogue), (PROTOCOL, protocol)]
    if SHARED_CONTRACT.exists():
        files.append((CONTRACT, SHARED_CONTRACT.read_text(encoding="utf-8")))
    if args == ["--write"]:
        for path, text in files:
            path.write_text(text, encoding="utf-8")
        return 0
    stale = [str(p) for p, text in files if not p.exists() or p.read_text(encoding="utf-8") != text]
    if stale:
        print(f"stale: {', '.join(stale)}; run python -m rlconform.conformance.catalogue --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


def contract_section(text: str, wanted: str | None) -> str | None:
    """The section of CONTRACT.md ``wanted`` names (``0a``, ``§0b``, ``adv``, ``2``), or the
    whole text for None; None when no heading matches."""
    if not wanted:
        return text
    key = wanted.strip().lstrip("§").rstrip(".").lower()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"(#+)\s+(.*)", line)
        if not match:
            continue
        title = match.group(2).lower()
        number = title.split()[0].rstrip(".")
        if key in (number, title.split(" (")[0]):
            level = len(match.group(1))
            end = next(
                (j for j in range(i + 1, len(lines)) if re.match(rf"#{{1,{level}}}\s", lines[j])),
                len(lines),
            )
            return "\n".join(lines[i:end]).rstrip() + "\n"
    return None
