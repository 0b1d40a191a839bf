"""adapters.is_correction_mode: the one parse of a contract IS-correction mode that every
adapter's ``is_correction_weights`` uses."""

from __future__ import annotations

import pytest

from rlconform.adapters.is_correction_mode import split_mode


@pytest.mark.parametrize(
    ("mode", "parts"),
    [
        ("token_truncate", ("token", "truncate")),
        ("token_mask", ("token", "mask")),
        ("sequence_truncate", ("sequence", "truncate")),
        ("sequence_mask", ("sequence", "mask")),
    ],
)
def test_splits_every_contract_mode(mode, parts):
    assert split_mode(mode) == parts


@pytest.mark.parametrize("mode", ["token", "sequence_clip", "geo_mask", "token_mask_x", ""])
def test_other_modes_name_the_mode(mode):
    with pytest.raises(ValueError, match="unknown IS-correction mode"):
        split_mode(mode)
