"""``flow.cuda``: PyTorch's ``torch.cuda`` namespace, answered by the flow-cuda package when it is there.

Scripts touch ``torch.cuda`` at the top even on a CPU-only machine (``if torch.cuda.is_available()``,
``torch.cuda.manual_seed_all(0)``), so this module always exists. The cuda device itself comes from the
flow-cuda package: when a plugin registers its module as the ``"cuda"`` API
(``registry.register_api("cuda", module)``, see :mod:`flow.provided`), every name here is answered by
that module, and names this module does not define (streams, events, graphs) are looked up on it too.

Without such a plugin this module answers like ``torch.cuda`` in a build without CUDA:

- the queries say there is no device: ``is_available()`` is False, ``device_count()`` 0,
  ``is_initialized()`` False, ``memory_allocated()`` and the other memory counters 0;
- seeding (``manual_seed``, ``manual_seed_all``, ``seed``, ``seed_all``) and ``empty_cache`` are silent
  no-ops, as in PyTorch, so that scripts may call them unconditionally;
- anything that needs a device (``current_device``, ``set_device``, ``synchronize``,
  ``get_device_name``, ...) raises :class:`CudaNotAvailableError`, saying that no CUDA device was found
  and that the cuda device comes from flow-cuda.

>>> flow.cuda.is_available(), flow.cuda.device_count()
(False, 0)
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any, Callable

from flow import provided
from flow.errors import FlowError

__all__ = [
    "CudaNotAvailableError",
    "is_available",
    "device_count",
    "is_initialized",
    "init",
    "is_bf16_supported",
    "is_tf32_supported",
    "get_arch_list",
    "current_device",
    "set_device",
    "device",
    "synchronize",
    "get_device_name",
    "get_device_capability",
    "get_device_properties",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_stats",
    "memory_summary",
    "mem_get_info",
    "reset_peak_memory_stats",
    "reset_max_memory_allocated",
    "set_per_process_memory_fraction",
    "empty_cache",
    "ipc_collect",
    "current_stream",
    "default_stream",
    "amp",
]


class CudaNotAvailableError(FlowError, AssertionError):
    """A ``flow.cuda`` function that needs a CUDA device was called where there is none.

    Also an ``AssertionError``, the type ``torch.cuda`` raises in a build without CUDA, so that code
    written against PyTorch that catches it keeps working.
    """


def _provider() -> Any:
    # the module flow-cuda registers as the "cuda" API; None while no plugin provides it
    return provided.get("cuda")


def _no_device(what: str) -> CudaNotAvailableError:
    from importlib import metadata

    try:
        metadata.version("flow-cuda")
        where = "the 'flow-cuda' package is installed but did not provide it (is its plugin loaded?)"
    except metadata.PackageNotFoundError:
        where = "install the 'flow-cuda' package: pip install flow-cuda"
    return CudaNotAvailableError(
        f"flow.cuda.{what}: no CUDA device was found; the cuda device comes from the flow-cuda package ({where})"
    )


def _forwarded(fn: Callable) -> Callable:
    """Answer with the provider's function of the same name when flow-cuda registered one."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        impl = _provider()
        if impl is not None:
            return getattr(impl, name)(*args, **kwargs)
        return fn(*args, **kwargs)

    return call


def _needs_device(name: str, doc: str) -> Callable:
    def fn(*args, **kwargs):
        raise _no_device(f"{name}()")

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc + " Needs a CUDA device (flow-cuda); raises CudaNotAvailableError without one."
    return _forwarded(fn)


def _seed_int(where: str, value: Any) -> int:
    # PyTorch converts with int() (so 3.0 and numpy integers work) and rejects what int() rejects
    try:
        return int(value)
    except (TypeError, ValueError):
        raise TypeError(f"flow.cuda.{where}: seed must be an integer, got {value!r}") from None


# -- queries: answered without a device ---------------------------------------------------------
@_forwarded
def is_available() -> bool:
    """Whether a CUDA device can be used (False without flow-cuda)."""
    return False


@_forwarded
def device_count() -> int:
    """Number of CUDA devices (0 without flow-cuda)."""
    return 0


@_forwarded
def is_initialized() -> bool:
    """Whether the CUDA state has been initialised (never without flow-cuda)."""
    return False


@_forwarded
def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Whether the current CUDA device supports bfloat16 (False without a device)."""
    return False


@_forwarded
def is_tf32_supported() -> bool:
    """Whether the current CUDA device supports TF32 (False without a device)."""
    return False


@_forwarded
def get_arch_list() -> list[str]:
    """The CUDA architectures flow's kernels were built for (none without flow-cuda)."""
    return []


# -- seeding and caches: silent no-ops without a device, as in PyTorch -----------------------
@_forwarded
def manual_seed(seed: int) -> None:
    """Seed the current CUDA device's generator; without a device a no-op (PyTorch's behaviour)."""
    _seed_int("manual_seed", seed)


@_forwarded
def manual_seed_all(seed: int) -> None:
    """Seed every CUDA device's generator; without a device a no-op (PyTorch's behaviour)."""
    _seed_int("manual_seed_all", seed)


@_forwarded
def seed() -> None:
    """Seed the current CUDA device's generator randomly; a no-op without a device."""


@_forwarded
def seed_all() -> None:
    """Seed every CUDA device's generator randomly; a no-op without a device."""


@_forwarded
def set_rng_state(new_state: Any, device: Any = "cuda") -> None:
    """Set a CUDA generator's state; PyTorch defers this until CUDA initialises, so without a device
    it does nothing."""


@_forwarded
def get_rng_state_all() -> list:
    """The generator states of every CUDA device: none without a device."""
    return []


@_forwarded
def set_rng_state_all(new_states: Any) -> None:
    """Set the generator state of each CUDA device (one state per device: none without a device)."""
    for state in new_states:
        set_rng_state(state)


@_forwarded
def empty_cache() -> None:
    """Release the cached blocks of the CUDA memory pool; nothing is cached without a device."""


# -- memory counters: zero without a device -----------------------------------------------------
@_forwarded
def memory_allocated(device: Any = None) -> int:
    """Bytes of CUDA memory held by tensors (0 without a device)."""
    return 0


@_forwarded
def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` (0 without a device)."""
    return 0


@_forwarded
def memory_reserved(device: Any = None) -> int:
    """Bytes of CUDA memory held by the caching allocator (0 without a device)."""
    return 0


@_forwarded
def max_memory_reserved(device: Any = None) -> int:
    """Peak of :func:`memory_reserved` (0 without a device)."""
    return 0


@_forwarded
def memory_stats(device: Any = None) -> "OrderedDict[str, Any]":
    """The caching allocator's statistics (empty without a device, as in PyTorch)."""
    return OrderedDict()


# -- what needs a device -------------------------------------------------------------------------
init = _needs_device("init", "Initialise the CUDA state.")
current_device = _needs_device("current_device", "Index of the current CUDA device.")
set_device = _needs_device("set_device", "Make a CUDA device the current one.")
synchronize = _needs_device("synchronize", "Wait for every kernel queued on a CUDA device.")
initial_seed = _needs_device("initial_seed", "The seed of the current CUDA device's generator.")
get_rng_state = _needs_device("get_rng_state", "The state of a CUDA device's generator.")
get_device_name = _needs_device("get_device_name", "The name of a CUDA device.")
get_device_capability = _needs_device("get_device_capability", "The (major, minor) compute capability of a device.")
get_device_properties = _needs_device("get_device_properties", "The properties of a CUDA device.")
memory_summary = _needs_device("memory_summary", "A printable summary of the caching allocator's statistics.")
mem_get_info = _needs_device("mem_get_info", "(free, total) bytes of a CUDA device's memory.")
reset_peak_memory_stats = _needs_device("reset_peak_memory_stats", "Reset the peaks of the memory counters.")
reset_max_memory_allocated = _needs_device("reset_max_memory_allocated", "Reset the peak of memory_allocated().")
set_per_process_memory_fraction = _needs_device(
    "set_per_process_memory_fraction", "Limit the share of a device's memory this process may use."
)
ipc_collect = _needs_device("ipc_collect", "Free CUDA memory other processes have released.")
current_stream = _needs_device("current_stream", "The current CUDA stream of a device.")
default_stream = _needs_device("default_stream", "The default CUDA stream of a device.")


class device:
    """``with flow.cuda.device(i):`` makes CUDA device ``i`` current inside the block.

    As in PyTorch, ``device(None)`` and a negative index are no-ops; entering any other device needs
    flow-cuda (without it :class:`CudaNotAvailableError` is raised on entering, not on construction).
    """

    def __init__(self, device: Any) -> None:
        from flow._device import device as _device

        if isinstance(device, (str, _device)):
            d = _device(device)
            if d.type != "cuda":
                raise ValueError(f"flow.cuda.device: expected a cuda device, got {d}")
            device = d.index
        elif device is not None and (isinstance(device, bool) or not isinstance(device, int)):
            raise TypeError(f"flow.cuda.device: expected a device index, a cuda device or None, got {device!r}")
        self.idx = -1 if device is None else device
        self._inner = None

    def __enter__(self) -> "device":
        impl = _provider()
        if impl is not None:
            self._inner = impl.device(self.idx)
            self._inner.__enter__()
        elif self.idx >= 0:
            raise _no_device(f"device({self.idx})")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._inner is not None:
            self._inner.__exit__(*exc)
            self._inner = None


def __getattr__(name: str) -> Any:
    # names only the device package knows (Stream, Event, CUDAGraph, nvtx, ...)
    if name == "amp":
        import importlib

        return importlib.import_module("flow.cuda.amp")
    impl = None if name.startswith("_") else _provider()
    if impl is not None and hasattr(impl, name):
        return getattr(impl, name)
    if name in ("Stream", "Event", "ExternalStream", "CUDAGraph", "graph", "stream", "nvtx"):
        from flow.errors import FeatureNotInstalledError

        # an AttributeError too, so hasattr(flow.cuda, "Stream") is False
        raise FeatureNotInstalledError(str(_no_device(name)))
    raise AttributeError(f"module 'flow.cuda' has no attribute '{name}'")
