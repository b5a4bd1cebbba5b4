"""C expressions of the elementwise ops the CPU fusion code generator supports (see ``codegen.py``).

:func:`expression` renders one instruction: operands are ``(C name, dtype name)`` pairs or
``("c", number)`` constants; the result has the instruction's dtype (``float32`` -> ``float``,
``float64`` -> ``double``, ``bool`` -> ``unsigned char`` holding 0/1, as NumPy stores bools).
``bfloat16`` and ``float16`` are stored as 16-bit patterns (``uint16_t``) and computed in ``float``:
loads widen exactly, and every instruction's result is rounded to its dtype (round to nearest
even, as NumPy's ``astype``) before the next one reads it, so a fused low-precision program gives
the bits of the unfused ops, which run their float32 kernels between the same roundings
(:mod:`flow.backends.cpu.lowp`); only reductions keep their ``double`` accumulator unrounded.
Arithmetic converts operands to the result dtype; comparisons compare in the promoted dtype of
their tensor operands. Semantics follow flow's NumPy kernels: ``maximum``/``minimum``/``relu``/
``clamp`` propagate NaN, ``sigmoid`` is the stable two-branch form, ``pow`` by 2/1/0.5/-1/0 is
exact like NumPy's fast paths.
"""

from __future__ import annotations

import math

import numpy as np

REDUCTIONS = frozenset({"sum", "mean"})

_CTYPE = {"float32": "float", "float64": "double", "bool": "unsigned char", "bfloat16": "float", "float16": "float"}
# dtypes stored in 16 bits and computed in float: (load, store, round) helpers of the PRELUDE
LOWP = {
    "bfloat16": ("flow_bf16_load", "flow_bf16_store", "flow_bf16_round"),
    "float16": ("flow_f16_load", "flow_f16_store", "flow_f16_round"),
}
_FLOAT_COMPUTE = ("float32", "bfloat16", "float16")

# op -> libm function name (float variants get an 'f' suffix)
_UNARY_FN = {
    "exp": "exp",
    "log": "log",
    "tanh": "tanh",
    "sqrt": "sqrt",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "asin": "asin",
    "acos": "acos",
    "atan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "erf": "erf",
    "expm1": "expm1",
    "log1p": "log1p",
    "log2": "log2",
    "log10": "log10",
    "floor": "floor",
    "ceil": "ceil",
    "trunc": "trunc",
    "abs": "fabs",
    "round": "rint",
    "sigmoid": "flow_sigmoid",
    "silu": "flow_silu",
}
_FAST_F32 = {"exp": "flow_expf", "tanh": "flow_tanhf"}
_BINARY_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!="}
_FLOAT_ONLY = (
    set(_UNARY_FN)
    | {
        "neg",
        "square",
        "reciprocal",
        "rsqrt",
        "relu",
        "gelu",
        "gelu_backward",
        "silu_backward",
        "softplus",
        "pow",
        "maximum",
        "minimum",
        "clamp",
        "sign",
    }
    | set(_BINARY_ARITH)
)

SUPPORTED = frozenset(
    _FLOAT_ONLY
    | set(_COMPARE)
    | {"where", "cast", "isnan", "isinf", "isfinite", "logical_and", "logical_or", "logical_xor", "logical_not"}
)
DTYPES = frozenset(_CTYPE)


def ctype(dt: str) -> str:
    """The C type a value of ``dt`` is computed in."""
    return _CTYPE[dt]


def storage_ctype(dt: str) -> str:
    """The C type an array of ``dt`` holds."""
    return "uint16_t" if dt in LOWP else _CTYPE[dt]


def load(dt: str, expr: str) -> str:
    """``expr`` (an element of an array of ``dt``) as its compute type."""
    return f"{LOWP[dt][0]}({expr})" if dt in LOWP else expr


def store(dt: str, expr: str) -> str:
    """A compute-type value as an element of an array of ``dt`` (rounded for 16-bit floats)."""
    return f"{LOWP[dt][1]}({expr})" if dt in LOWP else expr


def rounded(dt: str, expr: str) -> str:
    """An instruction's result rounded to its dtype (a no-op but for 16-bit floats)."""
    return f"{LOWP[dt][2]}({expr})" if dt in LOWP else expr


def _fn(name: str, dt: str) -> str:
    return name + "f" if dt in _FLOAT_COMPUTE else name


def literal(value, dt: str) -> str:
    """A C literal of ``value`` converted to ``dt`` exactly as NumPy converts it."""
    if dt == "bool":
        return "1" if value else "0"
    # a Python number meets a 16-bit float operand in float32 (the unfused ops' float32 kernels)
    f32 = dt in _FLOAT_COMPUTE
    v = float(np.float32(value)) if f32 else float(value)
    if math.isnan(v):
        return "NAN"
    if math.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    s = v.hex()
    return f"{s}f" if f32 else s


def _conv(x, dt: str) -> str:
    if x[0] == "c":
        return literal(x[1], dt)
    name, xdt = x
    if xdt == dt:
        return name
    if dt == "bool":
        return f"({name} != 0)"
    if dt in LOWP:  # to a 16-bit float from a wider (or the other 16-bit) dtype: round
        return rounded(dt, f"(float){name}")
    return f"({ctype(dt)}){name}"


def _promote(operands) -> str:
    dts = {x[1] for x in operands if x[0] != "c"}
    for dt in ("float64", "float32"):
        if dt in dts:
            return dt
    low = dts & set(LOWP)
    if low:
        return low.pop() if len(low) == 1 else "float32"
    if "bool" in dts:
        return "bool"
    return "float32"


def _max(a: str, b: str) -> str:  # NumPy's maximum: NaN wins
    return f"(({a} >= {b} || {a} != {a}) ? {a} : {b})"


def _min(a: str, b: str) -> str:
    return f"(({a} <= {b} || {a} != {a}) ? {a} : {b})"


def expression(op: str, operands: list, attrs: dict, dt: str) -> str:
    """The C expression of one instruction (see the module docstring)."""
    if op in _BINARY_ARITH:
        a, b = (_conv(x, dt) for x in operands)
        return f"({a} {_BINARY_ARITH[op]} {b})"
    if op in _COMPARE:
        cdt = _promote(operands)
        a, b = (_conv(x, cdt) for x in operands)
        return f"({a} {_COMPARE[op]} {b})"
    if op == "where":
        c = _conv(operands[0], "bool")
        a, b = (_conv(x, dt) for x in operands[1:])
        return f"({c} ? {a} : {b})"
    if op == "cast":
        return _conv(operands[0], dt)
    if op in ("logical_and", "logical_or", "logical_xor"):
        a, b = (_conv(x, "bool") for x in operands)
        sym = {"logical_and": "&&", "logical_or": "||", "logical_xor": "!="}[op]
        return f"({a} {sym} {b})"
    if op == "logical_not":
        return f"(!{_conv(operands[0], 'bool')})"
    if op in ("isnan", "isinf", "isfinite"):
        cdt = _promote(operands)
        a = _conv(operands[0], cdt)
        if cdt == "bool":
            return "0" if op != "isfinite" else "1"
        return f"({a} != {a})" if op == "isnan" else f"({op}({a}) != 0)"
    a = _conv(operands[0], dt)
    if op in _UNARY_FN:
        if dt in _FLOAT_COMPUTE and op in _FAST_F32:
            return f"{_FAST_F32[op]}({a})"
        return f"{_fn(_UNARY_FN[op], dt)}({a})"
    one = literal(1, dt)
    if op == "neg":
        return f"(-{a})"
    if op == "square":
        return f"({a} * {a})"
    if op == "reciprocal":
        return f"({one} / {a})"
    if op == "rsqrt":
        return f"({one} / {_fn('sqrt', dt)}({a}))"
    if op == "relu":
        return _max(a, literal(0, dt))
    if op == "sign":
        return f"({a} > 0 ? {one} : ({a} < 0 ? -{one} : {a}))"
    if op in ("maximum", "minimum"):
        b = _conv(operands[1], dt)
        return _max(a, b) if op == "maximum" else _min(a, b)
    if op == "clamp":
        lo, hi = attrs.get("min"), attrs.get("max")
        if lo is not None and hi is not None and lo > hi:
            return literal(hi, dt)
        e = a
        if lo is not None:
            e = _max(e, literal(lo, dt))
        if hi is not None:
            e = _min(e, literal(hi, dt))
        return e
    if op == "pow":
        b = operands[1]
        if b[0] == "c":
            v = float(b[1])
            if v == 2:
                return f"({a} * {a})"
            if v == 1:
                return a
            if v == 0:
                return one
            if v == 0.5:
                return f"{_fn('sqrt', dt)}({a})"
            if v == -1:
                return f"({one} / {a})"
        return f"{_fn('pow', dt)}({a}, {_conv(b, dt)})"
    if op == "gelu":
        return f"{_fn('flow_gelu_' + attrs.get('approximate', 'none'), dt)}({a})"
    if op == "gelu_backward":
        x = _conv(operands[1], dt)
        return f"{_fn('flow_gelu_bwd_' + attrs.get('approximate', 'none'), dt)}({a}, {x})"
    if op == "silu_backward":
        return f"{_fn('flow_silu_bwd', dt)}({a}, {_conv(operands[1], dt)})"
    if op == "softplus":
        beta, th = attrs.get("beta", 1.0), attrs.get("threshold", 20.0)
        return f"{_fn('flow_softplus', dt)}({a}, {literal(beta, dt)}, {literal(th, dt)})"
    raise KeyError(f"fused codegen: no C expression for op '{op}'")


def attrs_supported(op: str, attrs: dict) -> bool:
    if op in ("gelu", "gelu_backward"):
        return attrs.get("approximate", "none") in ("none", "tanh")
    if op == "cast":
        return attrs.get("dtype") in _CTYPE
    if op == "clamp":
        return all(v is None or isinstance(v, (int, float, np.number)) for v in (attrs.get("min"), attrs.get("max")))
    if op == "softplus":
        return all(isinstance(attrs.get(k, 1.0), (int, float)) for k in ("beta", "threshold"))
    return True


# Helpers for both precisions. float exp/tanh: the branch-free versions of flow's native kernels
# (csrc/common.h), ~2 ulp, so loops using them vectorise; double: libm.
PRELUDE = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>

static inline float flow_bits_f(int32_t i) { float f; memcpy(&f, &i, sizeof f); return f; }
static inline int32_t flow_f_bits(float f) { int32_t i; memcpy(&i, &f, sizeof i); return i; }

/* bfloat16 / float16 <-> float, round to nearest even, NaN kept NaN (as csrc/lowp.cpp) */
static inline float flow_bf16_load(uint16_t h) { return flow_bits_f((int32_t)((uint32_t)h << 16)); }
static inline uint16_t flow_bf16_store(float f) {
  uint32_t u = (uint32_t)flow_f_bits(f);
  const uint32_t nan = (u & 0x7fffffffu) > 0x7f800000u;
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)(nan ? ((u >> 16) | 0x40u) : r);
}
static inline float flow_bf16_round(float f) { return flow_bf16_load(flow_bf16_store(f)); }
static inline float flow_f16_load(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
  const uint32_t e = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (e == shifted_exp) {
    o += (128u - 16u) << 23; /* inf / nan */
  } else if (e == 0) {       /* zero / subnormal: renormalise through float arithmetic */
    o += 1u << 23;
    o = (uint32_t)flow_f_bits(flow_bits_f((int32_t)o) - flow_bits_f((int32_t)(113u << 23)));
  }
  o |= ((uint32_t)h & 0x8000u) << 16;
  return flow_bits_f((int32_t)o);
}
static inline uint16_t flow_f16_store(float f) {
  const uint32_t f32infty = 255u << 23, f16max = (127u + 16u) << 23;
  const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t u = (uint32_t)flow_f_bits(f);
  const uint32_t sign = u & 0x80000000u;
  uint16_t o;
  u ^= sign;
  if (u >= f16max) {
    o = (uint16_t)(u > f32infty ? 0x7e00u : 0x7c00u); /* nan, or overflow to inf */
  } else if (u < (113u << 23)) { /* a float16 subnormal (or zero): rounded by float addition */
    const float s = flow_bits_f((int32_t)u) + flow_bits_f((int32_t)denorm_magic);
    o = (uint16_t)((uint32_t)flow_f_bits(s) - denorm_magic);
  } else {
    const uint32_t odd = (u >> 13) & 1u;
    u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
    o = (uint16_t)(u >> 13);
  }
  return (uint16_t)(o | (sign >> 16));
}
static inline float flow_f16_round(float f) { return flow_f16_load(flow_f16_store(f)); }

static inline float flow_expf(float x) {
  const float hi = 88.3762626647949f, lo = -87.3365447505531f, rnd = 12582912.0f;
  const int is_nan = !(x == x);
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  xc = is_nan ? 0.0f : xc;
  const float t = xc * 1.44269504088896341f + rnd;
  const int32_t n = flow_f_bits(t) - flow_f_bits(rnd);
  const float nf = t - rnd;
  float r = xc - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  float y = p * flow_bits_f((n + 127) << 23);
  y = x > hi ? INFINITY : y;
  y = x < lo ? 0.0f : y;
  return is_nan ? x : y;
}

static inline float flow_tanhf(float u) {
  const float a = fabsf(u);
  const float e = flow_expf(-2.0f * a);
  const float big = (1.0f - e) / (1.0f + e);
  const float a2 = a * a;
  const float small = a + a * a2 * (-0.333333333333f + a2 * (0.133333333333f + a2 * -0.053968253968f));
  const float t = a < 0.125f ? small : big;
  return u < 0.0f ? -t : t;
}

static inline float flow_sigmoidf(float x) {
  const float e = flow_expf(-fabsf(x));
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
static inline double flow_sigmoid(double x) {
  const double e = exp(-fabs(x));
  return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}
static inline float flow_siluf(float x) { return x * (1.0f / (1.0f + flow_expf(-x))); }
static inline double flow_silu(double x) { return x * (1.0 / (1.0 + exp(-x))); }
static inline float flow_silu_bwdf(float g, float x) {
  const float s = 1.0f / (1.0f + flow_expf(-x));
  return g * s * (1.0f + x * (1.0f - s));
}
static inline double flow_silu_bwd(double g, double x) {
  const double s = 1.0 / (1.0 + exp(-x));
  return g * s * (1.0 + x * (1.0 - s));
}
static inline float flow_gelu_nonef(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f)); }
static inline double flow_gelu_none(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440)); }
static inline float flow_gelu_tanhf(float x) {
  const float inner = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + flow_tanhf(inner));
}
static inline double flow_gelu_tanh(double x) {
  const double inner = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(inner));
}
static inline float flow_gelu_bwd_nonef(float g, float x) {
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752440f));
  const float pdf = flow_expf(-0.5f * x * x) * 0.39894228040143267794f;
  return g * (cdf + x * pdf);
}
static inline double flow_gelu_bwd_none(double g, double x) {
  const double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
  const double pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
  return g * (cdf + x * pdf);
}
#define FLOW_GELU_BWD_TANH(T, S, TANH) \
  const T x2 = x * x; \
  const T inner = (T)0.79788456080286535588 * (x + (T)0.044715 * x2 * x); \
  const T t = TANH(inner); \
  const T right = (T)1 + t; \
  return g * ((T)0.5 * right + (T)0.5 * x * ((T)1 - t * t) * \
              ((T)0.79788456080286535588 * ((T)1 + (T)3 * (T)0.044715 * x2)));
static inline float flow_gelu_bwd_tanhf(float g, float x) { FLOW_GELU_BWD_TANH(float, f, flow_tanhf) }
static inline double flow_gelu_bwd_tanh(double g, double x) { FLOW_GELU_BWD_TANH(double, , tanh) }
static inline float flow_softplusf(float x, float beta, float th) {
  const float bx = beta * x;
  if (bx > th) return x;
  return ((bx > 0.0f ? bx : 0.0f) + log1pf(expf(-fabsf(bx)))) / beta;
}
static inline double flow_softplus(double x, double beta, double th) {
  const double bx = beta * x;
  if (bx > th) return x;
  return ((bx > 0.0 ? bx : 0.0) + log1p(exp(-fabs(bx)))) / beta;
}
"""
