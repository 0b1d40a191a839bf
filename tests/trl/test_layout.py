"""The TRL layout's refusals of micro-batches GRPOTrainer never builds (shared by the TRL,
TRL + Liger and Unsloth bindings)."""

from __future__ import annotations

import pytest

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.trl import layout


def test_a_micro_batch_without_a_completion_is_inexpressible():
    with pytest.raises(Inexpressible, match="at least one completion"):
        layout.require_micro_batch((0, 3))


def test_completions_of_no_token_are_refused_only_where_a_binding_needs_a_column():
    layout.require_micro_batch((2, 0))  # an element-wise op has nothing to refuse
    with pytest.raises(Inexpressible, match="completions of no token"):
        layout.require_micro_batch((2, 0), tokens=True)
    layout.require_micro_batch((2, 1), tokens=True)
