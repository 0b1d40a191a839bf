"""Consequence (CONTRACT §0b): what a failing or deviating check does to training.

``assess(report, target, ...)`` gives every failing clause and every observed deviation
entry a consequence and the trainer configs under which it has it:

- definitional: a check of a logged value (clip fractions, KL / loss terms, metrics,
  filter statistics) is ``metric``; a balance or workload check is ``perf``; a purity check
  (``no_mutation``, ``deterministic``, the purity area) is ``purity``; step.update is
  ``update`` (``metric`` where only the back-propagated loss value differs and every
  gradient check passes: the optimizer applies the contract's update), step.state
  ``state``, step.metrics ``metric``; ``runs`` (the operation raises on
  a valid input) is ``crash`` when a config runs the operation.
- measured, for every other check of an operation: no declared config runs the clause's
  operations -> ``unreached`` (unless the target names them in ``step_unbound_ops``: its
  trainer runs them under an option the step binding does not cover -> ``None``); otherwise
  step.update is searched under each config that runs them, on cases of the finding's
  severity domain that carry the features that cause it (a finding about one aggregation
  mode: under the configs that aggregate with it; none -> ``unreached``, or ``None`` where
  the target's ``step_unbound_agg_modes`` names the option that selects the mode).
  A case whose first diverging stage is one of this operation's stages -> ``update`` under
  that config (a deviation entry that declares no features, a break on any case, is first
  searched on ordinary cases, where no other finding shares its stages:
  ``ordinary_rivals``); every such case passing under every config that runs the operation ->
  ``contained`` (the trainer masks the wrong values away before any loss). A case whose
  failure a declared ``composition`` entry of the step covers (a break between operations,
  baseline.py) is that entry's: it is passed over, never credited to an operation.
- ``None`` where it cannot be established, with the reason in ``consequence_basis``: a
  target without a step binding (no trainer configs), cases the step cannot carry, or a
  step that diverges at an earlier stage of another operation first.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings

from rlconform.conformance.context import CheckContext
from rlconform.conformance.errors import BindingDefect, ClauseMismatch, TargetError
from rlconform.conformance.features import FEATURES, restricted
from rlconform.conformance.generation import independent_of_imports
from rlconform.conformance.results import BROKEN, ClauseResult, RunReport

CONSEQUENCES = (
    "update",
    "crash",
    "state",
    "metric",
    "perf",
    "purity",
    "contained",
    "unreached",
)
# What most users gate CI on: the optimizer's update changes, or the run stops or drifts.
TRAINING = ("update", "crash", "state")

METRIC_CHECKS = frozenset(
    {"clipfrac", "metric", "term_pg_loss", "term_entropy", "term_kl_loss", "alert"}
)
METRIC_CLAUSES = frozenset({"filter.stats", "offpolicy.logprob_gap", "step.metrics"})
PERF_CLAUSES = frozenset({"batch.seqlen_balance"})
PURITY_CHECKS = frozenset({"no_mutation", "deterministic", "idempotent", "order"})
# Cases drawn per config when a consequence is measured on the step: the run profile's own
# per-clause budget (ci: 25), at most this many.
SEARCH_EXAMPLES = 60
# ``contained`` is a claim that the trainer masks the wrong values away: it needs at least
# this many passing cases with the finding's features under a config (fewer says nothing:
# slime's per-token phantom denominator passed the 7 edge cases a search drew, all with
# zero advantages, yet changes the update of any case with a nonzero one)
CONTAINED_EVIDENCE = 10


_EXAMPLES: contextvars.ContextVar[int] = contextvars.ContextVar(
    "rlc_search_examples", default=SEARCH_EXAMPLES
)


def search_examples(max_examples: int) -> int:
    return max(1, min(max_examples, SEARCH_EXAMPLES))


def rank(consequence: str | None) -> int:
    return CONSEQUENCES.index(consequence) if consequence in CONSEQUENCES else len(CONSEQUENCES)


def headline_rank(consequence: str | None) -> int:
    """The order in which a clause's findings head it: a measured training consequence
    first, then a finding whose consequence could not be established (it may be one), then
    the rest most serious first. A clause with an unmeasured finding beside an unreached one
    is not headed "unreached"."""
    if consequence in TRAINING:
        return rank(consequence)
    if consequence is None or consequence not in CONSEQUENCES:
        return len(TRAINING)
    return rank(consequence) + 1


def definitional(clause_id: str, check: str | None) -> str | None:
    """The consequence a check has by what it checks, or None when it must be measured."""
    area = clause_id.split(".", 1)[0]
    if clause_id == "step.update":
        return "crash" if check == "runs" else "update"
    if clause_id == "step.state":
        return "crash" if check == "runs" else "state"
    if clause_id in METRIC_CLAUSES or area == "metrics":
        return "crash" if check == "runs" else "metric"
    if clause_id in PERF_CLAUSES:
        return "perf"
    if area == "purity" or check in PURITY_CHECKS:
        return "purity"
    if check in METRIC_CHECKS:
        return "metric"
    return None


# Operations whose effect is state carried to later steps: judged by step.state.
STATE_OPS = frozenset({"kl_controller_update"})


def ops_of(clause: Any, check: str | None, target: Any) -> set[str]:
    """The operations a finding of ``check`` of ``clause`` is about."""
    if clause.ops:
        return set(clause.ops)
    if clause.id == "adv.invariants" and check:
        from rlconform.conformance.clauses.advantage import ESTIMATORS

        names = sorted((spec.op for spec in ESTIMATORS.values()), key=len, reverse=True)
        for op in names:
            if check.startswith(op.removeprefix("advantage_") + "_"):
                return {op}
    from rlconform.conformance.runner import _probed_ops

    return set(_probed_ops(clause.id, target))


def agg_mode(clause_id: str, case: Any = None) -> str | None:
    """The aggregation mode a finding of ``clause_id`` is about, where it is one: a mode
    clause's own (``agg.seq_mean_token_sum_norm`` -> ``seq-mean-token-sum-norm``), the case's
    for ``agg.shard_invariance``; None for every other clause. Only a config that aggregates
    with that mode runs the broken code: under another, a divergence of the step at a loss
    stage is some other operation's."""
    if not clause_id.startswith("agg."):
        return None
    if clause_id == "agg.shard_invariance":
        mode = case.get("mode") if isinstance(case, dict) else None
        return mode if isinstance(mode, str) else None
    return clause_id.removeprefix("agg.").replace("_", "-")


def _check_under(clause_id: str) -> Any:
    """The one-config check of step clause ``clause_id``."""
    from rlconform.conformance.clauses import step as step_clauses

    return {
        "step.update": step_clauses.check_update_under,
        "step.state": step_clauses.check_state_under,
        "step.metrics": step_clauses.check_metrics_under,
    }[clause_id]


# _step_outcome's stage when only a loss value differs (every gradient check passed)
VALUE_ONLY = "loss value only"


# step.update's gradient checks: a finding observed failing one changed a gradient
GRADIENT_CHECKS = frozenset(
    {"gradient", "gradient_off_actions", "entropy_gradient", "value_gradient"}
)

# Features whose values are, or overflow to, NaN or inf (CONTRACT §0a)
NONFINITE_INPUTS = frozenset({"padding_nonfinite", "overflow"})


def loss_value_only(failure: ClauseMismatch, nonfinite_inputs: bool = False) -> bool:
    """A step case's loss differs and what the finding's own inputs do ends there: its
    gradient is the contract's; or, for a finding about non-finite inputs
    (``nonfinite_inputs``: its features are among ``NONFINITE_INPUTS``), its loss is NaN/inf
    while every gradient stays finite. A NaN or inf that reaches a gradient makes it
    non-finite, so a finite gradient that differs beside such a loss is another break's (a
    declared denominator of the same config), not the non-finite input's."""
    if failure.gradient_agrees:
        return True
    return nonfinite_inputs and failure.nonfinite_loss and failure.gradient_finite


class _Diverged(Exception):
    def __init__(self, stage: str):
        super().__init__(stage)
        self.stage = stage


def _step_outcome(
    target: Any,
    config: Any,
    domain: str,
    required: frozenset[str],
    device: str,
    seed: int,
    clause_id: str = "step.update",
    stages: frozenset[str] | None = None,
    examples: int | None = None,
    excluded: frozenset[str] = frozenset(),
    composed: list[int] | None = None,
) -> tuple[str | None, int]:
    """Search a step clause under one config: (first diverging check or None, cases passed).
    With ``stages``, a case that diverges first at another stage is passed over (its stage
    is named in the result when no case decides). A case carrying any of ``excluded``, or a
    feature outside ``domain``, is passed over too when ``excluded`` is given (the ordinary
    cases of ``_ordinary_divergence``). A case whose loss differs while its
    gradient is the contract's does not stop the search: ``VALUE_ONLY`` when no case
    diverges further. With ``stages`` (an operation's finding is measured), a case whose
    failure a declared composition entry of the clause covers is passed over too: that
    divergence is the composition break's (``composed[0]`` counts them)."""
    examples = _EXAMPLES.get() if examples is None else examples
    from rlconform.conformance.clauses import step as step_clauses
    from rlconform.conformance.registry import get
    from rlconform.conformance.runner import declared_entries

    clause = get(clause_id)
    one_config = _check_under(clause_id)
    ctx = CheckContext(target=target, device=device, seed=seed, clause_id=clause_id)
    passed = [0]
    elsewhere: set[str] = set()
    value_only: set[str] = set()
    composition = (
        [e for e in declared_entries(target, clause_id) if e.composition]
        if stages is not None
        else []
    )
    composed = [0] if composed is None else composed

    def check_under(ctx: Any, case: Any, config: Any) -> None:
        """The one-config check; a loss that differs with the contract's gradient at one of
        ``stages`` is noted and the search goes on (defined outside ``search``: hypothesis
        seeds its derandomized draws from the source of the function it runs, so that
        source stays as it was and the cases drawn do not move)."""
        if excluded:
            carried = clause.features(case)
            if carried & excluded or any(FEATURES[f].domain != domain for f in carried):
                # passed over as a refusal is: ``search``'s source stays as it was
                raise step_clauses.RefusedByProfile("not an ordinary case")
        try:
            one_config(ctx, case, config)
        except ClauseMismatch as failure:
            carried = clause.features(case)
            if any(e.covers(failure.check, carried, config.name) for e in composition):
                composed[0] += 1
                raise step_clauses.RefusedByProfile("a declared composition break's") from None
            if not loss_value_only(failure, bool(required & NONFINITE_INPUTS)) or (
                stages is not None and failure.check not in stages
            ):
                raise
            value_only.add(failure.check or "step")

    @settings(
        max_examples=examples,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(clause.strategy)
    def search(case: Any) -> None:
        if not required <= clause.features(case):
            return
        try:
            check_under(ctx, case, config)
        except step_clauses.RefusedByProfile:
            return
        except ClauseMismatch as failure:
            if stages is not None and failure.check not in stages:
                elsewhere.add(failure.check or "step")
                return  # diverges first at another operation's stage: says nothing here
            raise _Diverged(failure.check or "step") from None
        except TargetError:
            if stages is not None:
                elsewhere.add("runs")  # which operation raised is not known: says nothing
                return
            raise _Diverged("runs") from None
        passed[0] += 1

    try:
        with restricted(domain), independent_of_imports():
            search()
    except _Diverged as diverged:
        return diverged.stage, passed[0]
    if value_only:
        return VALUE_ONLY, passed[0]
    if not passed[0] and elsewhere:
        return ", ".join(sorted(elsewhere)), 0
    return None, passed[0]


_ALREADY = (
    "the step diverges at {stage} on ordinary cases too (a nominal finding under this "
    "config), so the features' own effect there cannot be told apart"
)


def _ordinary_divergence(
    target: Any,
    config: Any,
    stages: frozenset[str],
    cause: frozenset[str],
    device: str,
    seed: int,
) -> str | None:
    """The stage (of ``stages``) at which ``config``'s step diverges on ordinary cases, or
    None; cached on the target for the run. An ordinary case carries nominal features only,
    and none of the finding's ``cause`` (a nominal feature can be a cause: mask holes). A
    finding whose features' cases diverge at that same stage is not credited with the
    divergence: under such a config every case diverges there (e.g. a loss type whose
    normaliser is wrong on every batch), whatever the finding's features do."""
    cache = target.__dict__.setdefault("_rlconform_ordinary_divergence", {})
    key = (config.name, stages, cause, seed, _EXAMPLES.get())
    if key not in cache:
        cache[key] = _step_outcome(
            target, config, "nominal", frozenset(), device, seed, stages=stages, excluded=cause
        )[0]
    return cache[key]


def _ordinary_update(
    target: Any,
    running: Sequence[Any],
    domain: str,
    own: frozenset[str],
    excluded: frozenset[str],
    device: str,
    seed: int,
) -> list[tuple[str, str]]:
    """(config, stage) for each config of ``running`` whose step diverges at one of ``own``
    on a case of ``domain`` that carries none of ``excluded`` (``measured``'s ordinary
    search)."""
    hits = []
    for config in running:
        stage, _ = _step_outcome(
            target,
            config,
            domain,
            frozenset(),
            device,
            seed,
            stages=own,
            excluded=excluded,
            composed=[0],
        )
        if stage is not None and stage in own:
            hits.append((config.name, stage))
    return hits


def ordinary_rivals(
    findings: Sequence[tuple[Any, Any, str | None, Sequence[str] | None]],
    entry: Any,
    clause: Any,
    check: str | None,
    target: Any,
) -> frozenset[str] | None:
    """For ``entry``, a deviation entry of ``clause`` that declares no features: the
    declared features of every other finding of the report (``findings``: the finding, its
    clause, its check, its declared features or None for an undeclared failure) whose
    operations share a step stage with it, or None where one of them declares none or is
    undeclared (a divergence on ordinary cases could be either's)."""
    from rlconform.conformance.clauses.step import STAGE_OPS

    def stages(ops: set[str]) -> set[str]:
        return {s for s, stage_ops in STAGE_OPS.items() if ops & set(stage_ops)}

    own = stages(ops_of(clause, check, target))
    excluded: set[str] = set()
    for finding, other, other_check, declared in findings:
        if finding is entry or other.area == "step":
            continue
        if not own & stages(ops_of(other, other_check, target)):
            continue
        if not declared:
            return None
        excluded |= set(declared)
    return frozenset(excluded)


def unbound(target: Any, ops: set[str]) -> str | None:
    """The trainer options that run ``ops`` on a path the step binding does not cover (the
    target's ``step_unbound_ops``: operation -> option; or its ``step_unbound``: operations
    whose binding's trainer path names the option), or None. Such a finding is
    unmeasured, not ``unreached``: its trainer does run the operation."""
    table = dict(getattr(target, "step_unbound_ops", None) or {})
    bindings = getattr(target, "bindings", None) or {}
    for op in getattr(target, "step_unbound", ()):
        # the binding's trainer path names the option (or the pass) that runs the operation
        binding = bindings.get(op)
        path = binding.get("path") if isinstance(binding, dict) else None
        if path:
            table.setdefault(op, str(path))
    hits = sorted(op for op in ops if op in table)
    if not hits:
        return None
    return "; ".join(f"{op} under {table[op]}" for op in hits)


def _not_run(target: Any, ops: set[str], why: str) -> tuple[str | None, list[str], str]:
    """``unreached`` (no trainer config runs ``ops``), unless the trainer runs them under an
    option the step binding does not cover (``unbound``)."""
    options = unbound(target, ops)
    if options is not None:
        return (
            None,
            [],
            f"unmeasured: the trainer runs {options}, which the step binding does not cover",
        )
    return "unreached", [], why


def measured(
    clause: Any,
    check: str | None,
    severity: str | None,
    features: Sequence[str],
    target: Any,
    configs: Sequence[Any],
    device: str,
    seed: int,
    case: Any = None,
    ordinary: frozenset[str] | None = None,
) -> tuple[str | None, list[str], str]:
    """(consequence, configs, basis) of a finding of ``clause`` on the step.

    ``ordinary`` (a deviation entry that declares no features: a break on any case; the
    features of the other findings that share a stage with it): the step is searched first
    on ordinary cases of the domain without those features, where a divergence at one of
    the operation's stages is ``update``; anything else falls back to cases with the
    minimal case's features (the break needs none, but passing ordinary cases prove
    nothing about the cases it was seen on)."""
    from rlconform.conformance.clauses.step import STAGE_OPS, STEP_FEATURES

    if not configs:
        return None, [], "unmeasured: the target has no step binding (no trainer configs)"
    ops = ops_of(clause, check, target)
    running = [c for c in configs if ops & c.ops]
    if not running:
        return _not_run(target, ops, f"no trainer config runs {', '.join(sorted(ops))}")
    mode = agg_mode(clause.id, case)
    if mode is not None:
        running = [c for c in running if c.resolved["loss_agg_mode"] == mode]
        if not running:
            option = (getattr(target, "step_unbound_agg_modes", None) or {}).get(mode)
            if option is not None:
                return (
                    None,
                    [],
                    f"unmeasured: the trainer aggregates with loss_agg_mode {mode!r} under "
                    f"{option}, which no step config sets",
                )
            return "unreached", [], f"no trainer config aggregates with loss_agg_mode {mode!r}"
    domain = severity or "hardening"
    cause = (
        frozenset(f for f in features if FEATURES[f].domain == domain) if features else frozenset()
    )
    dropped = cause - set(STEP_FEATURES)
    cause = cause - dropped
    if dropped and not cause:
        missing = ", ".join(sorted(dropped))
        return None, [], f"undetermined: step cases cannot carry {missing}"
    note = (
        f" (on cases without {', '.join(sorted(dropped))}: the step cannot carry it)"
        if dropped
        else ""
    )
    if ops & STATE_OPS:
        failing = [
            c.name
            for c in running
            if _step_outcome(target, c, domain, cause, device, seed, "step.state")[0] is not None
        ]
        if failing:
            return "state", failing, "step.state fails: the carried state diverges"
    own = frozenset(s for s, stage_ops in STAGE_OPS.items() if ops & set(stage_ops))
    if ordinary is not None:
        hits = _ordinary_update(target, running, domain, own, ordinary, device, seed)
        if hits:
            stages = ", ".join(sorted({s for _, s in hits}))
            without = f", without {', '.join(sorted(ordinary))}" if ordinary else ""
            return (
                "update",
                [n for n, _ in hits],
                f"step.update diverges at {stages} on ordinary {domain} cases{without} (the "
                "entry declares no features: a break on any case; no other finding shares "
                "the stage)",
            )
    updated, contained, logged, elsewhere = [], [], [], []
    composed = [0]
    for config in running:
        stage, passed = _step_outcome(
            target, config, domain, cause, device, seed, stages=own, composed=composed
        )
        if stage is not None and stage in own and cause:
            ordinary = _ordinary_divergence(target, config, own, cause, device, seed)
            if ordinary == stage:
                elsewhere.append((config.name, _ALREADY.format(stage=stage)))
                continue
        if stage is not None and stage in own:
            updated.append((config.name, stage))
        elif stage == VALUE_ONLY:
            logged.append(config.name)
        elif stage is None and passed >= CONTAINED_EVIDENCE:
            contained.append(config.name)
        elif stage is None and passed:
            elsewhere.append((config.name, f"only {passed} such cases ran, all passing"))
        else:
            elsewhere.append((config.name, stage))
    if composed[0]:
        note += (
            f" ({composed[0]} step cases a declared composition break of the trainer explains "
            "passed over: their divergence is that break's)"
        )
    if updated:
        stages = ", ".join(sorted({s for _, s in updated}))
        return "update", [n for n, _ in updated], f"step.update diverges at {stages}{note}"
    if logged and not elsewhere:
        return (
            "metric",
            logged,
            "step.update: only the back-propagated loss value differs on such cases, its "
            "gradient is the contract's (or, NaN/inf beside finite gradients, the non-finite "
            "inputs did not reach them)" + note,
        )
    if contained and not elsewhere:
        return (
            "contained",
            contained,
            "step.update passes on such cases under every config that runs it" + note,
        )
    if elsewhere:
        where = "; ".join(f"{n}: {s or 'no case with the features'}" for n, s in elsewhere)
        also = (
            f"; under {', '.join(logged)} only the back-propagated loss value differs"
            if logged
            else ""
        )
        return (
            None,
            [],
            f"undetermined: the step diverges first elsewhere or has no such case ({where}){also}"
            + note,
        )
    return None, [], "undetermined: no step case with the finding's features"


def _failing_configs(
    clause_id: str,
    case: Any,
    checks: Sequence[str | None],
    target: Any,
    configs: Sequence[Any],
    device: str,
    seed: int,
    elsewhere: dict[str, str] | None = None,
    loss_only: set[str] | None = None,
    nonfinite_inputs: bool = False,
) -> list[str]:
    """The configs under which ``case`` fails one of ``checks`` of step clause
    ``clause_id`` (``runs``: the step raises); ``elsewhere`` collects the configs under
    which it fails first at another check (config -> check), ``loss_only`` those under
    which only the loss value differs (``loss_value_only``)."""
    from rlconform.conformance.clauses import step as step_clauses

    if case is None:
        return []
    from rlconform.conformance.literal import from_jsonable

    case = from_jsonable(case)
    check_under = _check_under(clause_id)
    wanted = {c for c in checks if c is not None}
    failing = []
    for config in configs:
        ctx = CheckContext(target=target, device=device, seed=seed, clause_id=clause_id)
        try:
            check_under(ctx, case, config)
        except (step_clauses.RefusedByProfile, BindingDefect):
            continue  # refused, or the binding broke: says nothing about this config
        except ClauseMismatch as failure:
            if not wanted or failure.check in wanted:
                failing.append(config.name)
                if loss_value_only(failure, nonfinite_inputs) and loss_only is not None:
                    loss_only.add(config.name)
            elif elsewhere is not None:
                elsewhere[config.name] = failure.check or "step"
        except TargetError:
            if not wanted or "runs" in wanted:
                failing.append(config.name)
            elif elsewhere is not None:
                elsewhere[config.name] = "runs"
    return failing


def judge(
    clause: Any,
    check: str | None,
    severity: str | None,
    features: Sequence[str],
    target: Any,
    configs: Sequence[Any],
    device: str,
    seed: int,
    failed_config: str | None = None,
    case: Any = None,
    checks: Sequence[str] = (),
    ordinary: frozenset[str] | None = None,
) -> tuple[str | None, list[str], str]:
    names = [c.name for c in configs]
    ops = ops_of(clause, check, target)
    run_anywhere = not configs or bool(ops & set().union(*(c.ops for c in configs)))
    kind = definitional(clause.id, check)
    if clause.area == "step":
        elsewhere: dict[str, str] = {}
        loss_only: set[str] = set()
        failing = _failing_configs(
            clause.id,
            case,
            checks or (check,),
            target,
            configs,
            device,
            seed,
            elsewhere,
            loss_only,
            bool(set(features) & NONFINITE_INPUTS),
        )
        if failed_config is not None and failed_config not in failing:
            failing.insert(0, failed_config)
        observed_gradient = bool(set(checks) & GRADIENT_CHECKS)
        if failing and kind == "update" and set(failing) <= loss_only and not observed_gradient:
            # the optimizer applies the contract's gradient: only the loss value it logs
            # differs (a NaN loss of an all-masked batch with a zero gradient). Not where the
            # entry was observed failing a gradient check too: on some of its cases the
            # gradient differed, whatever its minimal case shows
            return (
                "metric",
                failing,
                f"{clause.id}: the back-propagated loss differs on the finding's case, "
                "its gradient is the contract's under these configs (only the logged loss; "
                "or, NaN/inf beside finite gradients, the non-finite inputs did not reach "
                "them)",
            )
        if failing and kind == "update" and set(failing) <= loss_only:
            seen = ", ".join(sorted(set(checks) & GRADIENT_CHECKS))
            return (
                kind,
                failing,
                f"{clause.id}: on the finding's case only the loss value differs under these "
                f"configs, but the entry was observed failing {seen} too (a gradient differs "
                "on its other cases)",
            )
        if failing:
            return kind, failing, f"{clause.id} fails on the finding's case under these configs"
        if elsewhere:  # the case diverges first at an earlier check (declared on its own)
            first = ", ".join(sorted(set(elsewhere.values())))
            return (
                kind,
                list(elsewhere),
                f"{clause.id}: the finding's case fails first at {first} under these configs",
            )
        basis = "was not replayed" if case is None else "passed on replay"
        return kind, names, f"{clause.id}: the finding's case {basis}"
    # the configs whose step runs the operation: the ones under which it has its consequence
    running = [c.name for c in configs if ops & c.ops] or names
    options = None if run_anywhere else unbound(target, ops)
    if kind is not None or check == "runs":
        # what the check is, or a raise on a valid input: known without the step, once a
        # trainer runs the operation (under a declared config, or an option none covers)
        what = (
            f"definitional: check {check!r} of {clause.id}"
            if kind is not None
            else "the operation raises on a valid input"
        )
        kind = "crash" if kind is None else kind
        if options is not None:
            return kind, [], f"{what} (the trainer runs {options}; no step config covers it)"
        if not run_anywhere:
            return _not_run(target, ops, f"no trainer config runs {', '.join(sorted(ops))}")
        return kind, running, what
    try:
        return measured(
            clause, check, severity, features, target, configs, device, seed, case, ordinary
        )
    except BindingDefect as defect:
        return None, [], f"undetermined: the step's binding failed ({defect.summary})"


def assess(
    report: RunReport,
    target: Any,
    clauses: Iterable[Any],
    configs: Sequence[Any],
    *,
    device: str = "cpu",
    seed: int | None = None,
    examples: int | None = None,
) -> None:
    """Fill ``consequence`` / ``configs`` / ``consequence_basis`` of every broken clause and
    every observed deviation entry of ``report`` (``examples``: cases per step search)."""
    token = _EXAMPLES.set(SEARCH_EXAMPLES if examples is None else examples)
    try:
        _assess(report, target, clauses, configs, device, seed)
    finally:
        _EXAMPLES.reset(token)


def _assess(
    report: RunReport,
    target: Any,
    clauses: Iterable[Any],
    configs: Sequence[Any],
    device: str,
    seed: int | None,
) -> None:
    by_id = {c.id: c for c in clauses}
    seed = 0 if seed is None else seed
    cache: dict[tuple, tuple[str | None, list[str], str]] = {}

    def cached(
        clause: Any,
        check: str | None,
        severity: str | None,
        features: Sequence[str],
        failed: str | None,
        case: Any = None,
        checks: Sequence[str] = (),
        scope: Sequence[str] = (),
        ordinary: frozenset[str] | None = None,
    ):
        key = (clause.id, check, severity, tuple(sorted(features)), failed, tuple(checks))
        key += (tuple(scope), ordinary)
        if clause.area == "step":
            key += (repr(case),)
        elif agg_mode(clause.id, case) is not None:
            key += (agg_mode(clause.id, case),)
        if key not in cache:
            # an entry scoped to configs is a break of those configs: judged under them only
            under = [c for c in configs if c.name in scope] if scope else configs
            cache[key] = judge(
                clause,
                check,
                severity,
                features,
                target,
                under,
                device,
                seed,
                failed,
                case=case,
                checks=checks,
                ordinary=ordinary,
            )
        return cache[key]

    # every observed finding (entry or undeclared failure) with each check it is about:
    # ordinary_rivals reads them
    report_findings: list[tuple[Any, Any, str | None, Sequence[str] | None]] = []
    for result in report.clauses:
        clause = by_id.get(result.id)
        if clause is None or result.status not in BROKEN:
            continue
        for entry in result.deviations:
            if entry.observed:
                for check in entry.observed_checks or entry.checks or [None]:
                    report_findings.append((entry, clause, check, entry.declared_features))
        if result.status in ("fail", "error") and result.check is not None:
            report_findings.append((result, clause, result.check, None))

    for result in report.clauses:
        clause = by_id.get(result.id)
        if clause is None or result.status not in BROKEN:
            continue
        findings: list[tuple[str | None, list[str], str]] = []
        for entry in result.deviations:
            if not entry.observed:
                continue
            check = (
                entry.observed_checks[0]
                if entry.observed_checks
                else (entry.checks[0] if entry.checks else None)
            )
            ordinary = (
                None
                if entry.declared_features or clause.area == "step"
                else ordinary_rivals(report_findings, entry, clause, check, target)
            )
            entry.consequence, entry.configs, entry.basis = cached(
                clause,
                check,
                entry.severity,
                entry.features,
                None,
                entry.case,
                tuple(entry.observed_checks or entry.checks),
                tuple(entry.declared_configs),
                ordinary,
            )
            findings.append((entry.consequence, entry.configs, entry.basis))
        if result.status in ("fail", "error") and result.check is not None:
            failed = (result.counterexample or {}).get("config") if result.counterexample else None
            case = (result.counterexample or {}).get("case")
            own = cached(clause, result.check, result.severity, result.features, failed, case)
            result.failure_consequence, result.failure_configs, result.failure_basis = own
            findings.append(own)
        if not findings:
            continue
        findings.sort(key=lambda f: headline_rank(f[0]))
        result.consequence, result.configs, result.consequence_basis = findings[0]


def by_consequence(results: Iterable[ClauseResult]) -> dict[str, int]:
    """Per consequence, the number of broken clauses whose most serious consequence it is
    (``unmeasured``: a finding no consequence could be established for)."""
    counts = {c: 0 for c in CONSEQUENCES}
    counts["unmeasured"] = 0
    for result in results:
        observed = any(d.observed for d in result.deviations)
        if result.status not in BROKEN or not (result.check or observed):
            continue
        key = result.consequence or "unmeasured"
        counts[key] += 1
    return counts
