"""flow.testing.require_torch: which skips a parity run turns into failures."""

from types import SimpleNamespace

import pytest

from flow.testing.require_torch import _skipped_for_torch


def _report(reason: str) -> SimpleNamespace:
    return SimpleNamespace(longrepr=("test_x.py", 1, reason))


@pytest.mark.parametrize(
    "reason",
    [
        "Skipped: could not import 'torch': No module named 'torch'",
        "Skipped: could not import 'torch.nn.functional': No module named 'torch'",
        "No module named 'torch'",
    ],
)
def test_a_missing_torch_counts(reason):
    assert _skipped_for_torch(_report(reason))


@pytest.mark.parametrize(
    "reason",
    [
        "Skipped: could not import 'torchvision': No module named 'torchvision'",
        "Skipped: could not import 'timm': No module named 'timm'",
        "Skipped: could not import 'torchaudio': No module named 'torchaudio'",
        "Skipped: needs a GPU",
    ],
)
def test_other_skips_stay_skips(reason):
    assert not _skipped_for_torch(_report(reason))
