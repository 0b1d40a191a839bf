"""Every row of the README's table of certified frameworks is a command CI runs: `.ci/run`
builds an environment with exactly that row's install command (plus the `dev` extra the
tests need) and runs the target's tests there in both tiers, whose slow tier is the full
certification against the shipped baseline (tests/verl, tests/trl, tests/openrlhf; slime and
ROLL certify from a checkout). A row edited without CI, or CI without the row, fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CI = (REPO / ".ci" / "run").read_text()

# target -> the test folder whose slow tier certifies it
TESTS = {
    "verl": "tests/verl",
    "slime": "tests/slime",
    "roll": "tests/roll",
    "trl": "tests/trl",
    "trl-liger": "tests/trl_liger",
    "openrlhf": "tests/openrlhf",
    "areal": "tests/areal",
    "skyrl": "tests/skyrl",
    "unsloth": "tests/unsloth",
}


def _specs(command: str) -> set[str]:
    """What one or more `pip install` commands install: requirement specs, and each extra
    of the project as `.[name]`; options (--no-deps, --quiet) are how, not what."""
    specs: set[str] = set()
    for part in re.split(r"&&|\n", command):
        words = shlex.split(part)
        if "install" not in words:
            continue
        for word in words[words.index("install") + 1 :]:
            if word.startswith("-"):
                continue
            if word.startswith(".["):
                specs |= {f".[{extra}]" for extra in word[2:-1].split(",")}
            else:
                specs.add(word)
    return specs


def _rows() -> list[tuple[str, str, set[str]]]:
    section = README.split("### Certified frameworks", 1)[1].split("\n\n", 2)[1]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        commands = re.findall(r"`(pip install[^`]*)`", cells[1])
        if commands:
            rows.append((cells[0].strip("`"), cells[1], _specs(" && ".join(commands))))
    return rows


def _environments() -> dict[str, set[str]]:
    """`.ci/run`'s environments and what each installs (the CPU torch wheel aside)."""
    envs: dict[str, set[str]] = {}
    for env, rest in re.findall(r"(\.venv-ci[\w-]*)/bin/python -m pip install (.*)", CI):
        envs.setdefault(env, set()).update(_specs("pip install " + rest))
    return envs


def _tested_in(env: str) -> set[str]:
    """The test folders `.ci/run` runs in both tiers in that environment."""
    if env == ".venv-ci":  # the README's `pytest` and `pytest -m slow`: every folder
        return set(TESTS.values())
    pairs = re.search(r"for pair in ([^;]+);", CI).group(1).split()
    return {folder for name, folder in (p.split(":") for p in pairs) if env == f".venv-ci-{name}"}


ROWS = _rows()


def test_the_table_is_read():
    targets = {row[0] for row in ROWS}
    assert {
        "verl",
        "slime",
        "roll",
        "trl",
        "trl-liger",
        "openrlhf",
        "areal",
        "skyrl",
        "unsloth",
    } <= targets, targets
    assert len([r for r in ROWS if r[0] == "verl"]) == 3  # 0.9.1, 0.8.0, 0.7.1


@pytest.mark.parametrize("target, cell, specs", ROWS, ids=[f"{r[0]}:{sorted(r[2])}" for r in ROWS])
def test_each_row_is_an_environment_ci_installs_and_certifies(target, cell, specs):
    envs = _environments()
    matching = [
        env
        for env, installed in envs.items()
        if installed - {".[dev]"} - specs <= _others_allowed(env) and specs <= installed
    ]
    assert matching, (
        f"README row {target!r} ({cell[:80]}...) installs {sorted(specs)}; no .ci/run "
        f"environment installs exactly that: {envs}"
    )
    folder = TESTS[target]
    assert any(folder in _tested_in(env) for env in matching), (target, matching)


def _others_allowed(env: str) -> set[str]:
    """The main environment is the README's own install (verl 0.9.1) and carries the extras
    of the checkout rows (slime, ROLL) beside it; a framework environment installs its row
    and nothing else."""
    return {".[verl]", ".[slime]", ".[roll]"} if env == ".venv-ci" else set()


def test_a_row_that_ci_does_not_install_is_found():
    """The check can fail: a row for verl 0.8.1 matches no environment."""
    envs = _environments()
    specs = {"verl==0.8.1", "pyarrow==21.0.0"}
    assert not [e for e, got in envs.items() if specs <= got]
