"""The PyTorch names flow lacks: what ``packages/flow-core/tests/test_torch_names.py`` checks.

``python tools/torch_names.py`` prints, per namespace, how many of PyTorch's public names flow has
and which it lacks. ``--write`` also rewrites the checked-in list of known-missing names
(``packages/flow-core/tests/torch_missing_names.txt``) and ``docs/pytorch-missing.md`` from the
same data. Both need ``torch`` installed; the answer depends on its version.

Which names count: a namespace's ``__all__`` when it has one, else its ``dir()``; never names that
start with ``_``, never submodules (they are namespaces of their own), and per namespace only the
kinds of objects asked for (functions and classes at ``torch`` top level: dtypes and constants are
values, not API to implement). :data:`EXCLUDED` then drops the names flow does not aim to have,
each rule with its reason. The flow counterpart of ``torch.X`` is the module
:mod:`flow.mock_torch` serves for it (``flow.X`` unless its ``MODULE_TABLE`` says otherwise).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
LIST_PATH = ROOT / "packages/flow-core/tests/torch_missing_names.txt"
DOC_PATH = ROOT / "docs/pytorch-missing.md"
REGENERATE = "python tools/torch_names.py --write"


def _callable(obj: Any) -> bool:
    return callable(obj)


def _is_class(obj: Any) -> bool:
    return isinstance(obj, type)


def _any(obj: Any) -> bool:
    return True


def _defined_in_torch(obj: Any) -> bool:
    # torch.nn.functional's dir() also holds what it imports (typing.Callable, math, ...)
    mod = getattr(obj, "__module__", None) or ""
    return callable(obj) and (mod.startswith("torch") or type(obj).__name__ == "builtin_function_or_method")


@dataclass(frozen=True)
class Namespace:
    torch_path: str  # "torch.nn.functional"; "torch.Tensor" is the class's methods and attributes
    keep: Callable[[Any], bool]  # which objects of the namespace count
    use_all: bool = True  # take ``__all__`` when the namespace has one


NAMESPACES: tuple[Namespace, ...] = (
    Namespace("torch", _callable, use_all=False),
    Namespace("torch.Tensor", _any),
    Namespace("torch.nn", _is_class),
    Namespace("torch.nn.functional", _defined_in_torch),
    Namespace("torch.linalg", _defined_in_torch),
    Namespace("torch.fft", _callable),
    Namespace("torch.special", _callable),
    Namespace("torch.distributions", _any),
    Namespace("torch.optim", _any),
    Namespace("torch.optim.lr_scheduler", _any),
    Namespace("torch.utils.data", _any),
    Namespace("torch.autograd", _any),
    Namespace("torch.nn.init", _any),
    Namespace("torch.nn.utils", _any),
)

_TENSOR_ALIAS = "Tensor"  # re-exported by torch.fft / torch.nn.functional for annotations: counted as torch.Tensor

#: (namespace, regular expression the whole name matches, why flow does not aim to have it)
EXCLUDED: tuple[tuple[str, str, str], ...] = (
    # -- torch top level ---------------------------------------------------------------------------------
    (
        "torch",
        r"(cudnn|miopen|mkldnn|fbgemm)_\w+",
        "vendor kernels (cuDNN, MIOpen, oneDNN, FBGEMM) torch calls internally",
    ),
    (
        "torch",
        r"is_vulkan_available|profiler_allow_cudagraph\w*|AcceleratorError|OutOfMemoryError|Event|Stream",
        "CUDA/XPU/MPS/Vulkan device runtime (streams, events, device errors): flow-cuda's torch.cuda",
    ),
    (
        "torch",
        r"(get|set)_autocast_(gpu|ipu|xla)_\w+|is_autocast_(ipu|xla)_enabled|set_autocast_(ipu|xla)_enabled",
        "autocast state of GPU/IPU/XLA devices",
    ),
    (
        "torch",
        r"q_\w+|quantize\w*|quantized_\w+|dequantize|fake_quantize\w*|fused_moving_avg_obs_fake_quant"
        r"|choose_qparams_optimized|int_repr|empty_quantized|qscheme|Q\w*Storage",
        "quantization",
    ),
    ("torch", r"sparse_(csr|csc|bsr|bsc|compressed)_tensor|(ccol|col|crow|row)_indices_copy", "sparse CSR/CSC/BSR/BSC"),
    (
        "torch",
        r"Script\w*|\w+Type|Type|AliasDb|Argument(Spec)?|Block|CallStack|Capsule|Code|CompilationUnit"
        r"|CompleteArgumentSpec|ConcreteModuleType(Builder)?|DeepCopyMemoTable|ErrorReport|ExecutionPlan|FileCheck"
        r"|FunctionSchema|Future|Gradient|Graph|GraphExecutorState|IODescriptor|InferredType|JITException"
        r"|LiteScriptModule|(Locking|Noop)Logger|LoggerBase|Node|OperatorInfo|StaticModule|TracingState|Use|Value"
        r"|parse_ir|parse_schema|parse_type_comment|import_ir_module\w*|merge_type_from_type_comment|unify_type_list"
        r"|fork|wait",
        "TorchScript/JIT IR and its futures",
    ),
    (
        "torch",
        r"sym_\w+|Sym(Bool|Int|Float)|cond|while_loop|nonzero_static|slice_inverse",
        "symbolic shapes and control flow of torch.compile/torch.export (dynamo)",
    ),
    ("torch", r"solve|lstsq|symeig|eig|matrix_rank", "removed from PyTorch (the name remains only to raise)"),
    ("torch", r"\w+_copy", "view-copy variants generated for functionalization (torch.export)"),
    (
        "torch",
        r"native_\w+|batch_norm_(backward_elemt|backward_reduce|elemt|gather_stats\w*|stats|update_stats)"
        r"|conv_tbc|norm_except_dim|segment_reduce|hash_tensor",
        "ATen internals behind nn.functional / SyncBatchNorm / weight_norm, and prototypes",
    ),
    (
        "torch",
        r"DispatchKey(Set)?|ExcludeDispatchKeyGuard|DisableTorchFunction(Subclass)?|Tag|classproperty"
        r"|(Serialization|Deserialization)StorageContext|PyTorchFile(Reader|Writer)|ThroughputBenchmark|Benchmark\w*"
        r"|AggregationType|prepare_multiprocessing_environment|get_file_path|compiled_with_cxx11_abi|init_num_threads"
        r"|thread_safe_generator|FatalError",
        "dispatcher, serialization, benchmark and build internals of the C++ core",
    ),
    (
        "torch",
        r"(Double|Float|Half|BFloat16|Long|Int|Short|Char|Byte|Bool|ComplexDouble|ComplexFloat)Storage"
        r"|Storage|StorageBase",
        "legacy per-dtype storages (deprecated; torch.UntypedStorage stays listed)",
    ),
    (
        "torch",
        r"(?!_)\w+[a-z0-9]_",
        "top-level in-place variants (torch.relu_ ...): undocumented; the Tensor "
        "methods (x.relu_()) are counted in torch.Tensor",
    ),
    # -- torch.Tensor ------------------------------------------------------------------------------------
    (
        "torch.Tensor",
        r"cuda|is_cuda|xpu|is_xpu|ipu|is_ipu|mtia|is_mtia|is_maia|is_vulkan|is_xla|record_stream"
        r"|is_mkldnn|to_mkldnn",
        "CUDA/XPU/IPU/MTIA/XLA/Vulkan/oneDNN devices and streams",
    ),
    ("torch.Tensor", r"q_\w+|qscheme|int_repr|dequantize|is_quantized", "quantization"),
    (
        "torch.Tensor",
        r"(ccol|col|crow|row)_indices|to_sparse_(csr|csc|bsr|bsc)|is_sparse_csr",
        "sparse CSR/CSC/BSR/BSC",
    ),
    ("torch.Tensor", r"is_nested|to_padded_tensor", "nested (jagged) tensors"),
    (
        "torch.Tensor",
        r"\w+_copy|slice_inverse|nonzero_static|hash_tensor",
        "functionalization/export variants and prototypes",
    ),
    ("torch.Tensor", r"solve|lstsq|symeig|eig", "removed from PyTorch (the name remains only to raise)"),
    (
        "torch.Tensor",
        r"volatile|reinforce|output_nr|map2_|module_load|as_subclass|grad_dtype",
        "legacy Variable API and subclassing/serialization internals",
    ),
    # -- namespaces with annotation re-exports and documentation strings --------------------------------
    ("torch.fft", _TENSOR_ALIAS, "re-export of torch.Tensor for annotations"),
    (
        "torch.nn.functional",
        r"boolean_dispatch|handle_torch_function|has_torch_function\w*|assert_int_or_pair",
        "__torch_function__ dispatch helpers and argument checks, not functions a model calls",
    ),
    ("torch.nn.functional", _TENSOR_ALIAS, "re-export of torch.Tensor for annotations"),
    ("torch.nn.functional", r"scaled_mm|scaled_grouped_mm|ScalingType|SwizzleType", "fp8 scaled matmul of CUDA GPUs"),
    ("torch.nn.functional", r"native_channel_shuffle|conv_tbc", "ATen internals (channel_shuffle, conv1d cover them)"),
    (
        "torch.nn.init",
        r"uniform|normal|constant|eye|dirac|xavier_uniform|xavier_normal|kaiming_uniform|kaiming_normal"
        r"|orthogonal|sparse",
        "deprecated spellings of the in-place initialisers (uniform_ ...), which count",
    ),
    ("torch.nn.utils", r"clip_grad_norm", "deprecated spelling of clip_grad_norm_, which counts"),
    (
        "torch.nn",
        r"Container|factory_kwargs|LinearCrossEntropyOptions",
        "deprecated base class and construction helpers",
    ),
    (
        "torch.utils.data",
        r"\w*DataPipe|DataChunk|functional_datapipe|guaranteed_datapipes_determinism"
        r"|non_deterministic|argument_validation|runtime_validation\w*",
        "torchdata DataPipes (deprecated in torch, removed from torchdata)",
    ),
)


def excluded(namespace: str, name: str) -> str | None:
    """The reason ``namespace.name`` is excluded, or None when it counts."""
    for ns, pattern, reason in EXCLUDED:
        if ns == namespace and re.fullmatch(pattern, name):
            return reason
    return None


def torch_object(path: str) -> Any:
    """``torch.Tensor`` is a class, the others are modules."""
    import torch

    return torch.Tensor if path == "torch.Tensor" else importlib.import_module(path)


def flow_object(path: str) -> Any | None:
    """flow's counterpart of ``torch.X`` (None when flow has no such module)."""
    import flow
    from flow.mock_torch import MODULE_TABLE

    if path == "torch.Tensor":
        return flow.Tensor
    try:
        return importlib.import_module(MODULE_TABLE.get(path, "flow" + path[len("torch") :]))
    except ImportError:
        return None


def torch_names(ns: Namespace) -> list[str]:
    """PyTorch's public names in ``ns`` that count (see the module docstring), sorted."""
    obj = torch_object(ns.torch_path)
    names = getattr(obj, "__all__", None) if ns.use_all else None
    names = dir(obj) if names is None else names
    out = set()
    for name in names:
        if name.startswith("_"):
            continue
        try:
            value = getattr(obj, name)
        except AttributeError:  # listed in __all__ but absent in this build
            continue
        if isinstance(value, types.ModuleType) or not ns.keep(value):
            continue
        if excluded(ns.torch_path, name) is None:
            out.add(name)
    return sorted(out)


@dataclass
class Gap:
    namespace: str
    names: list[str]  # PyTorch's names that count
    missing: list[str]  # those flow lacks

    @property
    def present(self) -> int:
        return len(self.names) - len(self.missing)


def gap() -> list[Gap]:
    """Per namespace of :data:`NAMESPACES`: PyTorch's names and the ones flow lacks."""
    out = []
    for ns in NAMESPACES:
        names = torch_names(ns)
        fobj = flow_object(ns.torch_path)
        missing = [n for n in names if fobj is None or not hasattr(fobj, n)]
        out.append(Gap(ns.torch_path, names, missing))
    return out


def missing_lines(gaps: list[Gap]) -> list[str]:
    return [f"{g.namespace}.{n}" for g in gaps for n in g.missing]


def read_list(path: Path = LIST_PATH) -> list[str]:
    """The names of the checked-in list (comments and blank lines skipped)."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


def render_list(gaps: list[Gap]) -> str:
    import torch

    head = [
        "# PyTorch names flow does not have yet, one `namespace.name` a line (checked by test_torch_names.py).",
        "# Delete a line when its name lands in flow; add one only for a new torch name flow does not have.",
        f"# Regenerate: {REGENERATE}  (torch {torch.__version__})",
    ]
    return "\n".join(head + missing_lines(gaps)) + "\n"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def render_doc(gaps: list[Gap]) -> str:
    import torch

    out = [
        "# PyTorch names flow does not have yet",
        "",
        f"Generated by `{REGENERATE}` (torch {torch.__version__}) from the same data as",
        "`packages/flow-core/tests/torch_missing_names.txt`, which `test_torch_names.py` checks; do not edit",
        "by hand. Which names count is said in `tools/torch_names.py`; the names left out on purpose (CUDA,",
        "quantization, sparse CSR, TorchScript, torch.compile internals ...) are listed at the end, each",
        "rule with its reason.",
        "",
        "| namespace | torch names | in flow | missing |",
        "|---|---:|---:|---:|",
    ]
    total = sum(len(g.names) for g in gaps)
    present = sum(g.present for g in gaps)
    for g in gaps:
        n, m = len(g.names), len(g.missing)
        out.append(f"| `{g.namespace}` | {n} | {g.present} ({_pct(g.present, n)}) | {m} ({_pct(m, n)}) |")
    out.append(
        f"| all | {total} | {present} ({_pct(present, total)}) | {total - present} ({_pct(total - present, total)}) |"
    )
    for g in gaps:
        out += ["", f"## `{g.namespace}`", ""]
        out.append(", ".join(f"`{n}`" for n in g.missing) if g.missing else "Nothing missing.")
    out += ["", "## Left out on purpose", "", "| namespace | names (regular expression) | why |", "|---|---|---|"]
    for ns, pattern, reason in EXCLUDED:
        shown = pattern.replace("|", "\\|")  # a bare | would split the table cell
        out.append(f"| `{ns}` | `{shown}` | {reason} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the checked-in list and docs/pytorch-missing.md")
    parser.add_argument("--names", action="store_true", help="print every missing name, not only the counts")
    args = parser.parse_args(argv)
    gaps = gap()
    for g in gaps:
        print(f"{g.namespace:26} {g.present:4}/{len(g.names):<4} in flow, {len(g.missing):4} missing")
        if args.names and g.missing:
            print("    " + " ".join(g.missing))
    if args.write:
        LIST_PATH.write_text(render_list(gaps))
        DOC_PATH.write_text(render_doc(gaps))
        print(f"wrote {LIST_PATH.relative_to(ROOT)} and {DOC_PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
