"""Tensor parallelism: lay a model's weights out over a placement axis from a plan.

``tensor_parallel(model, placement, plan)`` sets, in place, the SBP of every parameter and buffer:
the modules a plan pattern matches (``fnmatch`` on the names of ``model.named_modules()``) get
their style's layout on the tensor-parallel axis, everything else is broadcast. The ops then run
on the pieces through the SBP rule table, and the handler inserts the collectives where a layout
has to change (a row-parallel output's partial sums are all-reduced where a non-linear op or a
broadcast tensor meets them), so the model code is unchanged. The logical values stay those of
one process: a checkpoint of a tensor-parallel model loads into a single-process one and back.

Styles (strings, or the classes, as ``torch.distributed.tensor.parallel.parallelize_module``'s):

==============  ===================  ===============================  =============================
style           module               weight / bias on the TP axis     output
==============  ===================  ===============================  =============================
``"colwise"``   Linear               ``S(0)`` / ``S(0)``              split on the last dim
``"colwise"``   Embedding            ``S(1)``                         split on the last dim
``"rowwise"``   Linear               ``S(1)`` / ``B``                 partial sums
``"vocab"``     Embedding, Linear    ``S(0)``                         partial sums / logits split
``"replicate"`` any                  ``B``                            as the inputs
==============  ===================  ===============================  =============================

On an N-d placement the plan's layouts go on ``tp_axis`` and every other axis holds the weights
broadcast, so splitting the data on those axes (``sbp=(S(0), B)``) is data parallel x tensor
parallel.
"""

from __future__ import annotations

import fnmatch
from typing import Mapping

from flow import nn
from flow_dist.errors import GlobalTensorError
from flow_dist.placement import Placement
from flow_dist.sbp import broadcast, split

__all__ = [
    "TensorParallelError",
    "ParallelStyle",
    "ColwiseParallel",
    "RowwiseParallel",
    "VocabParallel",
    "Replicate",
    "tensor_parallel",
    "gpt_plan",
    "STYLES",
]


class TensorParallelError(GlobalTensorError):
    """A tensor-parallel plan that does not fit the model or the placement."""


class ParallelStyle:
    """How one module's tensors are laid out on the tensor-parallel axis. A subclass names the
    module types it fits and gives ``layouts(module, n) -> {tensor name: sbp}`` (``n``: the size of
    the axis); tensors it leaves out are broadcast."""

    name = ""
    fits: tuple = ()

    def check(self, path: str, module: nn.Module) -> None:
        if self.fits and not isinstance(module, self.fits):
            kinds = " or ".join(t.__name__ for t in self.fits)
            raise TensorParallelError(
                f"tensor_parallel: style {self.name!r} fits {kinds} modules, but {path!r} is a {type(module).__name__}"
            )

    def layouts(self, path: str, module: nn.Module, n: int) -> dict:
        raise NotImplementedError

    def pins(self, module: nn.Module) -> tuple:
        """``(input layout, output layout)`` on the TP axis for ``module``."""
        return self.input_layout, self.output_layout

    # The layouts on the TP axis the module's input is converted to and its output left in (None:
    # as they come). Left to the handler alone, each op picks its cheapest signature greedily, and
    # a row-parallel output's partial sums meeting a layer norm are reduce-scattered onto the batch
    # (half an all-reduce), after which every weight has to be all-gathered: pinning the residual
    # stream broadcast gives Megatron's two all-reduces per block each way.
    input_layout = None
    output_layout = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _divisible(path: str, what: str, length: int, n: int, style: str) -> None:
    # uneven pieces would work for the ops, but a split that does not divide is almost always a
    # plan or config mistake (heads or vocabulary not a multiple of the TP size): say so early
    if length % n:
        raise TensorParallelError(
            f"tensor_parallel: {path!r} ({style}) splits {what} of {length} over {n} ranks, which does not divide"
        )


class ColwiseParallel(ParallelStyle):
    """Column parallel: the output features split (Linear ``weight`` and ``bias`` ``S(0)``; an
    Embedding's embedding dim ``S(1)``). Its output is split on the last dim."""

    name = "colwise"
    fits = (nn.Linear, nn.Embedding)
    input_layout = broadcast

    def layouts(self, path: str, module: nn.Module, n: int) -> dict:
        if isinstance(module, nn.Embedding):
            _divisible(path, "embedding_dim", module.embedding_dim, n, self.name)
            return {"weight": split(1)}
        _divisible(path, "out_features", module.out_features, n, self.name)
        return {"weight": split(0), "bias": split(0)}


class RowwiseParallel(ParallelStyle):
    """Row parallel: the input features split (``weight`` ``S(1)``, ``bias`` broadcast, added once);
    it takes an input split on its last dim (a column-parallel output) and gives partial sums,
    which are reduced where the next op needs the whole value."""

    name = "rowwise"
    fits = (nn.Linear,)
    output_layout = broadcast  # the all-reduce of the partial sums, where Megatron has it

    def layouts(self, path: str, module: nn.Module, n: int) -> dict:
        _divisible(path, "in_features", module.in_features, n, self.name)
        return {"weight": split(1), "bias": broadcast}


class VocabParallel(ParallelStyle):
    """Vocabulary parallel: the rows of the table split (``weight`` ``S(0)``). An Embedding gives
    partial sums (each rank looks up the ids in its rows); a Linear output layer (tied to it)
    gives the logits split over the vocabulary."""

    name = "vocab"
    fits = (nn.Embedding, nn.Linear)

    def pins(self, module: nn.Module) -> tuple:
        # an embedding's partial sums are all-reduced; an output layer takes the whole hidden
        # state and leaves its logits split over the vocabulary (for a vocabulary-parallel loss)
        return (None, broadcast) if isinstance(module, nn.Embedding) else (broadcast, None)

    def layouts(self, path: str, module: nn.Module, n: int) -> dict:
        rows = module.num_embeddings if isinstance(module, nn.Embedding) else module.out_features
        _divisible(path, "the vocabulary", rows, n, self.name)
        return {"weight": split(0), "bias": split(0)}


class Replicate(ParallelStyle):
    """Every tensor of the module broadcast (the default of modules no pattern matches)."""

    name = "replicate"

    def layouts(self, path: str, module: nn.Module, n: int) -> dict:
        return {}


STYLES = {s.name: s for s in (ColwiseParallel, RowwiseParallel, VocabParallel, Replicate)}


def _style(pattern: str, style) -> ParallelStyle:
    if isinstance(style, ParallelStyle):
        return style
    if isinstance(style, type) and issubclass(style, ParallelStyle):
        return style()
    if isinstance(style, str) and style in STYLES:
        return STYLES[style]()
    raise TensorParallelError(
        f"tensor_parallel: unknown style {style!r} for {pattern!r}; use one of {sorted(STYLES)} or a ParallelStyle"
    )


def _axis(placement: Placement, tp_axis: int) -> int:
    if isinstance(tp_axis, bool) or not isinstance(tp_axis, int) or not -placement.ndim <= tp_axis < placement.ndim:
        raise TensorParallelError(
            f"tensor_parallel: tp_axis {tp_axis!r} is not an axis of {placement!r} (it has {placement.ndim})"
        )
    return tp_axis % placement.ndim


def tensor_parallel(model: nn.Module, placement: Placement, plan: Mapping, *, tp_axis: int = -1) -> nn.Module:
    """Lay ``model``'s parameters and buffers out over ``placement`` in place, as ``plan`` says, and
    return ``model``.

    ``plan`` maps module-name patterns (``fnmatch``: ``"transformer.h.*.mlp.c_fc"``) to a style
    (``"colwise"``, ``"rowwise"``, ``"vocab"``, ``"replicate"`` or a :class:`ParallelStyle`), or is
    the preset name ``"gpt"`` (:func:`gpt_plan`). The first pattern that matches a module wins.
    The styles' SBPs go on ``tp_axis``; the other axes of an N-d placement hold every tensor
    broadcast (data parallel when the inputs are split on them). A tensor shared by two modules
    (a tied output layer) must get the same layout from both. Build the optimizer afterwards.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"tensor_parallel: model must be an nn.Module, got {type(model).__name__}")
    if not isinstance(placement, Placement):
        raise TypeError(f"tensor_parallel: placement must be a flow.placement, got {placement!r}")
    if isinstance(plan, str):
        if plan != "gpt":
            raise TensorParallelError(f"tensor_parallel: unknown plan preset {plan!r} (known: 'gpt')")
        plan = gpt_plan(model)
    if not isinstance(plan, Mapping):
        raise TypeError(f"tensor_parallel: plan must be a mapping of patterns to styles, got {type(plan).__name__}")
    axis = _axis(placement, tp_axis)
    n = placement.hierarchy[axis]
    styles = [(pattern, _style(pattern, style)) for pattern, style in plan.items()]
    modules = list(model.named_modules())
    hits = []
    for path, module in modules:
        hit = next(((pat, st) for pat, st in styles if fnmatch.fnmatchcase(path, pat)), None)
        if hit is not None:
            hits.append((path, module) + hit)
    unused = [pat for pat, _ in styles if pat not in {h[2] for h in hits}]
    if unused:
        raise TensorParallelError(
            f"tensor_parallel: plan pattern(s) {unused} match no module of {type(model).__name__} "
            f"(its modules are named like {[p for p, _ in modules[1:4]]})"
        )
    for path, module, _, style in hits:  # every module checked before any is changed
        style.check(path, module)
    layout: dict = {}  # id(tensor) -> (sbp on the TP axis, who set it)
    for path, module, _, style in hits:
        for name, sbp in style.layouts(path, module, n).items():
            t = module
            for part in name.split("."):  # a style may name its children's tensors ("c_attn.weight")
                t = getattr(t, part, None)
            if t is None:
                continue
            prev = layout.get(id(t))
            if prev is not None and prev[0] != sbp:
                raise TensorParallelError(
                    f"tensor_parallel: {path}.{name} is the tensor {prev[1]} also holds, which the plan lays out "
                    f"as {prev[0]!r}; here it would be {sbp!r} (give tied modules matching styles)"
                )
            layout[id(t)] = (sbp, f"{path}.{name}")
    for _path, module, _, style in hits:
        _pin(module, axis, *style.pins(module))

    def nd_sbp(name, t):
        on_axis = layout.get(id(t), (broadcast, None))[0]
        return tuple(on_axis if k == axis else broadcast for k in range(placement.ndim))

    return model.to_global(placement, nd_sbp)


def _relayout(x, axis: int, sbp):
    d = getattr(x, "_data", None)
    if sbp is None or not getattr(d, "is_global", False) or d.sbp[axis] == sbp:
        return x
    return x.to_global(sbp=tuple(sbp if k == axis else s for k, s in enumerate(d.sbp)))


def _pin(module: nn.Module, axis: int, inp, out) -> None:
    """Forward hooks converting the module's first input / its output on ``axis`` (differentiable:
    the gradients take the conversions back)."""
    if inp is not None:

        def before(m, args):
            x = _relayout(args[0], axis, inp)
            if inp is broadcast:  # a whole input of a split layer: its gradient is all-reduced here
                from flow_dist.parallel.layers import replicate_grad

                x = replicate_grad(x, axis)
            return (x,) + tuple(args[1:])

        module.register_forward_pre_hook(before)
    if out is not None:
        module.register_forward_hook(lambda m, args, y: _relayout(y, axis, out))


def gpt_plan(model: nn.Module) -> dict:
    """The Megatron plan of the zoo GPT (``flow_models.nlp.gpt.GPT``): per block, attention head
    parallel (its fused ``c_attn`` column parallel by heads, :class:`~flow_dist.parallel.layers.
    GPTAttentionParallel`) and the MLP's ``c_fc`` column parallel, both ``c_proj`` row parallel; the
    token embedding and the (tied) output layer vocabulary parallel."""
    tr = getattr(model, "transformer", None)
    if tr is None or not hasattr(tr, "h") or not hasattr(tr, "wte") or not hasattr(model, "lm_head"):
        raise TensorParallelError(
            f"gpt_plan: {type(model).__name__} is not laid out like the zoo GPT "
            "(transformer.wte, transformer.h, lm_head)"
        )
    from flow_dist.parallel.layers import GPTAttentionParallel

    return {
        "transformer.wte": "vocab",
        "transformer.h.*.attn": GPTAttentionParallel(),
        "transformer.h.*.attn.c_proj": "rowwise",
        "transformer.h.*.mlp.c_fc": "colwise",
        "transformer.h.*.mlp.c_proj": "rowwise",
        "lm_head": "vocab",
    }
