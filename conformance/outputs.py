"""Report output paths are checked before anything runs (no lost data, no lost results).

``check_outputs(outputs, inputs)`` raises ``SetupError`` (exit 2) when an output path
(``--json``, ``--junit``, ``--markdown``, ``--write-baseline``) resolves to an input file,
to the JSON sidecar of an input (``<stem>.json``, which ``record()`` writes beside a
``.safetensors`` recording), to a file inside an input folder (a memmap recording, a
framework checkout), to another output of the same run, or lies in a directory that does
not exist (so the results of a whole run are not lost to a traceback at the end).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from rlconform.adapters.base import SetupError


def _protected(inputs: Iterable[str]) -> list[tuple[Path, str]]:
    out = []
    for raw in inputs:
        path = Path(raw).expanduser().resolve()
        out.append((path, str(raw)))
        if path.suffix and not path.is_dir():
            out.append((path.with_suffix(".json"), f"{raw} (its sidecar)"))
    return out


def check_outputs(
    outputs: Mapping[str, str | None],
    inputs: Iterable[str] = (),
    updates: Mapping[str, Iterable[str]] | None = None,
) -> None:
    """Refuse (SetupError) an output that would overwrite an input or cannot be written.
    ``updates`` names, per output flag, inputs it may rewrite (``--write-baseline`` the
    ``--baseline`` it refreshes)."""
    protected = _protected(inputs)
    allowed = {
        flag: {Path(p).expanduser().resolve() for p in paths}
        for flag, paths in (updates or {}).items()
    }
    seen: dict[Path, str] = {}
    for flag, raw in outputs.items():
        if not raw:
            continue
        path = Path(raw).expanduser().resolve()
        for guarded, name in protected:
            if path == guarded and path in allowed.get(flag, ()):
                continue
            if path == guarded or guarded in path.parents and guarded.is_dir():
                raise SetupError(f"{flag} {raw}: would overwrite the input {name}")
        if path in seen:
            raise SetupError(f"{flag} {raw}: the same file as {seen[path]}")
        seen[path] = f"{flag} {raw}"
        if path.is_dir():
            raise SetupError(f"{flag} {raw}: is a directory")
        if not path.parent.is_dir():
            raise SetupError(f"{flag} {raw}: directory {path.parent} does not exist")
