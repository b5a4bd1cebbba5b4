"""The AMP colour table: how each op behaves under a mixed-precision policy.

Five colours (the names of NVIDIA's and OneFlow's AMP lists):

``allow``
    Runs in the low-precision dtype: its floating inputs (except float64) are cast to it
    (matmul, linear, conv2d, einsum).
``deny``
    Keeps float32: low-precision inputs are cast up (``cross_entropy``, ``nll_loss``, ``prod``,
    optimizer updates).
``promote``
    Its floating inputs must agree: they are cast to the widest floating dtype among them
    (``cat``, ``stack``, ``where``).
``infer``
    Follows its first floating input (the activation): the other floating inputs (weights,
    biases) are cast to that input's dtype, so a bfloat16 activation normalised with float32
    weights gives bfloat16, as PyTorch's mixed-dtype ``layer_norm`` does. For an op with one
    floating input it is the same as ``clear``.
``clear``
    Dtype-transparent: runs in whatever dtype arrives (elementwise ops, reductions, shape ops).
    An op without a colour is ``clear``; PyTorch's autocast treats such ops the same way.

The table is the rule table ``"amp_color"`` (declared by flow-amp's plugin). An op package
colours its ops in its own ``flow_register_rules`` hook, without importing flow-amp; a rule
registered before flow-amp loads (or when it is not installed) is queued by the registry::

    @hookimpl
    def flow_register_rules(registry):
        registry.register_rule("amp_color", "my_matmul", "allow")
        registry.register_rule("amp_color", "my_norm", {"cpu": "infer", "cuda": "deny"})

A rule is a colour name, or a dict from device type to colour (``"default"`` for the others):
the default colours follow ``torch.autocast`` for each device type, which differ between CPU
and CUDA (on CUDA softmax, layer norm, exp, log ... stay float32; on CPU they follow the input).
A rule that is neither raises :class:`~flow.errors.FlowError` naming the op when it is first
used (by autocast or the graph pass).
"""

from __future__ import annotations

from flow.errors import FlowError

TABLE = "amp_color"

ALLOW = "allow"
DENY = "deny"
PROMOTE = "promote"
INFER = "infer"
CLEAR = "clear"
COLORS = (ALLOW, DENY, PROMOTE, INFER, CLEAR)

# OneFlow's and TensorFlow's names for the same lists
_ALIASES = {"white": ALLOW, "black": DENY, "gray": INFER, "grey": INFER}

__all__ = [
    "TABLE",
    "ALLOW",
    "DENY",
    "PROMOTE",
    "INFER",
    "CLEAR",
    "COLORS",
    "core_colors",
    "color_of",
    "check_rule",
    "call_color",
]

# flow-core ops by colour, as torch.autocast colours their ATen counterparts. The backward ops the
# graph pass sees take their forward op's colour, so a traced step computes each gradient in the
# dtype eager autocast computes it in (a denied loss differentiates in float32, a convolution's
# input and weight gradients run low).
_LOW = ("matmul", "linear", "conv2d", "conv2d_backward_input", "conv2d_backward_weight", "einsum")
# torch's scaled_dot_product_attention is lower_precision_fp on CPU and CUDA: so is its fused op
_LOW += ("flash_attention", "flash_attention_backward")
_FP32 = (
    "prod",
    "binary_cross_entropy",
    "cross_entropy",
    "cross_entropy_backward",
    "nll_loss",
    "nll_loss_backward",
    "ctc_loss",
    "ctc_loss_backward",
    "max_unpool2d",
    # decompositions and solvers: LAPACK has no low-precision kernels (torch's linalg_* run in float32)
    "linalg_inv",
    "linalg_det",
    "linalg_slogdet",
    "linalg_solve",
    "linalg_cholesky",
    "linalg_qr",
    "linalg_eigh",
    "linalg_svd",
    # FFTs (torch's fft_*): pocketfft computes in float32 / float64 only
    "fft_c2c",
    "fft_r2c",
    "fft_c2r",
    # master weights: optimizer updates read float32 parameters, gradients and states
    "optimizer_update",
    "sgd_update",
    "adam_update",
    # loss scaling: the inf/nan check and the unscale read float32 gradients
    "amp_unscale",
    "amp_update_scale",
)
# composites (flow.ops.composite): flow writes these as compositions of primitive ops; torch's autocast
# colours its own single ops of these names, so they are coloured as a whole (their bodies then run
# below autocast in the dtype chosen for the call)
_COMPOSITE_LOW = ("addmm", "baddbmm", "addbmm", "prelu")
_COMPOSITE_FP32 = (
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "margin_ranking_loss",
    "soft_margin_loss",
    "hinge_embedding_loss",
    "poisson_nll_loss",
    "cosine_embedding_loss",
    "triplet_margin_loss",
    "dot",
    "mv",
    "cdist",
    "trace",
    "quantile",
    "nanquantile",
)
# upsampling keeps its input's dtype in torch; flow's interpolation matrices must not run low
_COMPOSITE_INFER = ("interpolate",)
_PROMOTE = ("cat", "stack", "where")
# flow's layer_norm kernel wants its weight in the input's dtype; casting the weight to the
# activation's dtype gives the dtype PyTorch's CPU kernel gives for mixed inputs (its input's).
_INFER = ("layer_norm", "layer_norm_backward")
# On CUDA torch.autocast also keeps these in float32 (their low-precision kernels lose too much).
_FP32_CUDA = (
    "acos",
    "asin",
    "cosh",
    "sinh",
    "tan",
    "exp",
    "expm1",
    "log",
    "log10",
    "log2",
    "log1p",
    "reciprocal",
    "rsqrt",
    "pow",
    "softplus",
    "norm",
    "sum",
    "cumsum",
    "cumprod",  # on the CPU PyTorch keeps prod in float32, but cumprod follows its input
    "layer_norm",
    "layer_norm_backward",
    "softmax",
    "softmax_backward",
    "log_softmax",
    "log_softmax_backward",
    "logsumexp",
    "embedding_bag",
)


def core_colors() -> dict[str, object]:
    """The colours of flow-core's ops (what flow-amp's plugin puts into the table)."""
    rules: dict[str, object] = {}
    for name in _LOW + _COMPOSITE_LOW:
        rules[name] = ALLOW
    for name in _FP32 + _COMPOSITE_FP32:
        rules[name] = DENY
    for name in _COMPOSITE_INFER:
        rules[name] = INFER
    for name in _PROMOTE:
        rules[name] = PROMOTE
    for name in _INFER:
        rules[name] = INFER
    for name in _FP32_CUDA:
        rules[name] = {"cuda": DENY, "default": rules.get(name, CLEAR)}
    return rules


def check_rule(op: str, rule: object) -> None:
    """Raise a clear error if ``rule`` is not a colour or a device-type -> colour dict."""
    if isinstance(rule, str):
        if rule not in COLORS and rule not in _ALIASES:
            raise FlowError(f"amp_color rule of op '{op}': unknown colour {rule!r}; expected one of {COLORS}")
        return
    if isinstance(rule, dict):
        for dev, c in rule.items():
            if not isinstance(dev, str):
                raise FlowError(f"amp_color rule of op '{op}': device types must be strings, got {dev!r}")
            check_rule(op, c)
            if isinstance(c, dict):
                raise FlowError(f"amp_color rule of op '{op}': nested dicts are not rules")
        return
    raise FlowError(
        f"amp_color rule of op '{op}': expected a colour name or a dict device type -> colour, "
        f"got {type(rule).__name__}"
    )


def color_of(rule: object, device_type: str) -> str:
    """The colour a table entry gives ops on ``device_type`` (``clear`` when it says nothing)."""
    if rule is None:
        return CLEAR
    if isinstance(rule, dict):
        rule = rule.get(device_type, rule.get("default", CLEAR))
    return _ALIASES.get(rule, rule)


# -- colours that depend on the call ---------------------------------------------------------------
def _einsum_color(inputs: tuple, attrs: dict) -> str:
    """``allow`` for an einsum that contracts (sums an index two operands share), else ``clear``.

    PyTorch's einsum is not one op to its autocast: only the batched matrix products it
    decomposes into run low, so a transpose, trace or diagonal (one operand) or an outer or
    elementwise product (nothing summed across operands) keeps its input's dtype.
    ``flow.einsum`` hands the op the explicit equation (letters only, with ``->``).
    """
    lhs, _, out = str(attrs.get("equation", "")).partition("->")
    terms = lhs.split(",")
    if len(terms) < 2:
        return CLEAR
    for c in set(lhs) - set(out) - {","}:
        if sum(c in t for t in terms) >= 2:
            return ALLOW
    return CLEAR


# op name -> fn(inputs, attrs) -> colour, consulted (by eager autocast) only when the table says
# ``allow``: it narrows an op that is a matrix product for some calls and not for others.
_BY_CALL = {"einsum": _einsum_color}


def call_color(name: str, color: str, inputs: tuple, attrs: dict) -> str:
    """The colour of one call of op ``name`` whose table colour is ``color``."""
    if color == ALLOW:
        fn = _BY_CALL.get(name)
        if fn is not None:
            return fn(inputs, attrs)
    return color
