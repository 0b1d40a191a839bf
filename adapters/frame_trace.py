"""Reading a per-token tensor off a framework function's frame (nothing is changed).

Some loss functions build the per-token loss as a local and return only its reduction
(AReaL's ``ppo_actor_loss_fn`` / ``ppo_critic_loss_fn``, SkyRL's ``ppo_critic_loss``); the
contract compares the per-token loss. Tracing the function's lines and keeping the last
value of the local that is still a tensor with a token dimension gives the per-token loss
the framework reduced, with its autograd graph, without re-implementing a line of it.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def last_per_token(function: Any, name: str) -> Iterator[dict[str, Any]]:
    """Inside the block, ``captured[name]`` is the last value of ``function``'s local
    ``name`` that had at least one dimension (read at each line of the function)."""
    code = inspect.unwrap(function).__code__
    captured: dict[str, Any] = {}

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        value = frame.f_locals.get(name)
        if isinstance(value, torch.Tensor) and value.ndim >= 1:
            captured[name] = value
        return on_line

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        return on_line if frame.f_code is code else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield captured
    finally:
        sys.settrace(previous)
