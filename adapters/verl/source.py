"""Which verl is certified: the installed package, or a source tree given by
``--framework-path`` (a fork's checkout that is not installed).

A source tree is put first on ``sys.path`` before verl is imported, so its ``verl``
package shadows an installed one; the import is then checked to really come from that
tree. The report header records the tree's path and, when it is a git checkout, its
commit (read from ``.git`` without running git).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from rlconform.adapters.base import SetupError

MISSING = "verl is not installed: pip install -e '.[verl]' (or pass --framework-path CHECKOUT)"


@dataclasses.dataclass(frozen=True)
class VerlSource:
    """The imported verl: its version, where it was imported from, and its git commit."""

    version: str
    location: str
    framework_path: str | None = None
    commit: str | None = None


def _tree_root(framework_path: str) -> Path:
    root = Path(framework_path).expanduser().resolve()
    if (root / "verl" / "__init__.py").is_file():
        return root
    if root.name == "verl" and (root / "__init__.py").is_file():
        return root.parent
    raise SetupError(
        f"--framework-path {framework_path!r} holds no verl package (expected "
        f"{root / 'verl' / '__init__.py'})"
    )


def _already_imported_elsewhere(root: Path) -> str | None:
    module = sys.modules.get("verl")
    if module is None or getattr(module, "__file__", None) is None:
        return None
    location = Path(module.__file__).resolve()
    return None if root in location.parents else str(location)


def git_commit(root: Path) -> str | None:
    """The commit checked out at ``root`` (or an enclosing checkout), or None."""
    for folder in (root, *root.parents):
        git = folder / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            text = git.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            git = (folder / text.split(":", 1)[1].strip()).resolve()
        if not git.is_dir():
            continue
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(":", 1)[1].strip()
        for base in (git, _common_dir(git)):
            if (base / ref).is_file():
                return (base / ref).read_text(encoding="utf-8").strip()
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text(encoding="utf-8").splitlines():
                    if line.endswith(" " + ref):
                        return line.split(" ", 1)[0]
        return None
    return None


def _common_dir(git: Path) -> Path:
    common = git / "commondir"
    if common.is_file():
        return (git / common.read_text(encoding="utf-8").strip()).resolve()
    return git


def import_verl(framework_path: str | None = None) -> VerlSource:
    """Import verl (from ``framework_path`` when given); SetupError (one line) on failure."""
    root = _tree_root(framework_path) if framework_path else None
    if root is not None:
        elsewhere = _already_imported_elsewhere(root)
        if elsewhere is not None:
            raise SetupError(
                f"verl was already imported from {elsewhere} in this process; "
                f"--framework-path {framework_path!r} cannot replace it"
            )
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    try:
        import verl
    except ImportError as exc:
        if getattr(exc, "name", None) in (None, "verl"):
            raise SetupError(MISSING) from None
        raise SetupError(f"verl is present but does not import: {exc}") from None
    location = str(Path(getattr(verl, "__file__", "") or ".").resolve().parent)
    version = str(getattr(verl, "__version__", "unknown"))
    if root is None:
        return VerlSource(version=version, location=location)
    if root not in Path(location).parents:
        raise SetupError(
            f"--framework-path {framework_path!r}: verl was imported from {location} instead"
        )
    return VerlSource(version, location, str(root), git_commit(root))
