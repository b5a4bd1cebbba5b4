"""Tensor operators and elementwise-math methods, including in-place variants."""

from __future__ import annotations

import flow.ops.arith as _A
import flow.ops.clamp_where as _CW
import flow.ops.compare as _C
import flow.ops.unary as _U
from flow._dispatch import binary
from flow.ops.inplace import apply_inplace, inplace_call

_ADD, _SUB, _MUL, _DIV, _POW = _A.ADD, _A.SUB, _A.MUL, _A.DIV, _A.POW


class ElementwiseMethods:
    __slots__ = ()

    # -- operators (hot path: straight to the binary caller) -------------------
    def __add__(self, other):
        return binary(_ADD, self, other)

    def __radd__(self, other):
        return binary(_ADD, other, self)

    def __sub__(self, other):
        return binary(_SUB, self, other)

    def __rsub__(self, other):
        return binary(_SUB, other, self)

    def __mul__(self, other):
        return binary(_MUL, self, other)

    def __rmul__(self, other):
        return binary(_MUL, other, self)

    def __truediv__(self, other):
        return binary(_DIV, self, other, True)

    def __rtruediv__(self, other):
        return binary(_DIV, other, self, True)

    def __floordiv__(self, other):
        return _A.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return _A.floor_divide(other, self)

    def __mod__(self, other):
        return _A.remainder(self, other)

    def __rmod__(self, other):
        return _A.remainder(other, self)

    def __pow__(self, other):
        return binary(_POW, self, other)

    def __rpow__(self, other):
        return binary(_POW, other, self)

    def __neg__(self):
        return _U.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _U.abs(self)

    def __invert__(self):
        return _C.logical_not(self) if self.dtype.name == "bool" else _C.bitwise_not(self)

    def __and__(self, other):
        return _C.bitwise_and(self, other)

    def __rand__(self, other):
        return _C.bitwise_and(other, self)

    def __or__(self, other):
        return _C.bitwise_or(self, other)

    def __ror__(self, other):
        return _C.bitwise_or(other, self)

    def __xor__(self, other):
        return _C.bitwise_xor(self, other)

    def __rxor__(self, other):
        return _C.bitwise_xor(other, self)

    def __eq__(self, other):
        return _C.eq(self, other)

    def __ne__(self, other):
        return _C.ne(self, other)

    def __lt__(self, other):
        return _C.lt(self, other)

    def __le__(self, other):
        return _C.le(self, other)

    def __gt__(self, other):
        return _C.gt(self, other)

    def __ge__(self, other):
        return _C.ge(self, other)

    # -- in-place operators ----------------------------------------------------
    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def __ipow__(self, other):
        return self.pow_(other)

    def __iand__(self, other):
        return apply_inplace(self, _C.bitwise_and(self, other), "bitwise_and_")

    def __ior__(self, other):
        return apply_inplace(self, _C.bitwise_or(self, other), "bitwise_or_")

    def __ixor__(self, other):
        return apply_inplace(self, _C.bitwise_xor(self, other), "bitwise_xor_")

    # -- named binary methods ----------------------------------------------------
    def add(self, other, *, alpha=1):
        return _A.add(self, other, alpha=alpha)

    def add_(self, other, *, alpha=1):
        return apply_inplace(self, _A.add(self, other, alpha=alpha), "add_")

    def sub(self, other, *, alpha=1):
        return _A.sub(self, other, alpha=alpha)

    def sub_(self, other, *, alpha=1):
        return apply_inplace(self, _A.sub(self, other, alpha=alpha), "sub_")

    subtract = sub

    def mul(self, other):
        return _A.mul(self, other)

    def mul_(self, other):
        return apply_inplace(self, _A.mul(self, other), "mul_")

    multiply = mul

    def div(self, other, *, rounding_mode=None):
        return _A.div(self, other, rounding_mode=rounding_mode)

    def div_(self, other, *, rounding_mode=None):
        return apply_inplace(self, _A.div(self, other, rounding_mode=rounding_mode), "div_")

    divide = div
    true_divide = div

    def pow(self, exponent):
        return _A.pow(self, exponent)

    def pow_(self, exponent):
        return apply_inplace(self, _A.pow(self, exponent), "pow_")

    def floor_divide(self, other):
        return _A.floor_divide(self, other)

    def remainder(self, other):
        return _A.remainder(self, other)

    def fmod(self, other):
        return _A.fmod(self, other)

    def maximum(self, other):
        return _A.maximum(self, other)

    def minimum(self, other):
        return _A.minimum(self, other)

    def atan2(self, other):
        return _A.atan2(self, other)

    def eq(self, other):
        return _C.eq(self, other)

    def ne(self, other):
        return _C.ne(self, other)

    def lt(self, other):
        return _C.lt(self, other)

    def le(self, other):
        return _C.le(self, other)

    def gt(self, other):
        return _C.gt(self, other)

    def ge(self, other):
        return _C.ge(self, other)

    def equal(self, other) -> bool:
        return _C.equal(self, other)

    def allclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
        return _C.allclose(self, other, rtol, atol, equal_nan)

    def isclose(self, other, rtol=1e-05, atol=1e-08, equal_nan=False):
        return _C.isclose(self, other, rtol, atol, equal_nan)

    def logical_and(self, other):
        return _C.logical_and(self, other)

    def logical_or(self, other):
        return _C.logical_or(self, other)

    def logical_xor(self, other):
        return _C.logical_xor(self, other)

    def logical_not(self):
        return _C.logical_not(self)

    def bitwise_and(self, other):
        return _C.bitwise_and(self, other)

    def bitwise_or(self, other):
        return _C.bitwise_or(self, other)

    def bitwise_xor(self, other):
        return _C.bitwise_xor(self, other)

    def bitwise_not(self):
        return _C.bitwise_not(self)

    def isnan(self):
        return _C.isnan(self)

    def isinf(self):
        return _C.isinf(self)

    def isfinite(self):
        return _C.isfinite(self)

    # -- unary math ------------------------------------------------------------------
    def exp(self):
        return _U.exp(self)

    def expm1(self):
        return _U.expm1(self)

    def log(self):
        return _U.log(self)

    def log2(self):
        return _U.log2(self)

    def log10(self):
        return _U.log10(self)

    def log1p(self):
        return _U.log1p(self)

    def sqrt(self):
        return _U.sqrt(self)

    def rsqrt(self):
        return _U.rsqrt(self)

    def abs(self):
        return _U.abs(self)

    def neg(self):
        return _U.neg(self)

    negative = neg

    def sign(self):
        return _U.sign(self)

    def sin(self):
        return _U.sin(self)

    def cos(self):
        return _U.cos(self)

    def tan(self):
        return _U.tan(self)

    def asin(self):
        return _U.asin(self)

    def acos(self):
        return _U.acos(self)

    def atan(self):
        return _U.atan(self)

    def sinh(self):
        return _U.sinh(self)

    def cosh(self):
        return _U.cosh(self)

    def tanh(self):
        return _U.tanh(self)

    def sigmoid(self):
        return _U.sigmoid(self)

    def relu(self):
        return _U.relu(self)

    def erf(self):
        return _U.erf(self)

    def reciprocal(self):
        return _U.reciprocal(self)

    def square(self):
        return _U.square(self)

    def floor(self):
        return _U.floor(self)

    def ceil(self):
        return _U.ceil(self)

    def round(self, *, decimals: int = 0):
        return _U.round(self, decimals=decimals)

    def trunc(self):
        return _U.trunc(self)

    def clamp(self, min=None, max=None):
        return _CW.clamp(self, min, max)

    clip = clamp

    def clamp_min(self, min):
        return _CW.clamp(self, min=min)

    def clamp_max(self, max):
        return _CW.clamp(self, max=max)

    def where(self, condition, other):
        return _CW.where(condition, self, other)

    def lerp(self, end, weight):
        return _CW.lerp(self, end, weight)

    def logit(self, eps=None):
        return _CW.logit(self, eps)

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        return _CW.nan_to_num(self, nan, posinf, neginf)

    # -- in-place unary ----------------------------------------------------------------
    def exp_(self):
        return apply_inplace(self, _U.exp(self), "exp_")

    def log_(self):
        return apply_inplace(self, _U.log(self), "log_")

    def sqrt_(self):
        return apply_inplace(self, _U.sqrt(self), "sqrt_")

    def abs_(self):
        return apply_inplace(self, _U.abs(self), "abs_")

    def neg_(self):
        return apply_inplace(self, _U.neg(self), "neg_")

    def sigmoid_(self):
        return apply_inplace(self, _U.sigmoid(self), "sigmoid_")

    def tanh_(self):
        return apply_inplace(self, _U.tanh(self), "tanh_")

    def relu_(self):
        return apply_inplace(self, _U.relu(self), "relu_")

    def clamp_(self, min=None, max=None):
        return apply_inplace(self, _CW.clamp(self, min, max), "clamp_")

    clip_ = clamp_

    def clamp_min_(self, min):
        return apply_inplace(self, _CW.clamp(self, min=min), "clamp_min_")

    def floor_(self):
        return apply_inplace(self, _U.floor(self), "floor_")

    def round_(self):
        return apply_inplace(self, _U.round(self), "round_")

    def reciprocal_(self):
        return apply_inplace(self, _U.reciprocal(self), "reciprocal_")

    def lerp_(self, end, weight):
        return apply_inplace(self, _CW.lerp(self, end, weight), "lerp_")

    def addcmul_(self, tensor1, tensor2, *, value=1):
        return inplace_call(self, "addcmul_", lambda x, a, b: x + a * b * value, tensor1, tensor2)

    def addcdiv_(self, tensor1, tensor2, *, value=1):
        return inplace_call(self, "addcdiv_", lambda x, a, b: x + a / b * value, tensor1, tensor2)

    def addcmul(self, tensor1, tensor2, *, value=1):
        return self + tensor1 * tensor2 * value

    def addcdiv(self, tensor1, tensor2, *, value=1):
        return self + tensor1 / tensor2 * value

    def zero_(self):
        """Fill with zeros in place."""
        return self.fill_(0)

    def fill_(self, value):
        """Fill with ``value`` in place."""
        from flow.ops.inplace import check_inplace_allowed

        check_inplace_allowed(self, "fill_")
        if hasattr(value, "item"):
            value = value.item()
        try:
            self._data[...] = value
        except (ValueError, TypeError, OverflowError) as e:
            from flow.errors import OpError

            raise OpError(
                "fill_", f"cannot fill a {self.dtype} tensor on '{self.device}' with {value!r}: {e}"
            ) from None
        self._version[0] += 1
        from flow.autograd.grad_mode import STATE

        if STATE.grad_enabled:  # still part of the graph, as in PyTorch, with a zero gradient
            from flow.ops.inplace import after_constant_write

            after_constant_write(self, "fill_")
        elif self.grad_fn is not None:
            self.grad_fn = None
            self._requires_grad = False
        return self
