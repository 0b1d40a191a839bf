"""pytest plugin (``pytest11`` entry point ``rlconform``): certify a target inside pytest.

``pytest -p rlconform --rlc-target mypkg.mod:Impl [--rlc-profile ci] [--rlc-only 'adv.*']``
adds one test item per clause (CONTRACT §2), node id ``rlconform::<clause id>``, JUnit
classname ``rlconform``. Select clauses the way pytest users do: ``-k grpo``, ``--lf``,
``--deselect rlconform::adv.gae`` or a positional ``rlconform::adv.grpo`` (the same as
``--rlc-only adv.grpo``; ``rlconform`` alone: every clause).

Each item runs the clause through the same ``runner.certify`` as ``rlconform certify``
(trainer configs, seed, consequence). Outcomes:

- pass: the clause holds, or its break is a declared deviation (the rationale goes to
  ``user_properties``, hence to JUnit XML);
- skip: the target does not implement the clause's operations;
- xfail: a failure below ``--rlc-fail-on`` or outside ``--rlc-fail-on-consequence``
  (visible as ``x``, never a silent pass);
- fail: every other failure or error, with its reproducer.

Every ``--rlc-*`` option is checked once, at configure time: a wrong target, profile,
clause glob, baseline, trainer config or framework path is one usage error (exit 4), not one
failing item per clause. Under pytest-xdist (``-n 2``) each worker loads the target once and
runs the clauses it is given; the collection is the same on every worker. Without
``--rlc-target`` the plugin adds nothing. Heavy imports happen only when used.
"""

from __future__ import annotations

from typing import Any

import pytest

PREFIX = "rlconform"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("rlconform", "rlconform postprocess-contract certification")
    group.addoption(
        "--rlc-target", default=None, help="adapter name or module:attribute to certify"
    )
    group.addoption("--rlc-profile", default="ci", help="run profile: ci, dev or thorough")
    group.addoption("--rlc-only", default=None, help="glob(s) of clause ids, comma-separated")
    group.addoption("--rlc-device", default="cpu", help="cpu or cuda")
    group.addoption("--rlc-seed", default=None, type=int, help="seed of the generated cases")
    group.addoption(
        "--rlc-max-examples", default=None, type=int, metavar="N", help="examples per clause"
    )
    group.addoption(
        "--rlc-timeout", default=None, type=float, metavar="SECONDS", help="limit per clause"
    )
    group.addoption("--rlc-framework-path", default=None, help="framework source checkout")
    group.addoption(
        "--rlc-baseline",
        action="append",
        default=[],
        metavar="FILE",
        help="baseline file (TOML) of declared breaks on top of the adapter's own; repeatable",
    )
    group.addoption(
        "--rlc-config",
        action="append",
        default=[],
        metavar="NAME",
        help="trainer config of the step clauses (repeatable; default: every declared one)",
    )
    group.addoption(
        "--rlc-fail-on",
        default="hardening",
        choices=["nominal", "edge", "hardening"],
        help="fail an item only at this severity or a more serious one (others: xfail)",
    )
    group.addoption(
        "--rlc-fail-on-consequence",
        default=None,
        metavar="LIST",
        help="fail an item only for these consequences (CONTRACT §0b; others: xfail)",
    )


def pytest_configure(config: Any) -> None:
    """Check every ``--rlc-*`` option once; a bad one is a single usage error."""
    config.addinivalue_line("markers", "rlconform: a clause item of the rlconform plugin")
    _take_positional_selection(config)
    if not config.getoption("--rlc-target", default=None):
        return
    from rlconform.adapters.base import SetupError

    try:
        config._rlconform = _Settings.from_config(config)
    except SetupError as exc:
        raise pytest.UsageError(f"rlconform: {exc}") from None


def _take_positional_selection(config: Any) -> None:
    """Positional ``rlconform`` / ``rlconform::CLAUSE`` arguments are a clause selection,
    not paths: moved from ``config.args`` into ``--rlc-only``."""
    from pathlib import Path

    wanted, rest = [], []
    for arg in config.args:
        if Path(config.invocation_params.dir, arg.split("::")[0]).exists():
            rest.append(arg)  # a real path that happens to be named rlconform
        elif arg == PREFIX or arg.startswith(PREFIX + "::"):
            wanted.append(arg[len(PREFIX) + 2 :] or "*")
        else:
            rest.append(arg)
    if not wanted:
        return
    if not config.getoption("--rlc-target", default=None):
        raise pytest.UsageError(f"rlconform: {wanted[0]!r} selects clauses; give --rlc-target")
    config.args[:] = rest
    only = config.getoption("--rlc-only")
    if only and only != ",".join(wanted):
        raise pytest.UsageError(
            "rlconform: give clauses either as rlconform::CLAUSE arguments or with --rlc-only"
        )
    config.option.rlc_only = ",".join(wanted)


class _Settings:
    """The validated plugin options and the loaded target."""

    def __init__(self, **values: Any):
        self.__dict__.update(values)

    @classmethod
    def from_config(cls, config: Any) -> _Settings:
        from rlconform.adapters.base import SetupError
        from rlconform.adapters.registry import check_spec, load_target
        from rlconform.conformance import baseline, trainer_config
        from rlconform.conformance.cli import _clause_hint, _consequences
        from rlconform.conformance.profiles import get_run_profile
        from rlconform.conformance.registry import select

        option = config.getoption
        spec = option("--rlc-target")
        check_spec(spec)
        try:
            run_profile = get_run_profile(option("--rlc-profile"))
        except KeyError as exc:
            raise SetupError(f"--rlc-profile: {exc.args[0]}") from None
        limits = {"max_examples": option("--rlc-max-examples"), "timeout": option("--rlc-timeout")}
        for name, value in limits.items():
            if value is not None and value <= 0:
                raise SetupError(f"--rlc-{name.replace('_', '-')} {value}: must be positive")
        from types import SimpleNamespace

        from rlconform.conformance.cli import _with_limits

        run_profile = _with_limits(run_profile, SimpleNamespace(**limits))
        device = option("--rlc-device")
        if device not in ("cpu", "cuda"):
            raise SetupError(f"--rlc-device {device!r}: expected cpu or cuda")
        if device == "cuda":
            from rlconform.conformance.cli import _check_device

            _check_device(device)
        path = option("--rlc-framework-path")
        if path is not None:
            from pathlib import Path

            if not Path(path).expanduser().is_dir():
                raise SetupError(f"--rlc-framework-path {path}: no such directory")
        extra = [baseline.load(p) for p in option("--rlc-baseline")]
        consequences = _consequences(option("--rlc-fail-on-consequence"))
        only = option("--rlc-only")
        clauses = select(only)
        if not clauses:
            raise SetupError(f"--rlc-only {only!r} matches no clause{_clause_hint(only)}")
        target = load_target(spec, device=device, framework_path=path)
        for entries in extra:
            target.deviations = baseline.merged(target.deviations, entries)
        configs = option("--rlc-config") or None
        trainer_config.select(target, configs)
        return cls(
            target=target,
            run_profile=run_profile,
            device=device,
            seed=option("--rlc-seed"),
            clauses=clauses,
            configs=configs,
            fail_on=option("--rlc-fail-on"),
            consequences=consequences,
        )


def pytest_report_header(config: Any) -> list[str] | None:
    settings = getattr(config, "_rlconform", None)
    if settings is None:
        return None
    info = settings.target.describe()
    configs = ", ".join(settings.configs) if settings.configs else "every declared one"
    return [
        f"rlconform target: {info['name']} {info['version']} (adapter profile {info['profile']}, "
        f"run profile {settings.run_profile.name}, device {settings.device}, "
        f"seed {settings.seed if settings.seed is not None else 'default'}, "
        f"trainer configs {configs})"
    ]


class Clauses(pytest.Collector):
    """The collector of the clause items (node id ``rlconform``)."""

    def collect(self) -> list[pytest.Item]:
        settings = self.config._rlconform
        return [ClauseItem.from_parent(self, name=c.id, clause=c) for c in settings.clauses]


class ClauseItem(pytest.Item):
    """One contract clause as a pytest test item."""

    def __init__(self, *, clause: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.clause = clause
        self.add_marker("rlconform")
        self.user_properties.append(("clause", clause.id))

    def runtest(self) -> None:
        from rlconform.conformance.runner import certify

        settings = self.config._rlconform
        report = certify(
            settings.target,
            [self.clause],
            settings.run_profile,
            device=settings.device,
            seed=settings.seed,
            trainer_configs=settings.configs,
        )
        result = report.clauses[0]
        self.user_properties.append(("status", result.status))
        if result.severity:
            self.user_properties.append(("severity", result.severity))
            self.user_properties.append(("features", ",".join(result.features)))
        if getattr(result, "consequence", None):
            self.user_properties.append(("consequence", result.consequence))
        if result.status == "skip":
            pytest.skip(result.message)
        if result.status == "deviation":
            self.user_properties.append(("deviation", result.message))
            return
        if result.status not in ("fail", "error"):
            return
        text = _failure_text(result)
        if not result.fails_at(settings.fail_on, settings.consequences):
            self.user_properties.append(("below_fail_on", result.message))
            pytest.xfail(f"below --rlc-fail-on {settings.fail_on}: {text.splitlines()[0]}")
        raise ClauseFailed(text)

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, ClauseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int, str]:
        return PREFIX, 0, f"clause {self.clause.id}"


def _failure_text(result: Any) -> str:
    text = result.message
    consequence = getattr(result, "consequence", None)
    if result.counterexample and "reproducer" in result.counterexample:
        text += "\n\nReproducer:\n" + result.counterexample["reproducer"]
    if result.counterexample and "call" in result.counterexample:
        text += "\n\nThe call that broke it:\n" + result.counterexample["call"]
    if result.traceback:
        text += "\n\n" + result.traceback
    if result.severity:
        tag = f"{result.severity}: {', '.join(result.features) or 'no feature'}"
        if consequence:
            tag += f"; consequence {consequence}"
        text = f"[{tag}] " + text
    return text


class ClauseFailed(Exception):
    """A clause failed or errored under the plugin."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: Any, config: Any, items: list) -> None:
    """Add the clause items before ``-k``, ``-m``, ``--deselect`` and ``--lf`` filter."""
    if getattr(config, "_rlconform", None) is None:
        return
    collector = Clauses.from_parent(session, name=PREFIX, nodeid=PREFIX)
    report = collector.ihook.pytest_make_collect_report(collector=collector)
    collector.ihook.pytest_collectreport(report=report)
    if report.failed:
        raise pytest.UsageError(f"rlconform: collecting the clauses failed: {report.longrepr}")
    items.extend(x for x in report.result if isinstance(x, pytest.Item))
