"""dtypes and type promotion: PyTorch's rules for every pair of dtypes and for tensors,
0-d tensors and Python scalars, checked against torch.result_type where PyTorch is installed
and against hard-coded expectations everywhere.
"""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

import flow
from flow import _dtype as D

NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
DT = {n: getattr(flow, n) for n in NAMES}


def _t(name: str, shape):
    return flow.zeros(shape, dtype=DT[name])


# -- hard-coded expectations (run without torch) --------------------------------------------------

PROMOTE = {
    ("bool", "bool"): "bool",
    ("bool", "uint8"): "uint8",
    ("bool", "int32"): "int32",
    ("bool", "float16"): "float16",
    ("uint8", "int8"): "int16",
    ("uint8", "int16"): "int16",
    ("uint8", "int64"): "int64",
    ("int8", "int16"): "int16",
    ("int32", "int64"): "int64",
    ("int64", "float16"): "float16",
    ("int64", "bfloat16"): "bfloat16",
    ("float16", "bfloat16"): "float32",
    ("float16", "float32"): "float32",
    ("bfloat16", "float64"): "float64",
    ("int8", "uint8"): "int16",
    ("uint8", "float16"): "float16",
    ("int16", "float32"): "float32",
}


@pytest.mark.parametrize("pair, want", sorted(PROMOTE.items()))
def test_promote_types_known_pairs(pair, want):
    a, b = pair
    assert flow.promote_types(DT[a], DT[b]) is DT[want]
    assert flow.promote_types(DT[b], DT[a]) is DT[want]


def test_promotion_is_symmetric_and_idempotent():
    for a, b in itertools.product(NAMES, NAMES):
        assert flow.promote_types(DT[a], DT[b]) is flow.promote_types(DT[b], DT[a])
    for a in NAMES:
        assert flow.promote_types(DT[a], DT[a]) is DT[a]


RESULT = [
    # (a, a is 0-d, b or scalar, b is 0-d, expected)
    ("int32", False, "int64", True, "int32"),  # a 0-d tensor of the same category does not widen
    ("int32", False, "float64", True, "float64"),  # ... one of a higher category decides the dtype
    ("float16", False, "float64", True, "float16"),
    ("uint8", False, "int8", True, "uint8"),
    ("bool", False, "int64", True, "int64"),
    ("int64", True, "int8", True, "int64"),  # all 0-d: ordinary promotion
    ("float16", True, "bfloat16", True, "float32"),
    ("uint8", False, 5, None, "uint8"),  # Python scalars only change the category
    ("uint8", False, 2.5, None, "float32"),
    ("int32", False, True, None, "int32"),
    ("bool", False, 3, None, "int64"),
    ("bool", False, True, None, "bool"),
    ("float16", False, 1e10, None, "float16"),
    ("bfloat16", True, 2.0, None, "bfloat16"),
    ("int16", True, 2.0, None, "float32"),
]


@pytest.mark.parametrize("a, a0, b, b0, want", RESULT)
def test_result_type_of_tensors_zero_dim_tensors_and_scalars(a, a0, b, b0, want):
    ta = _t(a, () if a0 else (3,))
    other = _t(b, () if b0 else (3,)) if isinstance(b, str) else b
    assert flow.result_type(ta, other) is DT[want]
    assert flow.result_type(other, ta) is DT[want]
    got = (ta + other).dtype if not (a == "bool" and (b == "bool" or isinstance(b, bool))) else DT["bool"]
    assert got is DT[want]


def test_result_type_with_three_operands_and_only_scalars():
    assert flow.result_type(_t("int8", (2,)), _t("float64", ()), 1) is flow.float64
    assert flow.result_type(_t("int8", (2,)), _t("int64", ()), 1.5) is flow.float32
    assert flow.result_type(1, 2) is flow.int64
    assert flow.result_type(1, 2.0) is flow.float32
    assert flow.result_type(True, False) is flow.bool


def test_scalar_results_follow_the_default_dtype():
    old = flow.get_default_dtype()
    try:
        flow.set_default_dtype(flow.float64)
        assert (flow.tensor([1, 2]) * 0.5).dtype is flow.float64
        assert flow.tensor([1.0]).dtype is flow.float64
        assert flow.result_type(_t("int32", (2,)), 1.0) is flow.float64
        assert (flow.ones(2, dtype=flow.float32) * 0.5).dtype is flow.float32
    finally:
        flow.set_default_dtype(old)
    assert flow.get_default_dtype() is old
    assert (flow.tensor([1, 2]) * 0.5).dtype is flow.float32


def test_set_default_dtype_rejects_integers():
    with pytest.raises(TypeError, match="floating-point"):
        flow.set_default_dtype(flow.int64)


def test_division_and_float_only_ops_promote_integers_to_float():
    assert (flow.tensor([1, 2]) / flow.tensor([2, 2])).dtype is flow.float32
    assert (flow.tensor([1, 2], dtype=flow.int8) / 2).dtype is flow.float32
    assert flow.tensor([1, 4]).sqrt().dtype is flow.float32
    assert (flow.tensor([True]) / 2).dtype is flow.float32


def test_scalar_overflow_wraps_integers_and_gives_inf_for_floats_as_in_pytorch():
    assert (flow.ones(2, dtype=flow.uint8) + 1000).tolist() == [233, 233]
    assert (flow.ones(2, dtype=flow.int8) * 300).tolist() == [44, 44]
    assert (flow.ones(1, dtype=flow.int16) + (1 << 70) + 5).tolist() == [6]
    assert (flow.zeros(2, dtype=flow.float16) + 1e10).tolist() == [float("inf")] * 2
    assert (flow.zeros(1, dtype=flow.float16) - 1e10).tolist() == [float("-inf")]


# -- against PyTorch -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def _tname(d) -> str:
    return str(d).split(".")[-1]


def test_promote_types_matches_torch_for_all_pairs(torch):
    for a, b in itertools.product(NAMES, NAMES):
        assert flow.promote_types(DT[a], DT[b]).name == _tname(
            torch.promote_types(getattr(torch, a), getattr(torch, b))
        ), (a, b)


SHAPES = [((3,), (3,)), ((3,), ()), ((), (3,)), ((), ())]


@pytest.mark.parametrize("sa, sb", SHAPES)
def test_result_type_and_add_match_torch_for_tensor_pairs(torch, sa, sb):
    for a, b in itertools.product(NAMES, NAMES):
        fa, fb = _t(a, sa), _t(b, sb)
        ta, tb = torch.zeros(sa, dtype=getattr(torch, a)), torch.zeros(sb, dtype=getattr(torch, b))
        want = _tname(torch.result_type(ta, tb))
        assert flow.result_type(fa, fb).name == want, (a, sa, b, sb)
        if a == b == "bool":
            continue  # torch adds bools as logical or; flow does the same through promotion
        assert (fa + fb).dtype.name == _tname((ta + tb).dtype), (a, sa, b, sb)
        assert (fa * fb).dtype.name == _tname((ta * tb).dtype), (a, sa, b, sb)


@pytest.mark.parametrize("shape", [(3,), ()])
@pytest.mark.parametrize("scalar", [True, 2, -3, 2.5])
def test_result_type_matches_torch_for_tensor_and_scalar(torch, shape, scalar):
    for a in NAMES:
        fa, ta = _t(a, shape), torch.zeros(shape, dtype=getattr(torch, a))
        assert flow.result_type(fa, scalar).name == _tname(torch.result_type(ta, scalar)), (a, shape, scalar)
        if a == "bool" and isinstance(scalar, bool):
            continue
        if a == "uint8" and scalar == -3:
            continue  # torch wraps negative scalars into uint8 differently on each version
        assert (fa * scalar).dtype.name == _tname((ta * scalar).dtype), (a, shape, scalar)
        assert (scalar * fa).dtype.name == _tname((scalar * ta).dtype), (a, shape, scalar)


def test_true_division_matches_torch(torch):
    for a in NAMES:
        if a == "bool":
            continue
        fa = flow.ones(2, dtype=DT[a])
        ta = torch.ones(2, dtype=getattr(torch, a))
        assert (fa / 2).dtype.name == _tname((ta / 2).dtype)
        assert (fa / fa).dtype.name == _tname((ta / ta).dtype)


# -- the dtype objects ------------------------------------------------------------------------------


def test_dtypes_are_interned_and_named_like_pytorch():
    assert flow.float is flow.float32 and flow.double is flow.float64 and flow.half is flow.float16
    assert flow.long is flow.int64 and flow.int is flow.int32 and flow.short is flow.int16
    assert repr(flow.float32) == "flow.float32" and flow.float32.itemsize == 4
    assert flow.bfloat16.is_floating_point and not flow.int8.is_floating_point
    assert not flow.uint8.is_signed and flow.int8.is_signed and not flow.bool.is_signed
    assert pickle.loads(pickle.dumps(flow.bfloat16)) is flow.bfloat16


@pytest.mark.parametrize(
    "spec, want",
    [
        ("float32", "float32"),
        ("flow.int64", "int64"),
        ("torch.float16", "float16"),
        ("double", "float64"),
        (np.float32, "float32"),
        (np.dtype("int16"), "int16"),
        (float, "float32"),
        (int, "int64"),
        (bool, "bool"),
        ("long", "int64"),
        ("half", "float16"),
    ],
)
def test_as_dtype(spec, want):
    assert D.as_dtype(spec) is DT[want]


def test_as_dtype_rejects_what_it_does_not_know():
    with pytest.raises(TypeError, match="unknown dtype 'complex64'"):
        D.as_dtype("complex64")
    with pytest.raises(TypeError, match="unsupported dtype"):
        D.as_dtype(np.complex64)


def test_devices_are_interned_and_compare_with_strings():
    assert flow.device("cpu") is flow.device("cpu") is flow.device(flow.device("cpu"))
    assert flow.device("cuda:1") is flow.device("cuda", 1)
    assert flow.device("cuda:1").index == 1 and str(flow.device("cuda", 0)) == "cuda:0"
    assert flow.device("cpu") == "cpu" and flow.device("cuda:0") != "cuda:1"
    assert repr(flow.device("cuda", 2)) == "device(type='cuda', index=2)"
    assert pickle.loads(pickle.dumps(flow.device("cuda:3"))) is flow.device("cuda:3")
    assert {flow.device("cpu"): 1}["cpu"] == 1
    with pytest.raises(ValueError, match="invalid device string"):
        flow.device("cuda:x")
    with pytest.raises(ValueError, match="index given twice"):
        flow.device("cuda:0", 1)
    with pytest.raises(ValueError, match=">= 0"):
        flow.device("cuda", -1)
    with pytest.raises(TypeError, match="expected a string"):
        flow.device(3)


# -- dtype semantics of elementwise ops -------------------------------------------------------------


def test_integer_powers_follow_pytorch():
    a = flow.tensor([-3, -2, -1, 0, 1, 2, 3])
    assert (a ** flow.full((7,), -1)).tolist() == [0, 0, -1, 0, 1, 0, 0]
    assert (a ** flow.full((7,), -2)).tolist() == [0, 0, 1, 0, 1, 0, 0]
    assert (2 ** flow.tensor([-1, 0, 3])).tolist() == [0, 1, 8]
    assert (a**2).dtype is flow.int64 and (flow.tensor([2, 3], dtype=flow.uint8) ** 2).tolist() == [4, 9]
    assert (flow.tensor([True, False]) ** True).dtype is flow.bool
    with pytest.raises(flow.errors.OpError, match="Integers to negative integer powers are not allowed"):
        a**-1


def test_bool_inputs_of_unary_ops():
    b = flow.tensor([True, False])
    assert flow.sign(b).tolist() == [True, False] and flow.sign(b).dtype is flow.bool
    assert flow.square(b).dtype is flow.int64 and flow.square(b).tolist() == [1, 0]
    for fn in (flow.abs, flow.neg, flow.relu, flow.floor, flow.ceil, flow.trunc, flow.round):
        with pytest.raises(flow.errors.OpTypeError, match=r"'input' must be .*\(not bool\), got flow.bool"):
            fn(b)
    for fn in (lambda x: x // x, lambda x: x % x, lambda x: flow.fmod(x, x), lambda x: x**x):
        with pytest.raises(flow.errors.OpTypeError, match=r"must be .*\(not bool\), got flow.bool"):
            fn(b)
