"""The AMP colour table: how each op behaves under a mixed-precision policy.

Four colours (the names of NVIDIA's and OneFlow's AMP lists):

``allow``
    Runs in the low-precision dtype: its floating inputs (except float64) are cast to it
    (matmul, linear, conv2d, einsum).
``deny``
    Keeps float32: low-precision inputs are cast up (losses, ``prod``, optimizer updates).
``promote``
    Its floating inputs must agree: they are cast to the widest floating dtype among them
    (``cat``, ``stack``).
``clear``
    Dtype-transparent: runs in whatever dtype arrives (elementwise ops, reductions, shape ops).
    An op without a colour is ``clear``; PyTorch's autocast treats such ops the same way.

The table is the rule table ``"amp_color"`` (declared by flow-amp's plugin). An op package
colours its ops in its own ``flow_register_rules`` hook, without importing flow-amp; a rule
registered before flow-amp loads (or when it is not installed) is queued by the registry::

    @hookimpl
    def flow_register_rules(registry):
        registry.register_rule("amp_color", "my_matmul", "allow")
        registry.register_rule("amp_color", "my_norm", {"cpu": "clear", "cuda": "deny"})

A rule is a colour name, or a dict from device type to colour (``"default"`` for the others):
the default colours follow ``torch.autocast`` for each device type, which differ between CPU
and CUDA (on CUDA softmax, layer norm, exp, log ... stay float32; on CPU they follow the input).
"""

from __future__ import annotations

from flow.errors import FlowError

TABLE = "amp_color"

ALLOW = "allow"
DENY = "deny"
PROMOTE = "promote"
CLEAR = "clear"
COLORS = (ALLOW, DENY, PROMOTE, CLEAR)

# "infer" is accepted as another spelling of clear: an op that follows its inputs' dtype.
_ALIASES = {"infer": CLEAR, "white": ALLOW, "black": DENY, "gray": CLEAR, "grey": CLEAR}

__all__ = ["TABLE", "ALLOW", "DENY", "PROMOTE", "CLEAR", "COLORS", "core_colors", "color_of", "check_rule"]

# flow-core ops by colour, as torch.autocast colours their ATen counterparts. The backward ops the
# graph pass sees take their forward op's colour, so a traced step computes each gradient in the
# dtype eager autocast computes it in (a denied loss differentiates in float32, a convolution's
# input and weight gradients run low).
_LOW = ("matmul", "linear", "conv2d", "conv2d_backward_input", "conv2d_backward_weight", "einsum")
_FP32 = (
    "prod",
    "cumprod",
    "binary_cross_entropy",
    "cross_entropy",
    "cross_entropy_backward",
    "nll_loss",
    "nll_loss_backward",
    "ctc_loss",
    "ctc_loss_backward",
    "max_unpool2d",
    # master weights: optimizer updates read float32 parameters, gradients and states
    "optimizer_update",
    "sgd_update",
    "adam_update",
    # loss scaling: the inf/nan check and the unscale read float32 gradients
    "amp_unscale",
    "amp_update_scale",
)
# layer_norm: flow's kernel wants the weight in the input's dtype; promoting runs a normalisation of
# a low-precision activation with float32 weights in float32 (as autocast on CUDA does anyway).
_PROMOTE = ("cat", "stack", "where", "layer_norm", "layer_norm_backward")
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
    for name in _LOW:
        rules[name] = ALLOW
    for name in _FP32:
        rules[name] = DENY
    for name in _PROMOTE:
        rules[name] = PROMOTE
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
