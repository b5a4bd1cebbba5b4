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
        self._placement = None

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

    @property
    def placement(self):
        """Where this block's stage runs (a ``flow.placement``), set with :meth:`set_stage`; None if unset."""
        return self._placement

    def set_stage(self, stage_id: int, placement=None) -> None:
        """Run this block as pipeline stage ``stage_id`` on ``placement`` (OneFlow's
        ``block.config.set_stage``): with flow-dist loaded and more than one rank, the graph runs its
        step as a pipeline of the stages (see docs/distributed.md, "Pipeline parallelism")."""
        if isinstance(stage_id, bool) or not isinstance(stage_id, int) or stage_id < 0:
            raise ValueError(f"set_stage: stage_id must be a non-negative int, got {stage_id!r}")
        if placement is not None and not hasattr(placement, "ranks"):
            raise TypeError(f"set_stage: placement must be a flow.placement, got {type(placement).__name__}")
        self._placement = placement
        self.stage_id = stage_id

    def key(self) -> tuple:
        p = self.placement
        return (self._activation_checkpointing, self._stage_id, None if p is None else repr(p))

    def __repr__(self) -> str:
        return f"BlockConfig(activation_checkpointing={self._activation_checkpointing}, stage_id={self._stage_id})"


# config feature -> the name of the pass that implements it
FEATURE_PASSES = {
    "amp": "amp",
    "fusion": "fusion",
    "memory_planning": "memory_planning",
    "gradient_accumulation": "gradient_accumulation",
    "activation_checkpointing": "activation_checkpointing",
    "zero": "zero",
}


class GraphConfig:
    """OneFlow's ``graph.config``."""

    def __init__(self) -> None:
        self.gradient_accumulation_steps = 1
        self.amp: dict | None = None
        self.zero: dict | None = None  # enable_zero's settings, read by the "zero" pass
        self.auto_parallel: dict | None = None  # enable_auto_parallel's settings (flow-dist applies them)
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

    def enable_zero(
        self, mode: bool = True, *, stage: int = 1, shard_min_size: int = 1024, shard_restore_level: int = 1
    ) -> None:
        """ZeRO data parallelism through the ``zero`` graph pass, which the flow-dist plugin registers.

        ``stage`` 1 shards the optimizer states on the data-parallel axis, 2 the gradients too, 3 the
        parameters too; parameters with fewer than ``shard_min_size`` elements are left whole;
        ``shard_restore_level`` (0 or 1, OneFlow's) says how eagerly sharded parameters are gathered
        again. The settings are passed to the pass as ``config.zero``.
        """
        if not mode:
            self.zero = None
            self._changed()
            return
        if isinstance(stage, bool) or not isinstance(stage, int) or stage not in (1, 2, 3):
            raise ValueError(f"enable_zero: stage must be 1, 2 or 3, got {stage!r}")
        if isinstance(shard_min_size, bool) or not isinstance(shard_min_size, int) or shard_min_size < 1:
            raise ValueError(f"enable_zero: shard_min_size must be a positive int, got {shard_min_size!r}")
        if shard_restore_level not in (0, 1) or isinstance(shard_restore_level, bool):
            raise ValueError(f"enable_zero: shard_restore_level must be 0 or 1, got {shard_restore_level!r}")
        check_zero_available()
        self.zero = {"stage": stage, "shard_min_size": shard_min_size, "shard_restore_level": shard_restore_level}
        self._changed()

    def enable_auto_parallel(self, mode: bool = True, *, memory_cap: float | None = None, cluster=None) -> None:
        """Choose the data x tensor parallel layout of the graph's model on its first call, by the
        flow-dist plugin's search (``flow_dist.auto_parallel``): the layout whose simulated step is the
        fastest within ``memory_cap`` bytes per rank (``cluster``: a ``flow_dist.plan.Cluster``; default
        this machine's processes). The model is laid out and each tensor input (the whole batch on
        every rank) split on the data axis before the graph compiles; the plan is ``graph.auto_plan``.
        """
        if not mode:
            self.auto_parallel = None
            self._changed()
            return
        if memory_cap is not None and (isinstance(memory_cap, bool) or not float(memory_cap) > 0):
            raise ValueError(f"enable_auto_parallel: memory_cap must be a positive byte count, got {memory_cap!r}")
        from flow import provided

        if provided.get("graph.auto_parallel") is None:
            # the hook is flow-dist's; without it a graph would silently run on one process
            raise FlowError(
                "graph config: auto-parallel needs the flow-dist plugin, which provides global tensors and "
                "the layout search; install the 'flow-dist' package (pip install flow-dist) and make sure its "
                "plugin is loaded (FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD)"
            )
        self.auto_parallel = {"memory_cap": memory_cap, "cluster": cluster}
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
        if name == FEATURE_PASSES["zero"]:
            return self.zero is not None
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
        if self.zero is not None:
            check_zero_available()

    def key(self) -> tuple:
        return (self._version,)

    def __repr__(self) -> str:
        parts = [
            f"gradient_accumulation_steps={self.gradient_accumulation_steps}",
            f"amp={self.amp}",
            f"zero={self.zero}",
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


def check_zero_available() -> None:
    from flow.registry import REGISTRY

    if "zero" not in REGISTRY.passes:
        raise FlowError(
            "graph config: ZeRO needs the graph pass 'zero', which the flow-dist plugin registers; install "
            "the 'flow-dist' package and make sure its plugin is loaded (FLOW_PLUGINS / "
            "FLOW_DISABLE_PLUGIN_AUTOLOAD)"
        )
