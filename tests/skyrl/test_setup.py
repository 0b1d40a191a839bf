"""Setup errors (exit 2) name the supported releases and the Python SkyRL needs; the layout
conversion, by hand. Neither needs SkyRL installed."""

from __future__ import annotations

import sys

import pytest
import torch

from rlconform.adapters.base import SetupError
from rlconform.adapters.skyrl.layout import RightAligned, lengths
from rlconform.adapters.skyrl.runtime import load_runtime


def _checkout(tmp_path, version: str):
    (tmp_path / "skyrl").mkdir()
    (tmp_path / "skyrl" / "__init__.py").write_text(f'__version__ = "{version}"\n')
    return str(tmp_path)


def test_an_unsupported_release_names_the_supported_ones(tmp_path):
    with pytest.raises(SetupError, match=r"SkyRL 0\.3\.1 is not supported.*0\.4\.0"):
        load_runtime(_checkout(tmp_path, "0.3.1"))


def test_a_path_without_the_package_says_so(tmp_path):
    with pytest.raises(SetupError, match="no skyrl/ package"):
        load_runtime(str(tmp_path))


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="this Python runs SkyRL")
def test_an_older_python_is_named(tmp_path):
    with pytest.raises(SetupError, match=r"needs Python >= 3\.12"):
        load_runtime(_checkout(tmp_path, "0.4.0"))


def test_the_cli_exits_2_on_an_unsupported_release(tmp_path, capsys):
    from rlconform.conformance.cli import main

    assert main(["certify", "skyrl", "--framework-path", _checkout(tmp_path, "0.3.1")]) == 2
    assert "0.4.0" in capsys.readouterr().err


MASK = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]])


def test_lengths_end_at_the_last_action_token():
    assert lengths(MASK) == [3, 2, 0]


def test_right_alignment_moves_each_response_to_the_last_columns():
    layout = RightAligned.of(MASK)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0]])
    # row 0: response [1, 2, 3] (L 3), padding [4] moves to the left column
    # row 1: response [5, 6] (L 2), padding [7, 8] to the left; row 2: no response
    assert layout.to_skyrl(x).tolist() == [[4, 1, 2, 3], [7, 8, 5, 6], [9, 10, 11, 12]]
    assert layout.to_canonical(layout.to_skyrl(x)).tolist() == x.tolist()
    # SkyRL's response_mask covers the whole response, the tool token (row 0, column 1)
    # included; loss_mask only the action tokens
    assert layout.response_mask().tolist() == [[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0]]
    assert layout.loss_mask(MASK).tolist() == [[0, 1, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0]]


def test_right_alignment_keeps_the_callers_tensor():
    x = torch.arange(12.0).reshape(3, 4)
    before = x.clone()
    RightAligned.of(MASK).to_skyrl(x)[0, 0] = 99.0
    assert torch.equal(x, before)
