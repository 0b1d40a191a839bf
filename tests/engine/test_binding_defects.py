"""A binding that breaks is rlconform's defect, never the target's finding: an operation that
raises ImportError (a module the binding imports is missing), or an AttributeError /
NameError raised in a shipped adapter's own code, makes the clause an ungraded ``error``
naming the binding, not a ``runs`` finding with a severity and a ``crash`` consequence."""

from __future__ import annotations

import pytest

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.errors import binding_defect
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify


def _missing_module(orig, *args, **kwargs):
    import rlconform_no_such_module  # noqa: F401


def _framework_attribute_error(orig, *args, **kwargs):
    return None.dim()  # raised here, in a test module: the implementation's own failure


def _grpo(plant):
    target = with_overrides(TorchRef(), "plant", advantage_grpo=plant)
    (result,) = certify(target, select("adv.grpo"), get_run_profile("ci"), seed=0).clauses
    return result


def test_a_missing_module_is_a_binding_defect():
    result = _grpo(_missing_module)
    assert result.status == "error"
    assert "binding defect" in result.message and "rlconform_no_such_module" in result.message
    assert result.severity is None and result.consequence is None


def test_an_attribute_error_of_the_implementation_stays_its_finding():
    result = _grpo(_framework_attribute_error)
    assert result.status == "error" and result.check == "runs"
    assert "binding defect" not in result.message
    assert result.severity is not None


def test_only_errors_raised_in_an_adapter_module_are_the_adapters():
    from rlconform.adapters import base

    try:
        exec(compile("missing_name", base.__file__, "exec"), {})
    except NameError as exc:  # a frame whose code is an adapter module's
        assert binding_defect(exc) is not None
    try:
        print(missing_name)  # noqa: F821
    except NameError as exc:
        assert binding_defect(exc) is None
    assert binding_defect(ValueError("x")) is None
    with pytest.raises(ImportError) as info:
        import rlconform_no_such_module  # noqa: F401
    assert "install" in binding_defect(info.value)
