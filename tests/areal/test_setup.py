"""Setup errors (exit 2) name the supported releases; the layout conversion, by hand.
Neither needs AReaL installed."""

from __future__ import annotations

import pytest
import torch

from rlconform.adapters.areal.layout import Packed, Padded, lengths
from rlconform.adapters.areal.runtime import load_runtime
from rlconform.adapters.base import SetupError


def test_an_unsupported_release_names_the_supported_ones(tmp_path):
    (tmp_path / "areal").mkdir()
    (tmp_path / "areal" / "version.py").write_text('__version__ = "0.9.0"\n')
    with pytest.raises(SetupError, match=r"AReaL 0\.9\.0 is not supported.*1\.0\.4"):
        load_runtime(str(tmp_path))


def test_a_path_without_the_package_says_so(tmp_path):
    with pytest.raises(SetupError, match="no areal/ package"):
        load_runtime(str(tmp_path))


def test_the_cli_exits_2_on_an_unsupported_release(tmp_path, capsys):
    from rlconform.conformance.cli import main

    (tmp_path / "areal").mkdir()
    (tmp_path / "areal" / "version.py").write_text('__version__ = "0.9.0"\n')
    assert main(["certify", "areal", "--framework-path", str(tmp_path)]) == 2
    assert "1.0.4" in capsys.readouterr().err


MASK = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0]])


def test_lengths_end_at_the_last_action_token():
    assert lengths(MASK) == [3, 2, 0]


def test_padded_batch_is_one_prompt_token_plus_the_longest_response():
    padded = Padded.of(MASK)
    assert padded.width == 4
    assert padded.attention_mask.int().tolist() == [[1, 1, 1, 1], [1, 1, 1, 0], [1, 0, 0, 0]]
    assert padded.loss_mask.tolist() == [[0, 1, 0, 1], [0, 0, 1, 0], [0, 0, 0, 0]]
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]])
    assert padded.raw(x).tolist() == [[0, 1, 2, 3], [0, 5, 6, 0], [0, 0, 0, 0]]
    assert padded.rolled(x, fill=-1).tolist() == [[1, 2, 3, -1], [5, 6, -1, -1], [-1] * 4]
    back = padded.response(torch.arange(12.0).reshape(3, 4), 6)
    assert back.tolist() == [[0, 1, 2, 3, 0, 0], [4, 5, 6, 7, 0, 0], [8, 9, 10, 11, 0, 0]]


def test_packed_micro_batch_keeps_each_response_and_the_position_after_it():
    packed = Packed.of(MASK)
    assert packed.cu_seqlens.tolist() == [0, 4, 7, 8]
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 9.0, 9.0, 9.0]])
    flat = packed.pack(x, after=-1.0)
    assert flat.tolist() == [1, 2, 3, -1, 5, 6, -1, -1]
    assert packed.unpack(flat, 4).tolist() == [[1, 2, 3, 0], [5, 6, 0, 0], [0, 0, 0, 0]]
