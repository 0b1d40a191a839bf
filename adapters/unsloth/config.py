"""``UnslothGRPOConfig``'s resolution of the GRPO fields a user sets (the `step` configs).

Unsloth's generated ``UnslothGRPOConfig.__init__`` (``unsloth/models/rl.py``, 2026.10.9:
the ``grpo_trainer`` replacements and ``check_dr_grpo``) changes four of TRL's defaults and
resolves the unset ones before ``GRPOConfig`` sees them:

- ``loss_type`` unset -> ``"dapo"`` (TRL >= 0.22), and then none of the DAPO rewrites below;
- ``beta`` unset -> 0.0 under dapo / dr_grpo, else 0.001 (TRL's default is 0.0 for all);
- ``loss_type="dr_grpo"`` with ``scale_rewards`` ``"group"`` or True -> ``scale_rewards``
  False (Unsloth prints that it overrides);
- ``loss_type="dapo"`` set explicitly -> ``mask_truncated_completions`` True and
  ``epsilon_high`` 0.28 where unset;
- ``loss_type="cispo"`` -> ``epsilon_high`` 5.0 where unset;
- ``vllm_importance_sampling_correction`` False by default (and ``router_aux_loss_coef``
  0.0, a field TRL 1.15's ``GRPOConfig`` does not have: the shell trainer holds 0.0).

``resolve`` returns the ``GRPOConfig`` fields that result; a shell ``GRPOConfig`` built from
them is the config Unsloth's trainer runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_UNSLOTH_DEFAULTS = {"vllm_importance_sampling_correction": False}


def resolve(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The ``GRPOConfig`` fields ``UnslothGRPOConfig(**fields)`` passes on (module docstring)."""
    out = {**_UNSLOTH_DEFAULTS, **fields}
    default_loss = out.get("loss_type") is None
    loss = "dapo" if default_loss else str(out["loss_type"]).lower()
    out["loss_type"] = loss
    if out.get("beta") is None:
        out["beta"] = 0.0 if loss in ("dapo", "dr_grpo") else 0.001
    if loss == "dr_grpo":
        if "scale_rewards" not in out or out["scale_rewards"] in (True, "group"):
            out["scale_rewards"] = "none"  # Unsloth sets False; TRL reads False as "none"
    elif loss == "dapo" and not default_loss:
        if out.get("mask_truncated_completions") is None:
            out["mask_truncated_completions"] = True
        if out.get("epsilon_high") is None:
            out["epsilon_high"] = 0.28
    elif loss == "cispo" and out.get("epsilon_high") is None:
        out["epsilon_high"] = 5.0
    if out.get("mask_truncated_completions") is None:
        out["mask_truncated_completions"] = False
    return out
