"""The release table: unsupported unsloth-zoo and TRL releases exit 2 naming the range
(no framework needed)."""

from __future__ import annotations

import pytest

from rlconform.adapters.base import SetupError
from rlconform.adapters.unsloth.releases import check_trl, check_zoo


def test_the_supported_release_passes():
    assert check_zoo("2026.10.9") == "2026.10.9"
    check_trl("1.15.0")


@pytest.mark.parametrize("version", ["2026.9.5", "2025.12.8"])
def test_releases_that_need_an_accelerator_are_refused_naming_why(version):
    with pytest.raises(SetupError, match="refuse a machine without an accelerator.*2026.10.9"):
        check_zoo(version)


def test_an_unread_release_is_refused_naming_the_range():
    with pytest.raises(SetupError, match="not one the binding has read.*2026.10.9"):
        check_zoo("2026.11.1")


def test_a_trl_outside_the_range_is_refused():
    with pytest.raises(SetupError, match="1.15.0"):
        check_trl("1.16.0")


def test_without_the_unsloth_package_the_setup_error_says_how_to_install_it(monkeypatch):
    """unsloth_zoo's import needs find_spec('unsloth'): the runtime says so before trying."""
    import importlib.util
    from importlib import metadata

    from rlconform.adapters.unsloth import runtime

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(metadata, "version", lambda name: "2026.10.9")
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "unsloth" else real_find_spec(name, *a),
    )
    with pytest.raises(SetupError, match=r"beside the unsloth package.*--no-deps unsloth==2026"):
        runtime.load_zoo()
