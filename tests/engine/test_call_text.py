"""A failing clause's counterexample carries the call into the target that broke it, as
Python a user can paste (conformance/call_text.py); the console prints it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlconform.adapters.registry import load_target
from rlconform.conformance.call_text import render
from rlconform.conformance.cli import main
from tests.conftest import certify_one
from tests.engine.targets import broken_reward_target, nominal_grpo_target


def _paste(call: str, target):
    return eval(call, {"torch": torch, "np": np, "target": target})  # what a user pastes


def test_pasting_the_call_reproduces_the_reward_in_padding():
    result = certify_one(broken_reward_target(), "reward.place_last")
    call = result.counterexample["call"]
    assert call.startswith("target.place_reward_last(scores=torch.tensor(")
    target = load_target("tests.engine.targets:broken_reward_target")
    rewards = _paste(call, target)
    mask = _paste(call.replace("target.place_reward_last", "dict"), None)["response_mask"]
    assert (rewards[mask == 0] != 0).any()  # the bug: a reward in padding
    assert (_paste(call, load_target("torchref"))[mask == 0] == 0).all()  # torchref: none


def test_pasting_the_call_reproduces_the_population_std():
    result = certify_one(nominal_grpo_target(), "adv.grpo")
    call = result.counterexample["call"]
    assert "index=np.array(" in call and "epsilon=1e-06" in call
    broken = _paste(call, nominal_grpo_target())[0]
    right = _paste(call, load_target("torchref"))[0]
    assert not torch.allclose(broken, right)


def test_values_are_written_as_python():
    class Target:
        def op(self, x, y, *, flags=None):
            return x

    text = render(
        Target(),
        "op",
        (torch.tensor([float("nan"), float("inf")]), np.array([1, 2])),
        {"flags": {"a": (True,)}},
    )
    assert text == (
        "target.op(x=torch.tensor([float('nan'), float('inf')], dtype=torch.float32), "
        "y=np.array([1, 2], dtype=np.int64), flags={'a': (True,)})"
    )
    assert render(Target(), "op", (object(), 1), {}) is None  # not writable: no call


@pytest.mark.parametrize("only", ["reward.place_last"])
def test_the_console_prints_the_call(only, capsys):
    assert main(["certify", "tests.engine.targets:broken_reward_target", "--only", only]) == 1
    out = capsys.readouterr().out
    assert "the calls that broke them" in out
    assert "target.place_reward_last(scores=torch.tensor(" in out
