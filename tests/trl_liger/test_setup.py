"""The Liger branch's release table: supported TRL releases load, the others exit 2 naming
the range (and, from 1.13, why: the branch is gone). Runs without TRL or Liger."""

from __future__ import annotations

import pytest

from rlconform.adapters.base import SetupError
from rlconform.adapters.trl_liger import releases


@pytest.mark.parametrize("release", ["1.9.0", "1.10.0", "1.11.0", "1.12.0"])
def test_releases_with_the_fused_branch_are_supported(release):
    branch = releases.branch_for(release)
    assert release in branch.trl_releases
    assert branch.passes_num_items is (release in ("1.11.0", "1.12.0"))


@pytest.mark.parametrize("release", ["1.13.0", "1.16.0"])
def test_releases_without_the_branch_say_it_was_removed(release):
    with pytest.raises(SetupError, match=r"1\.13\.0 removed the fused Liger GRPO loss") as info:
        releases.branch_for(release)
    assert "1.9.0 .. 1.12.0" in str(info.value) and "certify trl" in str(info.value)


def test_an_older_release_names_the_range():
    with pytest.raises(SetupError, match=r"1\.9\.0 \.\. 1\.12\.0"):
        releases.branch_for("1.8.0")


def test_an_unknown_liger_release_names_the_supported_ones():
    releases.check_liger("0.8.5")
    with pytest.raises(SetupError, match="0.8.5"):
        releases.check_liger("0.6.0")


def test_certify_exits_2_when_the_target_cannot_load(capsys):
    """Without a supported TRL + Liger pair (the main environment has TRL absent or 1.16),
    ``certify trl-liger`` is a setup error, exit 2, naming what to install."""
    from tests.trl_liger.conftest import liger_skip_reason

    if liger_skip_reason() is None:
        pytest.skip("trl-liger loads here")
    from rlconform.conformance.cli import main

    assert main(["certify", "trl-liger", "--only", "loss.ppo_clip"]) == 2
    err = capsys.readouterr().err
    assert "trl-liger" in err and "rlconform[trl-liger]" in err
