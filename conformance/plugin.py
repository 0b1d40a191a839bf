"""pytest plugin (``pytest11`` entry point ``rlconform``): certify a target inside pytest.

``pytest -p rlconform --rlc-target mypkg.mod:Impl [--rlc-profile ci] [--rlc-only 'adv.*']``
adds one test item per clause, named by its clause id. Deviations pass (their rationale is
recorded in ``user_properties`` and hence in JUnit XML); unimplemented operations skip.
Without ``--rlc-target`` the plugin adds nothing. Heavy imports happen only when used.
"""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("rlconform", "rlconform postprocess-contract certification")
    group.addoption(
        "--rlc-target", default=None, help="adapter name or module:attribute to certify"
    )
    group.addoption("--rlc-profile", default="ci", help="run profile: ci, dev or thorough")
    group.addoption("--rlc-only", default=None, help="glob(s) of clause ids, comma-separated")
    group.addoption("--rlc-device", default="cpu", help="cpu or cuda")
    group.addoption("--rlc-framework-path", default=None, help="framework source checkout")
    group.addoption(
        "--rlc-fail-on",
        default="hardening",
        choices=["nominal", "edge", "hardening"],
        help="fail an item only at this severity or a more serious one",
    )


def pytest_report_header(config: Any) -> list[str] | None:
    spec = config.getoption("--rlc-target", default=None)
    if not spec:
        return None
    target = _target(config)
    info = target.describe()
    return [
        f"rlconform target: {info['name']} {info['version']} (adapter profile {info['profile']}, "
        f"run profile {config.getoption('--rlc-profile')}, device {config.getoption('--rlc-device')})"
    ]


def _target(config: Any) -> Any:
    cached = getattr(config, "_rlconform_target", None)
    if cached is None:
        from rlconform.adapters.registry import load_target

        cached = load_target(
            config.getoption("--rlc-target"),
            device=config.getoption("--rlc-device"),
            framework_path=config.getoption("--rlc-framework-path"),
        )
        config._rlconform_target = cached
    return cached


class ClauseItem(pytest.Item):
    """One contract clause as a pytest test item."""

    def __init__(self, *, clause: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.clause = clause
        self.user_properties.append(("clause", clause.id))

    def runtest(self) -> None:
        from rlconform.conformance.profiles import get_run_profile
        from rlconform.conformance.runner import run_clause

        config = self.config
        result = run_clause(
            self.clause,
            _target(config),
            get_run_profile(config.getoption("--rlc-profile")),
            device=config.getoption("--rlc-device"),
        )
        self.user_properties.append(("status", result.status))
        if result.severity:
            self.user_properties.append(("severity", result.severity))
            self.user_properties.append(("features", ",".join(result.features)))
        if result.status == "skip":
            pytest.skip(result.message)
        if result.status == "deviation":
            self.user_properties.append(("deviation", result.message))
            return
        if result.status in ("fail", "error") and not result.fails_at(
            config.getoption("--rlc-fail-on")
        ):
            self.user_properties.append(("below_fail_on", result.message))
            return
        if result.status in ("fail", "error"):
            text = result.message
            if result.counterexample and "reproducer" in result.counterexample:
                text += "\n\nReproducer:\n" + result.counterexample["reproducer"]
            if result.traceback:
                text += "\n\n" + result.traceback
            if result.severity:
                text = f"[{result.severity}: {', '.join(result.features) or 'no feature'}] " + text
            raise ClauseFailed(text)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, ClauseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int, str]:
        return "rlconform", 0, f"clause {self.clause.id}"


class ClauseFailed(Exception):
    """A clause failed or errored under the plugin."""


def pytest_collection_modifyitems(session: Any, config: Any, items: list) -> None:
    if not config.getoption("--rlc-target", default=None):
        return
    from rlconform.conformance.registry import select

    for clause in select(config.getoption("--rlc-only")):
        items.append(ClauseItem.from_parent(session, name=clause.id, clause=clause))
