"""Plumbing shared by the ROLL bindings: layouts, DataProto batches and pipeline configs.

Nothing here computes: it moves canonical tensors into ROLL's layout and containers and
back. The math is always one of ROLL's own functions.

Two kinds of "ROLL cannot do this" are told apart on purpose. A whole mode ROLL does not
offer (token-sum aggregation, straight-through KL) raises ``Unsupported``: every case asking
for it is skipped as "not implemented by target". One input ROLL's signature cannot express
(a truncated sample's bootstrap value, groups of unequal size on a path that reshapes by
group size, a non-default eps) raises ``Inexpressible`` with the reason: that case alone is
skipped and counted, and the clause goes on with its other cases, so an unrelated break in
the same clause still shows.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import torch

from rlconform.adapters.roll.layout import RollLayout, default_prompt_lengths
from rlconform.adapters.roll.layout import response_lengths as layout_lengths
from rlconform.adapters.roll.source import RollSources, SingleProcessCollective

#: The loss-mask key the rlvr actor's policy loss counts and passes to agg_loss.
LOSS_MASK_KEY = "final_response_mask"


class RollCommon:
    """Helpers every ROLL binding mixin uses (set up by ``RollTarget.__init__``)."""

    runtime: Any
    functionals: types.ModuleType
    kl_controller_module: types.ModuleType
    data_proto: type | None
    config_defaults: dict[str, Any]
    config_module: types.ModuleType
    sources: RollSources

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
            raise RuntimeError(f"ROLL's DataProto could not be imported: {self.data_proto_error}")
        return self.data_proto.from_dict(tensors=dict(tensors), meta_info=dict(meta or {}))

    def counted(self, grid_mask: torch.Tensor, totals: tuple[int, int] | None) -> tuple:
        """(batch_num_tokens, global_valid_samples, shares) from ROLL's strategy counters
        on a DataProto holding ``grid_mask`` as ``final_response_mask``.

        ``totals`` = (tokens, samples) of the whole mini-batch, written by the all-reduce;
        None: this batch is the whole mini-batch on one rank.
        """
        batch = self._proto(
            {
                LOSS_MASK_KEY: grid_mask,
                "input_ids": torch.zeros(
                    grid_mask.shape[0], grid_mask.shape[-1] + 1, dtype=torch.long
                ),
            },
            meta={"loss_mask_keys": [LOSS_MASK_KEY]},
        )
        tokens_collective = SingleProcessCollective(None if totals is None else [totals[0]])
        tokens = self.sources.counter("batch_num_tokens", tokens_collective)(None, batch)
        # _get_global_valid_samples all-reduces len(batch) ("default") first, then each key.
        samples_collective = SingleProcessCollective(
            None if totals is None else [len(batch), totals[1]]
        )
        samples = self.sources.counter("global_valid_samples", samples_collective)(None, batch)
        shares = (tokens_collective.shares[0], samples_collective.shares[1])
        return tokens[LOSS_MASK_KEY], samples[LOSS_MASK_KEY], shares

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
