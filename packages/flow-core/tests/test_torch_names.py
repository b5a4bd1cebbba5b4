"""The PyTorch names flow lacks stay visible: torch_missing_names.txt lists them, and this test keeps
the list exact as work lands (see tools/torch_names.py, which also rewrites the list)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

_TOOLS = Path(__file__).resolve().parents[3] / "tools"
if not (_TOOLS / "torch_names.py").is_file():
    pytest.skip("tools/torch_names.py is not here (flow-core outside its monorepo)", allow_module_level=True)
sys.path.insert(0, str(_TOOLS))

import torch_names  # noqa: E402


@pytest.fixture(scope="module")
def gaps():
    return torch_names.gap()


@pytest.fixture(scope="module")
def listed():
    return torch_names.read_list()


def test_listed_names_flow_now_has_are_deleted_from_the_list(gaps, listed):
    counted = {f"{g.namespace}.{n}" for g in gaps for n in g.names}
    missing = set(torch_names.missing_lines(gaps))
    landed = [n for n in listed if n in counted and n not in missing]
    assert not landed, (
        f"flow has these now: delete their lines from {torch_names.LIST_PATH.name} "
        f"(or run `{torch_names.REGENERATE}`): {', '.join(landed)}"
    )


def test_every_missing_name_is_listed(gaps, listed):
    unlisted = [n for n in torch_names.missing_lines(gaps) if n not in set(listed)]
    assert not unlisted, (
        "flow lacks these PyTorch names and the list does not have them (a name flow lost, or one new in "
        f"this torch): restore them in flow, or add them to {torch_names.LIST_PATH.name} "
        f"(`{torch_names.REGENERATE}`): {', '.join(unlisted)}"
    )


def test_the_list_has_no_duplicates(listed):
    assert len(listed) == len(set(listed))


def test_exclusion_rules_each_drop_a_name_of_their_namespace():
    # a rule that matches nothing is a typo or a name torch dropped: it would hide nothing and mislead
    import torch

    unused = []
    for ns, pattern, reason in torch_names.EXCLUDED:
        obj = torch_names.torch_object(ns)
        if not any(torch_names.excluded(ns, n) == reason for n in dir(obj) + list(getattr(obj, "__all__", []))):
            unused.append(f"{ns}: {pattern}")
    assert not unused, f"exclusion rules that match no name in torch {torch.__version__}: {unused}"


def test_counted_names_exclude_modules_private_names_and_excluded_ones(gaps):
    by_ns = {g.namespace: set(g.names) for g in gaps}
    assert "nn" not in by_ns["torch"] and "_C" not in by_ns["torch"]  # modules, private
    assert "cudnn_convolution" not in by_ns["torch"] and "float32" not in by_ns["torch"]  # excluded, a value
    assert {"add", "Tensor"} <= by_ns["torch"] and {"Linear", "Module"} <= by_ns["torch.nn"]
    assert "add_" in by_ns["torch.Tensor"] and "relu_" not in by_ns["torch"]
    assert "Callable" not in by_ns["torch.nn.functional"] and "relu" in by_ns["torch.nn.functional"]


def test_a_name_flow_lacks_is_reported_missing(monkeypatch):
    import flow

    monkeypatch.delattr(flow, "erfinv")
    gaps = {g.namespace: g for g in torch_names.gap()}
    assert "erfinv" in gaps["torch"].missing and "erfinv" not in gaps["torch.special"].missing


def test_doc_is_generated_from_the_same_data(gaps):
    doc = torch_names.render_doc(gaps)
    assert torch_names.REGENERATE in doc
    t = next(g for g in gaps if g.namespace == "torch")
    assert f"| `torch` | {len(t.names)} | {t.present} (" in doc
    if t.missing:
        assert f"`{t.missing[0]}`" in doc
