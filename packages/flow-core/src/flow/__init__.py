"""flow: a deep-learning framework with PyTorch's API, graph compilation and global tensors.

>>> import flow
>>> x = flow.randn(3, 4, requires_grad=True)
>>> (x * x).sum().backward()
>>> x.grad.shape
flow.Size([3, 4])
"""

from __future__ import annotations

from flow import _dispatch
from flow._device import device
from flow._dtype import (
    bfloat16,
    bool,
    dtype,
    float16,
    float32,
    float64,
    get_default_dtype,
    int8,
    int16,
    int32,
    int64,
    promote_types,
    result_type,
    set_default_dtype,
    uint8,
)
from flow._tensor import Size, Tensor
from flow.autograd import engine as _engine
from flow.autograd import node as _node

_dispatch.Tensor = Tensor
_dispatch.Node = _node.Node
_node.Tensor = Tensor
_engine.Tensor = Tensor

from flow import array_kinds, autograd, errors, interceptors, ops, plugins, provided  # noqa: E402
from flow._creation import (  # noqa: E402
    arange,
    as_tensor,
    bernoulli,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    logspace,
    multinomial,
    normal,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    tensor,
    zeros,
    zeros_like,
)
from flow._random import (  # noqa: E402
    Generator,
    default_generator,
    get_rng_state,
    initial_seed,
    manual_seed,
    seed,
    set_rng_state,
)
from flow.autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402
from flow.ops.conversion import clone, contiguous  # noqa: E402

# The functional API: every public name (``__all__``) of these op modules is a flow.* function.
_PUBLIC_OP_MODULES = (
    "arith",
    "compare",
    "unary",
    "clamp_where",
    "reduction",
    "sorting",
    "movement",
    "shape_ops",
    "indexing",
    "linalg",
    "reduction_minmax",
    "reduction_stats",
)
_PUBLIC_OP_MODULES += ("views", "subscript", "padding")
_PUBLIC_OP_MODULES += ("extra_math", "scatter_ops", "tensor_extra", "distance", "nn_toplevel")
_PUBLIC_OP_MODULES += ("linalg_legacy", "special")
_PUBLIC_OP_MODULES += ("aliases", "combinatorics", "nn_aliases")


def _export_ops() -> None:
    import importlib

    g = globals()
    for m in _PUBLIC_OP_MODULES:
        mod = importlib.import_module("flow.ops." + m)
        for name in mod.__all__:
            g[name] = getattr(mod, name)


_export_ops()
from flow import (  # noqa: E402
    distributions,
    fft,
    func,
    linalg,
    nn,
    onnx,  # flow.onnx.export; the onnx package itself is imported on the first export
    optim,
    profiler,
    sparse,
    special,
    testing,
    utils,
)

# complex tensors: flow.tensor also takes complex data; conj / angle / real / imag know complex tensors
from flow._complex import (  # noqa: E402
    angle,
    cdouble,
    cfloat,
    complex,  # noqa: A004 - torch.complex
    complex64,
    complex128,
    conj,
    imag,
    polar,
    real,
    tensor,  # noqa: F811 - the creation function that also takes complex data
    view_as_complex,
    view_as_real,
)
from flow.graph import compile  # noqa: E402  (graph mode; flow.nn.Graph is the class form)
from flow.serialization import load, save  # noqa: E402
from flow.sparse import sparse_coo_tensor  # noqa: E402
from flow.utils.dlpack import from_dlpack, to_dlpack  # noqa: E402

float = float32  # noqa: A001 - PyTorch's aliases
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16

# PyTorch-compatibility namespaces and names that scripts use at the top, even on one CPU
from flow import accelerator, cpu, cuda, distributed, multiprocessing  # noqa: E402  (cuda, distributed: via plugins)
from flow._legacy_types import (  # noqa: E402
    BFloat16Tensor,
    BoolTensor,
    ByteTensor,
    CharTensor,
    DoubleTensor,
    FloatTensor,
    HalfTensor,
    IntTensor,
    LongTensor,
    ShortTensor,
)
from flow._memory_format import channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format  # noqa: E402
from flow._threads import get_num_interop_threads, get_num_threads, set_num_interop_threads, set_num_threads  # noqa: E402
from flow._typeinfo import finfo, get_device, iinfo, is_complex, is_floating_point, is_nonzero  # noqa: E402
from flow.backends import cuda as _backends_cuda  # noqa: E402,F401  (imported so that flow.backends.* exist)
from flow.backends import cudnn as _backends_cudnn  # noqa: E402,F401
from flow.backends import mkldnn as _backends_mkldnn  # noqa: E402,F401
from flow.backends import mps as _backends_mps  # noqa: E402,F401
from flow.backends import openmp as _backends_openmp  # noqa: E402,F401

__version__ = "0.1.0"


def is_tensor(obj) -> "builtins.bool":  # noqa: F821
    """True when ``obj`` is a flow Tensor."""
    return isinstance(obj, Tensor)


def numel(input: Tensor) -> "builtins.int":  # noqa: F821
    return input.numel()


def __getattr__(name: str):
    # names plugins provide (flow.placement from flow-dist, ...): see flow.provided
    return provided.flow_getattr(name)


_IMPORTED = True  # flow.provided answers plugin-provided names only once flow is imported
