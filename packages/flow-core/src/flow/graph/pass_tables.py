"""What graph passes need from a backend, per device type: tables the core declares, backends fill.

The passes are device-neutral; a device type takes part in them by filling these tables (from its
plugin's ``flow_register_rules`` hook, with ``registry.register_rule(table, device_type, rule)``):

* :data:`FUSION_TABLE` (``"graph_fusion"``), one :class:`FusionRule` per device type: which ops and
  dtypes the ``fusion`` pass may group, and how the groups' programs are lowered to kernels (the
  CPU backend: C code generation; flow-cuda: NVRTC). The ``fused_elementwise`` op then runs with the
  kernel the device registered for it (``registry.register_kernel("fused_elementwise", device, fn)``).
* :data:`ARENA_TABLE` (``"graph_memory"``), one :class:`ArenaRule` per device type: how the
  ``memory_planning`` pass allocates a step's arena on that device and takes typed views of it.
  Only values whose kernel has an out-variant are placed in it: ``register_kernel(..., out=fn)``
  declares the out-variant with the kernel, :func:`register_out_variant` adds one to a kernel
  another plugin registered, and :func:`out_kernel` finds the one of the kernel dispatch picks.
* :data:`PLAN_PHASE_TABLE` (``"graph_plan_phases"``), one :class:`PlanPhase` per name: work done on
  the lowered plan after scheduling (memory planning's arena now; CUDA-graph capture later), run by
  :func:`flow.graph.lowering.plan.lower` in ``order`` when ``applies(plan)`` is true.

Example (a plugin for device type ``"mydev"`` whose arrays follow NumPy's API)::

    @hookimpl
    def flow_register_rules(registry):
        from flow.graph.pass_tables import ARENA_TABLE, FUSION_TABLE, FusionRule, numpy_arena_rule

        registry.register_rule(FUSION_TABLE, "mydev", FusionRule(ops=frozenset({"add", "mul", "exp"}),
                                                                 lower=my_compile))
        registry.register_rule(ARENA_TABLE, "mydev", numpy_arena_rule())
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from flow.errors import RegistrationError

FUSION_TABLE = "graph_fusion"
ARENA_TABLE = "graph_memory"
PLAN_PHASE_TABLE = "graph_plan_phases"


def _always_available() -> str | None:
    return None


def _any_attrs(op: str, attrs: dict) -> bool:
    return True


@dataclass(frozen=True)
class FusionRule:
    """How the ``fusion`` pass may fuse nodes on one device type.

    ``ops``: elementwise ops a group may contain; ``dtypes``: dtype names group values may have
    (``bool`` masks are allowed inside when listed); ``reductions``: ops a group may end in
    (``sum``/``mean`` over trailing dims); ``attrs_supported(op, attrs)``: whether the lowering
    handles a node's attributes; ``lower(programs)``: builds the kernels of every
    :class:`~flow.graph.passes.fused_program.FusedProgram` of one graph at once (an exception
    leaves that device's groups unfused, and the pass note says why); ``unavailable()``: a reason
    lowering cannot run in this process (no compiler), or ``None``.
    """

    ops: frozenset
    dtypes: frozenset = frozenset({"float32", "float64", "bool"})
    reductions: frozenset = frozenset()
    attrs_supported: Callable[[str, dict], bool] = _any_attrs
    lower: Callable[[list], None] | None = None
    unavailable: Callable[[], str | None] = _always_available


@dataclass(frozen=True)
class ArenaRule:
    """How memory planning keeps a step's intermediate values in one buffer on a device type.

    ``allocate(nbytes, alignment)`` returns a 1-d ``uint8`` array of ``nbytes`` whose start is
    aligned; ``view(arena, offset, shape, dtype)`` the array of ``shape`` and NumPy ``dtype`` at
    byte ``offset``. ``inplace``: kernels of this device may also write an output into a dead
    input's buffer (the in-place part of the pass).
    """

    allocate: Callable[[int, int], Any]
    view: Callable[[Any, int, tuple, np.dtype], Any]
    inplace: bool = True


@dataclass(frozen=True)
class PlanPhase:
    """Work on a lowered plan: ``run(plan, config)`` when ``applies(plan)``; phases run by ``order``."""

    run: Callable[[Any, Any], None]
    applies: Callable[[Any], bool] = field(default=lambda plan: True)
    order: int = 0
    doc: str = ""


def _numpy_allocate(nbytes: int, alignment: int):
    raw = np.empty(nbytes + alignment, np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift : shift + nbytes]


def _numpy_view(arena, offset: int, shape: tuple, dtype):
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return arena[offset : offset + n].view(dtype).reshape(shape)


def numpy_arena_rule(inplace: bool = True) -> ArenaRule:
    """The arena of a device whose arrays are NumPy arrays (the CPU, NumPy-backed test devices)."""
    return ArenaRule(_numpy_allocate, _numpy_view, inplace)


# -- reading the tables ------------------------------------------------------------------------------
def declare_tables(registry) -> None:
    """Declare the tables (the ``flow.graph`` plugin's ``flow_register_tables`` hook)."""
    registry.declare_table(FUSION_TABLE, "device type -> FusionRule: what the fusion pass may fuse there")
    registry.declare_table(ARENA_TABLE, "device type -> ArenaRule: memory planning's arena on that device")
    registry.declare_table(PLAN_PHASE_TABLE, "name -> PlanPhase: work on the lowered plan")


def _table(name: str):
    from flow.registry import REGISTRY

    return REGISTRY.tables.get(name)


def fusion_rule(device_type: str) -> FusionRule | None:
    """The fusion rule of a device type, or ``None`` (its values are never fused)."""
    t = _table(FUSION_TABLE)
    return t.get(device_type) if t is not None else None


def arena_rule(device_type: str) -> ArenaRule | None:
    """The arena rule of a device type, or ``None`` (memory planning leaves its values alone)."""
    t = _table(ARENA_TABLE)
    return t.get(device_type) if t is not None else None


def plan_phases() -> list[tuple[str, PlanPhase]]:
    """The registered plan phases as ``(name, phase)``, in run order (``order``, then name)."""
    t = _table(PLAN_PHASE_TABLE)
    if t is None:
        return []
    return sorted(t.items(), key=lambda kv: (kv[1].order, kv[0]))


# -- out= variants ---------------------------------------------------------------------------------
def supports_out(kernel) -> bool:
    """The kernel itself takes ``out=`` (a NumPy ufunc, or marked ``supports_out = True``)."""
    return isinstance(kernel, np.ufunc) or bool(getattr(kernel, "supports_out", False))


def out_kernel(op, device_type: str, dtype, kernel=None):
    """The out-variant of the kernel dispatch resolves for ``(op, device_type, dtype)``, or ``None``.

    ``kernel`` is that resolved kernel when the caller has it (it is returned when it takes ``out=``
    itself). Otherwise the out-variant declared with the kernel entry dispatch picks (the first of
    ``REGISTRY.kernel_entries``), built with the device's array module when the entry is generic.
    """
    from flow.registry import REGISTRY

    if kernel is not None and supports_out(kernel):
        return kernel
    entries = REGISTRY.kernel_entries(op, device_type, dtype)
    return entry_out_variant(entries[0], device_type) if entries else None


def entry_out_variant(entry, device_type: str):
    """The out-variant declared with one kernel entry (``REGISTRY.kernel_entries``), or ``None``; a
    generic entry's factory is built with the device's array module. Autotuned steps take one per
    candidate, so that whichever kernel the tuner keeps writes into the arena."""
    from flow.registry import REGISTRY

    if entry.out is None:
        return None
    if entry.generic:
        dev = REGISTRY.device_types.get(device_type)
        return None if dev is None else _marked(entry.out(dev.xp))
    return _marked(entry.out)


def _marked(fn):
    try:
        fn.supports_out = True
    except (AttributeError, TypeError):  # a builtin: callers test supports_out() on ufuncs only
        pass
    return fn


def register_out_variant(
    registry, op: str, device_type: str, fn: Callable, *, kernel: str = "default", dtypes=None
) -> None:
    """Declare ``fn`` as the out-variant of the kernel named ``kernel`` that is registered for
    ``(op, device_type)`` (all its dtype entries, or only ``dtypes``). For kernels another plugin
    registered; a plugin's own kernels pass ``out=`` to ``register_kernel``. Call it after the kernel
    is registered (from ``flow_register_rules``). A generic kernel's ``fn`` is a factory ``fn(xp)``."""
    opdef = registry._ops.get(op)
    if opdef is None:
        raise RegistrationError(f"out-variant for unknown op '{op}'")
    found = False
    for (dev, dt), entries in opdef.kernels.items():
        if dev != device_type or (dtypes is not None and dt not in dtypes):
            continue
        for e in entries:
            if e.name == kernel:
                e.out = fn
                found = True
    if not found:
        raise RegistrationError(
            f"out-variant for op '{op}': no kernel '{kernel}' is registered for device "
            f"'{device_type}'; register the kernel first"
        )
    registry._note("out_variants", f"{op}[{device_type}]")
