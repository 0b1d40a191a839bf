"""adapters/verl/imports.py: the placeholders for verl's missing optional services."""

from __future__ import annotations

import inspect
import sys

import pytest

from rlconform.adapters.verl import imports


def test_a_placeholder_names_unavailable_and_has_no_dunders():
    module = imports._placeholder_module("fastapi")
    assert module.APIRouter is imports._Unavailable
    with pytest.raises(RuntimeError, match="serving extra"):
        module.APIRouter()
    assert not hasattr(module, "__file__")
    assert not hasattr(module, "__version__")


def test_inspect_walks_sys_modules_past_a_placeholder(monkeypatch):
    """inspect.getmodule (torch.library.register_fake calls it at import time, e.g. from
    peft 0.22) reads every module's __file__ while verl imports."""
    monkeypatch.setitem(sys.modules, "uvicorn", imports._placeholder_module("uvicorn"))
    assert (
        inspect.getmodule(test_inspect_walks_sys_modules_past_a_placeholder)
        is sys.modules[__name__]
    )
