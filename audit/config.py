"""The audit's parameters: the recorded ``config`` mapping (verl names) and the profile.

Only the keys below are read; everything else in a (possibly whole) trainer config is left
alone. Sections ``algorithm``, ``actor`` and ``rollout`` (and ``kl_ctrl``,
``rollout_correction`` inside them) are flattened into the top level, which wins on a clash. A key with a value of the wrong type,
or an estimator / mode the contract does not know, is an ``AuditInputError`` (exit 2).

Profiles are the ones the adapters declare (``--profile``), imported without the framework.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlconform.adapters.base import Profile
from rlconform.audit.load import AuditInputError
from rlconform.oracle.aggregate import MODES as AGG_MODES
from rlconform.oracle.kl import ESTIMATOR_ALIASES

# --profile name -> "module:attribute" of the Profile an adapter declares.
PROFILES: dict[str, str] = {
    "torchref": "rlconform.adapters.torchref:TORCHREF_PROFILE",
    "verl": "rlconform.adapters.verl.profile:PROFILE",
    "slime": "rlconform.adapters.slime.manifest:SLIME_PROFILE",
    "roll": "rlconform.adapters.roll.manifest:PROFILE",
    "trl": "rlconform.adapters.trl.manifest:PROFILE",
    "openrlhf": "rlconform.adapters.openrlhf.manifest:PROFILE",
    "oracle": "rlconform.adapters.oracle_target:ORACLE_PROFILE",
}

# verl's adv_estimator names (and the contract's own short names) -> clause id.
ESTIMATORS: dict[str, str] = {
    "gae": "adv.gae",
    "grpo": "adv.grpo",
    "grpo_vectorized": "adv.grpo",
    "rloo": "adv.rloo",
    "rloo_vectorized": "adv.rloo",
    "reinforce_plus_plus": "adv.reinforce_pp",
    "reinforce_pp": "adv.reinforce_pp",
    "reinforce_plus_plus_baseline": "adv.reinforce_pp_baseline",
    "reinforce_pp_baseline": "adv.reinforce_pp_baseline",
    "remax": "adv.remax",
    "opo": "adv.opo",
    "grpo_passk": "adv.grpo_passk",
    "gpg": "adv.gpg",
    "optimal_token_baseline": "adv.optimal_token_baseline",
    "gdpo": "adv.gdpo",
}
# Estimators a framework offers that no contract clause describes: the adv clauses skip.
WITHOUT_CLAUSE = frozenset({"tir_optimal_token_baseline"})

PLACEMENTS = ("last", "uniform", "discounted", "none")
ROLLOUT_IS_LEVELS = ("token", "sequence")
ROLLOUT_IS_MODES = ("truncate", "mask")
_SECTIONS = ("algorithm", "actor", "rollout")


@dataclasses.dataclass(frozen=True)
class AuditConfig:
    """The parameters the audited clauses read (defaults: verl's)."""

    estimator: str | None = None  # clause id, e.g. "adv.grpo"
    estimator_name: str | None = None  # as configured
    gamma: float = 1.0
    lam: float = 1.0
    norm_by_std: bool = True
    f_norm: float = 1.0
    gdpo_reward_keys: tuple[str, ...] = ()
    gdpo_reward_weights: tuple[float, ...] | None = None
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_coef: float | None = None
    reward_placement: str = "last"
    reward_gamma: float = 1.0
    loss_agg_mode: str = "token-mean"
    dp_size: int = 1
    batch_num_tokens: int | None = None
    global_batch_size: int | None = None
    loss_scale_factor: float | None = None
    rollout_is: str | None = None
    rollout_is_mode: str = "truncate"
    rollout_is_threshold: float | None = 2.0
    rollout_is_threshold_lower: float | None = None
    rollout_n: int | None = None
    max_response_length: int | None = None
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def summary(self) -> dict[str, Any]:
        """The parameters that differ from the defaults, plus the estimator."""
        default = AuditConfig()
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(default, f.name) and f.name != "estimator"
        }
        if "estimator_name" in out:
            out = {"adv_estimator": out.pop("estimator_name"), **out}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def get_profile(name: str) -> Profile:
    """The Profile ``--profile name`` names: a registered adapter's (its framework is not
    imported), or ``module:attribute`` (a Profile, or a target or target factory whose
    ``.profile`` is one)."""
    if name in PROFILES:
        module, _, attribute = PROFILES[name].partition(":")
        return getattr(importlib.import_module(module), attribute)
    if ":" not in name:
        import difflib

        close = difflib.get_close_matches(name, sorted(PROFILES), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise AuditInputError(
            f"--profile {name!r}{hint}: choose one of {', '.join(sorted(PROFILES))} "
            "or module:attribute"
        )
    from rlconform.adapters.registry import _cwd_importable

    module_name, _, attribute = name.partition(":")
    _cwd_importable()
    try:
        value = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise AuditInputError(f"--profile {name!r}: cannot load it: {exc}") from None
    if isinstance(value, Profile):
        return value
    if isinstance(value, type) or (
        not isinstance(getattr(value, "profile", None), Profile) and callable(value)
    ):
        try:
            value = value()
        except Exception as exc:
            first = (str(exc).splitlines() or [""])[0]
            raise AuditInputError(
                f"--profile {name!r}: calling it raised {type(exc).__name__}: {first}"
            ) from None
    profile = value if isinstance(value, Profile) else getattr(value, "profile", None)
    if not isinstance(profile, Profile):
        raise AuditInputError(
            f"--profile {name!r}: neither a Profile nor a target with a .profile "
            f"(got {type(value).__name__})"
        )
    return profile


def read_config_file(path: str | Path) -> dict[str, Any]:
    """A config file: JSON, TOML, or YAML (when PyYAML is installed)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise AuditInputError(f"--config {path}: cannot read: {exc}") from None
    try:
        if path.suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib

            data: Any = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise AuditInputError(
                    f"--config {path}: YAML needs PyYAML (pip install pyyaml), or use JSON/TOML"
                ) from None
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except AuditInputError:
        raise
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise AuditInputError(
            f"--config {path}: not valid {path.suffix or 'JSON'}: {first}"
        ) from None
    if not isinstance(data, dict):
        raise AuditInputError(f"--config {path}: expected a mapping, got {type(data).__name__}")
    return data


def flatten(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level keys, then the keys of the known sections (``algorithm`` ...) underneath."""
    flat: dict[str, Any] = {}
    for section in _SECTIONS:
        value = raw.get(section)
        if isinstance(value, Mapping):
            flat.update(value)
    correction = flat.get("rollout_correction", raw.get("rollout_correction"))
    if isinstance(correction, Mapping):
        for key, value in correction.items():
            flat.setdefault(key, value)
    kl_ctrl = raw.get("kl_ctrl", flat.get("kl_ctrl"))
    if isinstance(kl_ctrl, Mapping) and "kl_coef" in kl_ctrl:
        flat.setdefault("kl_coef", kl_ctrl["kl_coef"])
    flat.update({k: v for k, v in raw.items() if k not in _SECTIONS})
    return flat


def _number(key: str, value: Any, *, minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise AuditInputError(f"config {key!r}: expected a finite number, got {value!r}")
    if minimum is not None and value < minimum:
        raise AuditInputError(f"config {key!r}: must be >= {minimum}, got {value!r}")
    return float(value)


def _integer(key: str, value: Any, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise AuditInputError(f"config {key!r}: expected an integer >= {minimum}, got {value!r}")
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise AuditInputError(f"config {key!r}: expected true or false, got {value!r}")
    return value


def _choice(key: str, value: Any, choices: tuple[str, ...] | list[str]) -> str:
    if value not in choices:
        raise AuditInputError(f"config {key!r}: {value!r} is not one of {', '.join(choices)}")
    return value


def _optional(key: str, value: Any, parse: Any, **kw: Any) -> Any:
    return None if value is None else parse(key, value, **kw)


# key -> reader (value check); the keys below it are read elsewhere in parse_config.
_READERS: dict[str, Any] = {
    "gamma": lambda k, v: _number(k, v, minimum=0.0),
    "lam": lambda k, v: _number(k, v, minimum=0.0),
    "f_norm": _number,
    "norm_adv_by_std_in_grpo": _flag,
    "use_kl_in_reward": _flag,
    "kl_coef": lambda k, v: _number(k, v),
    "reward_gamma": lambda k, v: _number(k, v, minimum=0.0),
    "loss_scale_factor": lambda k, v: _optional(k, v, _number),
    "rollout_is_threshold": lambda k, v: _optional(k, v, _number),
    "rollout_is_threshold_lower": lambda k, v: _optional(k, v, _number),
    "dp_size": lambda k, v: _integer(k, v, minimum=1),
    "batch_num_tokens": lambda k, v: _optional(k, v, _integer),
    "global_batch_size": lambda k, v: _optional(k, v, _integer),
    "rollout_n": lambda k, v: _optional(k, v, _integer, minimum=1),
    "max_response_length": lambda k, v: _optional(k, v, _integer, minimum=1),
    "temperature": lambda k, v: _number(k, v, minimum=0.0),
    "top_k": _integer,
    "top_p": lambda k, v: _number(k, v, minimum=0.0),
    "kl_penalty": lambda k, v: _choice(k, v, sorted(ESTIMATOR_ALIASES)),
    "reward_placement": lambda k, v: _choice(k, v, PLACEMENTS),
    "loss_agg_mode": lambda k, v: _choice(k, v, AGG_MODES),
    "rollout_is": lambda k, v: _optional(k, v, _choice, choices=ROLLOUT_IS_LEVELS),
    "rollout_is_mode": lambda k, v: _choice(k, v, ROLLOUT_IS_MODES),
}
_OTHER_KEYS = ("adv_estimator", "n", "gdpo_reward_keys", "gdpo_reward_weights")
_NESTED = ("rollout_correction", "kl_ctrl")
KNOWN_KEYS = frozenset((*_READERS, *_OTHER_KEYS))


def check_keys(raw: Mapping[str, Any], where: str) -> None:
    """A ``--config`` written for the audit (flat: no ``algorithm``/``actor``/``rollout``
    section, no ``_target_`` of a verl config object) may hold only the keys the audit
    reads: a misspelt one is an error naming it and the valid ones. A trainer's own config
    (with sections, or a verl config object such as ``AlgoConfig``, flat but carrying
    ``_target_``) is read for the known keys and the rest is left alone. A recorded config is
    the trainer's and is never checked this way."""
    if any(isinstance(raw.get(s), Mapping) for s in _SECTIONS) or "_target_" in raw:
        return  # a trainer's config (sections, or a verl config object's `_target_`)
    unknown = sorted(k for k in raw if k not in KNOWN_KEYS and k not in _NESTED)
    if not unknown:
        return
    import difflib

    key = unknown[0]
    close = difflib.get_close_matches(str(key), sorted(KNOWN_KEYS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise AuditInputError(
        f"{where}: unknown key {key!r}{hint}; the audit reads {', '.join(sorted(KNOWN_KEYS))} "
        f"(or pass a whole trainer config with its {'/'.join(_SECTIONS)} sections)"
    )


def parse_config(raw: Mapping[str, Any]) -> tuple[AuditConfig, list[str]]:
    """(AuditConfig, notes) from a recorded or given config mapping (verl names)."""
    flat = flatten(raw)
    notes: list[str] = []
    fields: dict[str, Any] = {}
    name = flat.get("adv_estimator")
    if name is not None:
        if not isinstance(name, str):
            raise AuditInputError(f"config 'adv_estimator': expected a name, got {name!r}")
        short = name.removeprefix("adv.")
        if short in WITHOUT_CLAUSE:
            notes.append(f"adv_estimator {name!r} has no contract clause: advantages not audited")
        elif short not in ESTIMATORS:
            known = ", ".join(sorted(ESTIMATORS))
            raise AuditInputError(
                f"config 'adv_estimator': {name!r} is not an estimator the contract knows ({known})"
            )
        else:
            fields["estimator"] = ESTIMATORS[short]
        fields["estimator_name"] = name
    renamed = {"norm_adv_by_std_in_grpo": "norm_by_std"}
    for key, read in _READERS.items():
        if key in flat:
            fields[renamed.get(key, key)] = read(key, flat[key])
    if "n" in flat and "rollout_n" not in flat and flat["n"] is not None:
        fields["rollout_n"] = _integer("n", flat["n"], minimum=1)
    keys = flat.get("gdpo_reward_keys")
    if keys is not None:
        if not isinstance(keys, (list, tuple)) or not all(isinstance(k, str) for k in keys):
            raise AuditInputError(
                f"config 'gdpo_reward_keys': expected a list of names, got {keys!r}"
            )
        fields["gdpo_reward_keys"] = tuple(keys)
    weights = flat.get("gdpo_reward_weights")
    if weights is not None:
        if not isinstance(weights, (list, tuple)):
            raise AuditInputError(f"config 'gdpo_reward_weights': expected a list, got {weights!r}")
        fields["gdpo_reward_weights"] = tuple(_number("gdpo_reward_weights", w) for w in weights)
    config = AuditConfig(**fields)
    if config.use_kl_in_reward and config.kl_coef is None:
        notes.append(
            "use_kl_in_reward without kl_coef: kl.in_reward reads metrics "
            "'actor/reward_kl_penalty_coeff' or is skipped"
        )
    return config, notes
