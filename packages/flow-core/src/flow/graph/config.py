"""``graph.config``: what a compiled step does (passes, AMP, gradient accumulation, executor options).

Every setting is plain data that passes read (``fn(ir, config)``): a pass registered by a plugin
finds its options in ``config.options`` (``config.set_option("fusion.max_nodes", 64)``) and the
per-block settings (activation checkpointing, pipeline stage) in ``config.blocks``. Changing the
config after a graph was compiled makes the next call compile again.
"""

from __future__ import annotations

from typing import Any

from flow.errors import FlowError


class BlockConfig:
    """Settings of one graph block (a module assigned in ``__init__``)."""

    def __init__(self, owner: "GraphConfig | None" = None) -> None:
        self._owner = owner
        self._activation_checkpointing = False
        self._stage_id = None

    @property
    def activation_checkpointing(self) -> bool:
        """Recompute this block's forward in the backward pass instead of keeping its activations
        (done by the ``activation_checkpointing`` pass when one is registered)."""
        return self._activation_checkpointing

    @activation_checkpointing.setter
    def activation_checkpointing(self, value: bool) -> None:
        self._activation_checkpointing = bool(value)
        if self._owner is not None:
            self._owner._changed()

    @property
    def stage_id(self):
        """Pipeline stage of this block (used by pipeline parallelism)."""
        return self._stage_id

    @stage_id.setter
    def stage_id(self, value) -> None:
        self._stage_id = value
        if self._owner is not None:
            self._owner._changed()

    def key(self) -> tuple:
        return (self._activation_checkpointing, self._stage_id)

    def __repr__(self) -> str:
        return f"BlockConfig(activation_checkpointing={self._activation_checkpointing}, stage_id={self._stage_id})"


# config feature -> the name of the pass that implements it
FEATURE_PASSES = {
    "amp": "amp",
    "fusion": "fusion",
    "memory_planning": "memory_planning",
    "gradient_accumulation": "gradient_accumulation",
    "activation_checkpointing": "activation_checkpointing",
}


class GraphConfig:
    """OneFlow's ``graph.config``."""

    def __init__(self) -> None:
        self.gradient_accumulation_steps = 1
        self.amp: dict | None = None
        self.fusion = True
        self.memory_planning = True
        self.autotune = True
        self.autotune_runs = 2  # timed runs per candidate kernel before choosing
        self.prefetch_depth = 2  # input buffers the loader may fill ahead of compute (back-pressure)
        self.executor = "static"  # "static": precomputed dataflow schedule, "dataflow": interpreted scheduler
        self.constant_fold_max_elements = 1 << 20
        self.options: dict[str, Any] = {}
        self.blocks: dict[str, BlockConfig] = {}
        self._overrides: dict[str, bool] = {}
        self._version = 0

    def _changed(self) -> None:
        self._version += 1

    # -- OneFlow's setters ------------------------------------------------------------------
    def set_gradient_accumulation_steps(self, n: int) -> None:
        """Split each call's inputs along dim 0 into ``n`` micro-batches, run forward and backward on each,
        accumulate (average) the gradients and update once."""
        n = int(n)
        if n < 1:
            raise ValueError(f"gradient accumulation steps must be >= 1, got {n}")
        self.gradient_accumulation_steps = n
        self._changed()

    def enable_amp(self, mode: bool = True, dtype=None, **options) -> None:
        """Mixed precision through the ``amp`` graph pass, which the flow-amp plugin registers.

        ``dtype`` (``flow.bfloat16``, the default, or ``flow.float16``) and further options are passed
        to the pass as ``config.amp``.
        """
        if not mode:
            self.amp = None
            self._changed()
            return
        check_amp_available()
        from flow import _dtype as D

        try:
            dt = D.bfloat16 if dtype is None else D.as_dtype(dtype)
        except (TypeError, ValueError, KeyError) as e:
            raise TypeError(f"enable_amp: dtype must be flow.bfloat16 or flow.float16, got {dtype!r}") from e
        if dt not in (D.bfloat16, D.float16):
            raise TypeError(f"enable_amp: dtype must be flow.bfloat16 or flow.float16, got {dt}")
        self.amp = {"dtype": dt, **options}
        self._changed()

    def enable_fusion(self, mode: bool = True) -> None:
        """Elementwise fusion (the ``fusion`` pass, when a backend registers one)."""
        self.fusion = bool(mode)
        self._changed()

    def enable_memory_planning(self, mode: bool = True) -> None:
        """Liveness-based buffer reuse (the ``memory_planning`` pass, when registered)."""
        self.memory_planning = bool(mode)
        self._changed()

    def enable_autotune(self, mode: bool = True) -> None:
        """Time alternative kernels of a node on the first runs and keep the fastest."""
        self.autotune = bool(mode)
        self._changed()

    def disable_pass(self, name: str) -> None:
        """Skip the pass ``name`` (any registered pass: ``dce``, ``cse``, ``constant_folding``, ...)."""
        self._overrides[str(name)] = False
        self._changed()

    def enable_pass(self, name: str) -> None:
        """Run the pass ``name`` even if it is off by default."""
        self._overrides[str(name)] = True
        self._changed()

    def set_option(self, key: str, value) -> None:
        """An option for a pass (``"<pass>.<option>"`` by convention)."""
        self.options[key] = value
        self._changed()

    # -- queries ------------------------------------------------------------------------------
    def pass_enabled(self, entry) -> bool:
        name = entry.name
        if name in self._overrides:
            return self._overrides[name]
        if name == FEATURE_PASSES["amp"]:
            return self.amp is not None
        if name == FEATURE_PASSES["fusion"]:
            return self.fusion and entry.enabled_by_default
        if name == FEATURE_PASSES["memory_planning"]:
            return self.memory_planning and entry.enabled_by_default
        if name == FEATURE_PASSES["gradient_accumulation"]:
            return self.gradient_accumulation_steps > 1
        if name == FEATURE_PASSES["activation_checkpointing"]:
            return any(b.activation_checkpointing for b in self.blocks.values())
        return entry.enabled_by_default

    def check(self) -> None:
        """Raise for settings that name passes which are not registered (called at compile time)."""
        from flow.registry import REGISTRY

        passes = REGISTRY.passes
        unknown = [n for n in self._overrides if n not in passes]
        if unknown:
            raise FlowError(f"graph config: no graph pass named {unknown}; registered passes: {passes.names()}")
        if self.amp is not None:
            check_amp_available()

    def key(self) -> tuple:
        return (self._version,)

    def __repr__(self) -> str:
        parts = [
            f"gradient_accumulation_steps={self.gradient_accumulation_steps}",
            f"amp={self.amp}",
            f"fusion={self.fusion}",
            f"memory_planning={self.memory_planning}",
            f"autotune={self.autotune}",
        ]
        if self._overrides:
            parts.append(f"passes={self._overrides}")
        return f"GraphConfig({', '.join(parts)})"


def check_amp_available() -> None:
    from flow.registry import REGISTRY

    if "amp" not in REGISTRY.passes:
        raise FlowError(
            "graph config: mixed precision needs the graph pass 'amp', which the flow-amp plugin "
            "registers; install the 'flow-amp' package (pip install flow-amp) and make sure its plugin "
            "is loaded (FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD)"
        )
