"""Plumbing shared by the ROLL bindings: layouts, DataProto batches and pipeline configs.

Nothing here computes: it moves canonical tensors into ROLL's layout and containers and
back. The math is always one of ROLL's own functions.

Two kinds of "ROLL cannot do this" are told apart on purpose. A whole mode ROLL does not
offer (token-sum aggregation, straight-through KL) raises ``Unsupported``: the clause is
skipped as "not implemented by target". A particular input ROLL's signature cannot express
(a truncated sample's bootstrap value, groups of unequal size, a non-default eps, a missing
DataProto) raises ``NotImplementedError`` with the reason: the clause is reported as
``error`` naming that limitation, so it stays visible and never hides the clause's other
cases behind a skip.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import torch

from rlconform.adapters.roll.layout import RollLayout, default_prompt_lengths
from rlconform.adapters.roll.layout import response_lengths as layout_lengths


class RollCommon:
    """Helpers every ROLL binding mixin uses (set up by ``RollTarget.__init__``)."""

    functionals: types.ModuleType
    kl_controller_module: types.ModuleType
    data_proto: type | None
    config_defaults: dict[str, Any]

    @property
    def F(self) -> types.ModuleType:  # noqa: N802 - ROLL's functionals module
        return self.functionals

    def _layout(self, response_mask: torch.Tensor, width: int | None = None) -> RollLayout:
        """ROLL's layout of a (B, R) response mask: prompts of the default lengths, and the
        grid padded to the profile's ``roll_sequence_length`` as ROLL pads every batch to
        its ``sequence_length`` (wider when the case needs it)."""
        if width is None:
            lengths = layout_lengths(response_mask)
            prompts = default_prompt_lengths(lengths.shape[0], lengths.device)
            needed = (int(prompts.max()) if prompts.numel() else 1) + response_mask.shape[-1]
            width = max(needed, int(self.profile.get("roll_sequence_length", needed)))
        return RollLayout.from_response_mask(response_mask, None, width)

    def _proto(self, tensors: dict[str, torch.Tensor], meta: dict | None = None) -> Any:
        """ROLL's own ``DataProto`` holding ``tensors`` (the math reads ``data.batch``)."""
        if self.data_proto is None:
            raise NotImplementedError(
                f"ROLL's DataProto could not be imported: {self.data_proto_error}"
            )
        return self.data_proto.from_dict(tensors=dict(tensors), meta_info=dict(meta or {}))

    def _sequence_fields(self, layout: RollLayout, action_mask: torch.Tensor | None) -> dict:
        """The (B, L) masks ROLL's pipeline functions read from a generated batch."""
        return {
            "attention_mask": layout.attention_mask(),
            "position_ids": layout.position_ids(),
            "response_mask": layout.response_mask(action_mask),
            "prompt_mask": layout.prompt_mask(),
        }

    def _config(self, **overrides: Any) -> types.SimpleNamespace:
        """A pipeline config carrying ROLL's ``PPOConfig`` defaults plus ``overrides``.

        ROLL's functions read a handful of attributes (``adv_estimator``, ``norm_*_type``,
        ``reward_clip``, ``kl_penalty``, ``add_token_level_kl``, ...); the full
        ``RLVRConfig`` needs model and cluster settings that the math never reads.
        """
        values = dict(self.config_defaults)
        n_sample = overrides.pop("num_return_sequences", 1)
        values.update(overrides)
        values["actor_infer"] = types.SimpleNamespace(
            generating_args=types.SimpleNamespace(num_return_sequences=n_sample)
        )
        return types.SimpleNamespace(**values)


def config_defaults(functionals: types.ModuleType) -> dict[str, Any]:
    """Plain defaults of ROLL's PPOConfig/RLVRConfig dataclass fields (no factories)."""
    import sys

    out: dict[str, Any] = {}
    for module_name, class_name in (
        ("roll.configs.base_config", "PPOConfig"),
        ("roll.pipeline.rlvr.rlvr_config", "RLVRConfig"),
    ):
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if cls is None or not dataclasses.is_dataclass(cls):
            continue
        for field in dataclasses.fields(cls):
            if field.default is not dataclasses.MISSING:
                out[field.name] = field.default
    return out
