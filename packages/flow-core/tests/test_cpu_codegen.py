"""CPU code generation for fused elementwise programs (flow.backends.cpu.codegen).

Native kernels are compared with the reference evaluation (each instruction run by the op's own
NumPy kernel) on random programs, broadcasting layouts, reductions and both float dtypes; the
compiler cache, the loop layout and the error paths are tested directly.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from flow.backends.cpu import codegen, codegen_ops
from flow.graph.passes.fused_program import FusedProgram, evaluate

pytestmark = pytest.mark.skipif(codegen.find_compiler() is None, reason="no C compiler")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "flow-cache"))


def _check(prog, arrays, rtol=None):
    k = codegen.native_kernel(prog)
    got = k(arrays)
    got = got if isinstance(got, tuple) else (got,)
    ref = evaluate(prog, arrays)
    for g, r in zip(got, ref):
        assert g.shape == r.shape and g.dtype == r.dtype
        if r.dtype == np.bool_:
            np.testing.assert_array_equal(g, r)
        else:
            tol = rtol or (2e-5 if r.dtype == np.float32 else 1e-12)
            np.testing.assert_allclose(g, r, rtol=tol, atol=tol)
    return got


UNARY = [
    "neg",
    "exp",
    "tanh",
    "sigmoid",
    "relu",
    "abs",
    "square",
    "sin",
    "cos",
    "erf",
    "floor",
    "sign",
    "silu",
    "expm1",
    "atan",
]
POSITIVE_UNARY = ["log", "sqrt", "rsqrt", "reciprocal", "log1p", "log2"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]


def _random_program(rng, dt, shape, n_in):
    """A random chain/tree over ``n_in`` inputs of ``shape`` (some broadcast)."""
    in_shapes = []
    for k in range(n_in):
        s = list(shape)
        for d in range(len(s)):
            if k and rng.random() < 0.3:
                s[d] = 1
        in_shapes.append(tuple(s[rng.integers(0, 2) if k else 0 :]))
    instrs = []
    vals = [("i", k) for k in range(n_in)]
    for _ in range(int(rng.integers(2, 7))):
        r = rng.random()
        if r < 0.4:
            op = UNARY[rng.integers(len(UNARY))]
            instrs.append((op, (vals[rng.integers(len(vals))],), (), dt))
        elif r < 0.5:
            op = POSITIVE_UNARY[rng.integers(len(POSITIVE_UNARY))]
            instrs.append(("abs", (vals[rng.integers(len(vals))],), (), dt))
            instrs.append(("add", (("t", len(instrs) - 1), ("c", 0.5)), (), dt))
            instrs.append((op, (("t", len(instrs) - 1),), (), dt))
        else:
            op = BINARY[rng.integers(len(BINARY))]
            b = vals[rng.integers(len(vals))] if rng.random() < 0.7 else ("c", float(rng.standard_normal()))
            if op == "div" and b[0] == "c":
                b = ("c", 1.7)
            a = vals[rng.integers(len(vals))]
            if op == "div" and b[0] != "c":  # keep denominators away from 0
                instrs.append(("abs", (b,), (), dt))
                instrs.append(("add", (("t", len(instrs) - 1), ("c", 1.0)), (), dt))
                b = ("t", len(instrs) - 1)
            instrs.append((op, (a, b), (), dt))
        vals.append(("t", len(instrs) - 1))
    # every input read at least once: the first instruction might not read them all; add them in
    for k in range(n_in):
        instrs.append(("add", (("t", len(instrs) - 1), ("i", k)), (), dt))
    outs = (len(instrs) - 1,) + ((len(instrs) // 2,) if len(instrs) > 3 else ())
    return FusedProgram(tuple(shape), tuple((s, dt) for s in in_shapes), tuple(instrs), tuple(dict.fromkeys(outs)))


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("seed", range(12))
def test_random_programs_match_the_reference(dt, seed):
    rng = np.random.default_rng(seed)
    shape = [(64,), (6, 50), (3, 4, 5, 7), (2, 1, 33)][seed % 4]
    prog = _random_program(rng, dt, shape, 1 + seed % 3)
    arrays = [rng.standard_normal(s).astype(dt) for s, _ in prog.inputs]
    _check(prog, arrays, rtol=1e-4 if dt == "float32" else 1e-10)


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("in_shape", [(4, 8, 8, 8), (1, 8, 1, 1), (8, 1, 1), (8, 1), (1,), (), (4, 1, 8, 1)])
def test_broadcast_layouts(dt, in_shape):
    shape = (4, 8, 8, 8)
    prog = FusedProgram(
        shape,
        ((shape, dt), (in_shape, dt)),
        (
            ("mul", (("i", 0), ("i", 1)), (), dt),
            ("sub", (("t", 0), ("c", 0.25)), (), dt),
            ("relu", (("t", 1),), (), dt),
        ),
        (2,),
    )
    rng = np.random.default_rng(0)
    _check(prog, [rng.standard_normal(shape).astype(dt), rng.standard_normal(in_shape).astype(dt)])


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize(
    "shape,reduce,other",
    [((6, 50), 1, (50,)), ((3, 4, 5), 2, (3, 1, 1)), ((7, 9), 2, (7, 1)), ((4, 5, 6), 1, (5, 1)), ((100000,), 1, ())],
)
@pytest.mark.parametrize("op,keep", [("sum", False), ("mean", True)])
def test_trailing_reductions(dt, shape, reduce, other, op, keep):
    dims = tuple(range(len(shape) - reduce, len(shape)))
    prog = FusedProgram(
        shape,
        ((shape, dt), (other, dt)),
        (
            ("mul", (("i", 0), ("i", 1)), (), dt),
            ("tanh", (("t", 0),), (), dt),
            (op, (("t", 1),), (("dim", dims), ("keepdim", keep)), dt),
        ),
        (1, 2),
        reduce,
    )
    rng = np.random.default_rng(1)
    got = _check(
        prog,
        [rng.standard_normal(shape).astype(dt), rng.standard_normal(other).astype(dt)],
        rtol=1e-4 if dt == "float32" else 1e-10,
    )
    assert got[1].shape == prog.out_shape(1)


def test_comparisons_casts_where_and_bool_outputs():
    dt = "float32"
    prog = FusedProgram(
        (5, 7),
        (((5, 7), dt), ((7,), dt), ((5, 7), "bool")),
        (
            ("gt", (("i", 0), ("c", 0.0)), (), "bool"),
            ("cast", (("t", 0),), (("dtype", "float32"),), dt),
            ("mul", (("i", 1), ("t", 1)), (), dt),
            ("logical_and", (("t", 0), ("i", 2)), (), "bool"),
            ("where", (("t", 3), ("t", 2), ("c", -1.5)), (), dt),
            ("cast", (("t", 4),), (("dtype", "float64"),), "float64"),
            ("isnan", (("i", 0),), (), "bool"),
        ),
        (3, 4, 5, 6),
    )
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 7)).astype(dt)
    x[0, 0] = np.nan
    _check(prog, [x, rng.standard_normal(7).astype(dt), rng.random((5, 7)) > 0.5])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nan_and_inf_propagate_like_numpy():
    dt = "float32"
    x = np.array([np.nan, -np.inf, np.inf, -1.0, 0.0, 2.0, 100.0, -100.0], np.float32)
    for op in ["relu", "exp", "tanh", "sigmoid", "abs", "neg", "sign"]:
        prog = FusedProgram(
            x.shape, ((x.shape, dt),), ((op, (("i", 0),), (), dt), ("maximum", (("t", 0), ("c", -5.0)), (), dt)), (1,)
        )
        got = codegen.native_kernel(prog)([x])
        np.testing.assert_allclose(got, evaluate(prog, [x])[0], rtol=1e-6, atol=1e-37, equal_nan=True, err_msg=op)


@pytest.mark.parametrize("exponent", [2, 0.5, 3, -1, 1, 0, 1.7])
def test_pow_by_constant(exponent):
    dt = "float64"
    x = np.linspace(0.1, 3, 17)
    prog = FusedProgram(
        x.shape,
        ((x.shape, dt),),
        (("pow", (("i", 0), ("c", exponent)), (), dt), ("add", (("t", 0), ("c", 1)), (), dt)),
        (1,),
    )
    _check(prog, [x])


def test_literals_are_the_values_numpy_uses():
    assert codegen_ops.literal(0.1, "float32") == float(np.float32(0.1)).hex() + "f"
    assert codegen_ops.literal(0.1, "float64") == (0.1).hex()
    assert codegen_ops.literal(float("-inf"), "float32") == "(-INFINITY)"
    assert codegen_ops.literal(True, "bool") == "1"


def test_loop_layout_drops_unit_dims_and_collapses():
    dt = "float32"
    prog = FusedProgram(
        (4, 8, 8, 8), (((4, 8, 8, 8), dt), ((1, 8, 1, 1), dt)), (("mul", (("i", 0), ("i", 1)), (), dt),), (0,)
    )
    dims, n_outer, strides = codegen.loop_layout(prog)
    assert dims == [4, 8, 64] and n_outer == 2
    assert strides == [[512, 64, 1], [0, 1, 0]]
    prog = FusedProgram((6, 1, 5), (((6, 1, 5), dt), ((5,), dt)), (("add", (("i", 0), ("i", 1)), (), dt),), (0,))
    dims, n_outer, strides = codegen.loop_layout(prog)
    assert dims == [6, 5] and strides == [[5, 1], [0, 1]]


def test_non_contiguous_inputs_and_out_buffers():
    dt = "float64"
    prog = FusedProgram(
        (5, 6),
        (((5, 6), dt), ((5, 6), dt)),
        (("add", (("i", 0), ("i", 1)), (), dt), ("exp", (("t", 0),), (), dt)),
        (0, 1),
    )
    k = codegen.native_kernel(prog)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((6, 5)).T  # a transposed view
    b = rng.standard_normal((5, 6))
    o0 = np.empty((5, 6))
    r0, r1 = k([a, b], out=(o0, None))
    assert r0 is o0 and r1 is not None
    np.testing.assert_allclose(r0, a + b)
    np.testing.assert_allclose(r1, np.exp(a + b))
    with pytest.raises(ValueError, match="out="):
        k([a, b], out=(np.empty((6, 5)), None))
    f_order = np.empty((5, 6), order="F")  # a strided buffer (an in-place target made by a ufunc on a
    r0, _ = k([a, b], out=(f_order, None))  # transposed input): computed, then copied into it
    assert r0 is f_order
    np.testing.assert_allclose(f_order, a + b)
    with pytest.raises(ValueError, match="expected"):
        k([np.ones((4, 6)), b])
    b_old = b.copy()
    r0, _ = k([a, b], out=(b, None))  # in place into an input read at the same index
    assert r0 is b
    np.testing.assert_allclose(r0, a + b_old)


def test_the_cache_holds_one_library_per_source(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path))
    cc = codegen.find_compiler()
    src = "int flow_test_fn(void) { return 42; }\n"
    path = codegen._compile(src, cc)
    assert os.path.isfile(path) and path.startswith(str(tmp_path))
    assert os.path.isfile(path[:-3] + ".c")

    def no_compiler(*a, **k):
        raise AssertionError("compiled again")

    monkeypatch.setattr(codegen.subprocess, "run", no_compiler)
    monkeypatch.setattr(codegen, "_ID_CACHE", {cc: codegen._ID_CACHE[cc]})
    assert codegen._compile(src, cc) == path  # found in the cache
    assert not [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".tmp_")]


def test_compile_errors_and_a_missing_compiler_raise_codegen_error(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", str(tmp_path))
    with pytest.raises(codegen.CodegenError, match="compiling fused kernels failed"):
        codegen._compile("this is not C", codegen.find_compiler())
    monkeypatch.setattr(codegen, "find_compiler", lambda: None)
    monkeypatch.setattr(codegen, "_KERNELS", {})
    prog = FusedProgram((3,), (((3,), "float32"),), (("neg", (("i", 0),), (), "float32"),), (0,))
    with pytest.raises(codegen.CodegenError, match="no C compiler"):
        codegen.build([prog])


def test_an_unwritable_cache_directory_falls_back_to_a_private_temp_one(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOW_CACHE_DIR", "/proc/flow-cannot-write-here")
    monkeypatch.setattr(codegen.tempfile, "gettempdir", lambda: str(tmp_path))
    path = codegen._compile("int flow_test_fn2(void) { return 7; }\n", codegen.find_compiler())
    assert path.startswith(str(tmp_path)) and os.path.isfile(path)
