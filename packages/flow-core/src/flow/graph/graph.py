"""``flow.nn.Graph``: OneFlow's static-graph API.

>>> class TrainGraph(flow.nn.Graph):
...     def __init__(self, model, opt, sched):
...         super().__init__()
...         self.model = model                      # a graph block
...         self.add_optimizer(opt, lr_sch=sched)
...     def build(self, x, y):
...         loss = flow.nn.functional.cross_entropy(self.model(x), y)
...         loss.backward()
...         return loss
>>> g = TrainGraph(model, opt, sched)
>>> loss = g(x, y)   # one compiled training step: forward, backward, optimizer update, sched.step()

Modules assigned in ``__init__`` become blocks (``g.model`` is a :class:`Block` forwarding to the
module, with ``activation_checkpointing`` and ``stage_id`` settings); their parameters, buffers
and the optimizers' states are the graph's state, shared with eager mode. After ``build`` the
graph steps every added optimizer (the update is part of the compiled step) and, after each run,
its LR scheduler.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from flow.errors import FlowError
from flow.graph.compiler import Runner, compile_step
from flow.graph.config import BlockConfig, GraphConfig
from flow.nn.modules.module import Module


class Block:
    """A module inside a graph: calls and attribute access go to the module; ``activation_checkpointing``
    and ``stage_id`` (also under ``.config``) configure how the graph compiles it."""

    def __init__(self, name: str, module: Module, config: BlockConfig, graph_config: GraphConfig) -> None:
        d = self.__dict__
        d["_name"] = name
        d["_module"] = module
        d["_config"] = config
        d["_graph_config"] = graph_config
        d["_call"] = None  # what Graph.substitute_block put in place of the module's call

    @property
    def config(self) -> BlockConfig:
        return self._config

    @property
    def module(self) -> Module:
        return self._module

    @property
    def name(self) -> str:
        return self._name

    @property
    def activation_checkpointing(self) -> bool:
        return self._config.activation_checkpointing

    @property
    def stage_id(self):
        return self._config.stage_id

    @property
    def placement(self):
        return self._config.placement

    def set_stage(self, stage_id: int, placement=None) -> "Block":
        """Make this block pipeline stage ``stage_id`` on ``placement`` (see ``BlockConfig.set_stage``)."""
        self._config.set_stage(stage_id, placement)
        return self

    def to(self, *args, **kwargs):
        """``block.to(flow.nn.graph.GraphModule)`` is the block itself (OneFlow's API); anything else
        is the module's ``to`` (a device or dtype)."""
        if len(args) == 1 and not kwargs and args[0] is Block:
            return self
        if len(args) == 1 and not kwargs and isinstance(args[0], type):
            raise TypeError(f"block.to: a graph block converts to flow.nn.graph.GraphModule only, not {args[0]!r}")
        return self._module.to(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        call = self._call
        return self._module(*args, **kwargs) if call is None else call(*args, **kwargs)

    def __getattr__(self, name: str):
        attr = getattr(self._module, name)
        if isinstance(attr, Module):
            sub = f"{self._name}.{name}"
            cfg = self._graph_config.blocks.get(sub)
            if cfg is None:
                cfg = self._graph_config.blocks[sub] = BlockConfig(self._graph_config)
            return Block(sub, attr, cfg, self._graph_config)
        return attr

    def __setattr__(self, name: str, value) -> None:
        if name in ("activation_checkpointing", "stage_id"):
            setattr(self._config, name, value)
        else:
            setattr(self._module, name, value)

    def __repr__(self) -> str:
        return f"(BLOCK:{self._name}:{type(self._module).__name__}, {self._config})"


class Graph(Runner):
    """Subclass it, assign modules in ``__init__``, add optimizers, write ``build``; call it to run a step."""

    def __init__(self) -> None:
        self._init_runner(type(self).__name__, GraphConfig())
        d = self.__dict__
        d["_blocks"] = OrderedDict()
        d["_opts"] = []  # (optimizer, lr scheduler or None)
        d["_grad_scaler"] = None

    def _checked(self) -> None:
        if "_blocks" not in self.__dict__:
            raise FlowError(f"{type(self).__name__}.__init__ must call super().__init__() before assigning attributes")

    def __setattr__(self, name: str, value) -> None:
        self._checked()
        if isinstance(value, Module):
            cfg = self.config.blocks.get(name)
            if cfg is None:
                cfg = self.config.blocks[name] = BlockConfig(self.config)
            self._blocks[name] = Block(name, value, cfg, self.config)
            self.config._changed()
            return
        if isinstance(value, Block):
            self._blocks[name] = value
            return
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        blocks = self.__dict__.get("_blocks")
        if blocks is not None and name in blocks:
            return blocks[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def add_optimizer(self, optim, *, lr_sch=None, is_sparse: bool = False) -> None:
        """Step ``optim`` after ``build`` in every compiled step; call ``lr_sch.step()`` after each run."""
        self._checked()
        from flow.optim.optimizer import Optimizer

        if not isinstance(optim, Optimizer):
            raise TypeError(f"add_optimizer expects a flow.optim.Optimizer, got {type(optim).__name__}")
        if lr_sch is not None and getattr(lr_sch, "optimizer", optim) is not optim:
            raise ValueError("add_optimizer: lr_sch schedules a different optimizer")
        self._opts.append((optim, lr_sch))
        self.config._changed()

    def set_grad_scaler(self, grad_scaler) -> None:
        """Loss scaling in the compiled step (OneFlow's API): ``flow.amp.GradScaler`` or ``StaticGradScaler``.

        ``build`` still calls ``loss.backward()``; the compiled step starts backward from the scale, unscales
        the gradients and checks them for inf/nan, skips the optimizer updates of a step that has any and
        updates the scale, all as ops of the graph; ``grad_scaler.get_scale()`` reads the current scale.
        The scaler provides ``_trace_begin(tracer)`` (a seed transform) and ``_trace_step(tracer, optimizers)``
        (which steps the optimizers)."""
        self._checked()
        if not (hasattr(grad_scaler, "_trace_begin") and hasattr(grad_scaler, "_trace_step")):
            raise TypeError(
                f"set_grad_scaler expects a flow.amp.GradScaler or StaticGradScaler, got {type(grad_scaler).__name__}"
            )
        self.__dict__["_grad_scaler"] = grad_scaler
        self.config._changed()

    def build(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define build(self, *inputs)")

    # -- public accessors (for plugins that drive a graph: flow-dist's pipeline) -----------------
    @property
    def name(self) -> str:
        """The graph's name (its class name), as in OneFlow; used in logs and error messages."""
        return self._name

    def named_blocks(self) -> Iterator[tuple[str, Block]]:
        """The top-level blocks in assignment order, as ``(attribute name, Block)``."""
        return iter(list(self._blocks.items()))

    def optimizers(self) -> list:
        """The optimizers added with :meth:`add_optimizer`, in order."""
        return [o for o, _ in self._opts]

    def lr_schedulers(self) -> list:
        """The LR schedulers given to :meth:`add_optimizer` (None where an optimizer has none)."""
        return [s for _, s in self._opts]

    def get_grad_scaler(self):
        """The scaler given to :meth:`set_grad_scaler`, or None."""
        return self._grad_scaler

    @contextmanager
    def substitute_block(self, name: str, call: Callable) -> Iterator[Block]:
        """Within the ``with`` block, ``self.<name>(...)`` in ``build`` calls ``call(...)`` instead of
        the block's module (attribute access still reaches the module). A plugin traces part of
        ``build`` this way, e.g. one pipeline stage: ``call`` runs the stage's module on received
        activations. Substitutions do not nest on one block; the module's call is restored on exit."""
        block = self._blocks.get(name)
        if block is None:
            raise KeyError(f"graph '{self._name}' has no block '{name}'; blocks: {list(self._blocks)}")
        if not callable(call):
            raise TypeError(f"substitute_block: call must be callable, got {type(call).__name__}")
        if block._call is not None:
            raise FlowError(f"graph '{self._name}': block '{name}' is already substituted")
        block.__dict__["_call"] = call
        try:
            yield block
        finally:
            block.__dict__["_call"] = None

    # -- what is traced -------------------------------------------------------------------------
    def _modules(self) -> dict:
        return {name: b._module for name, b in self._blocks.items()}

    def _optimizers(self) -> list:
        return [(f"optimizer{i}" if len(self._opts) > 1 else "optimizer", o) for i, (o, _) in enumerate(self._opts)]

    def _state_key(self) -> tuple:
        sc = self._grad_scaler
        return super()._state_key() + ((type(sc).__name__, id(sc), sc.is_enabled()) if sc is not None else None,)

    @property
    def training(self) -> bool:
        """A graph with an optimizer is a training graph."""
        return bool(self._opts)

    def _compile(self, args, kwargs):
        build = type(self).build
        if build is Graph.build:
            raise NotImplementedError(f"{type(self).__name__} must define build(self, *inputs)")
        optimizers = self._optimizers()
        scaler = self._grad_scaler if optimizers else None
        if scaler is not None and not scaler.is_enabled():
            scaler = None
        fn = self.build

        def after(tracer):
            if scaler is not None:
                scaler._trace_step(tracer, optimizers)
                return
            for _, opt in optimizers:
                opt.step()

        if scaler is not None:
            from flow.autograd import seed_transform
            from flow.graph.tracer import active_tracer

            def fn(*args, **kwargs):
                with seed_transform(scaler._trace_begin(active_tracer())):
                    return self.build(*args, **kwargs)

        return compile_step(
            fn,
            args,
            kwargs,
            name=self._name,
            config=self.config,
            entry_codes=(build.__code__,),
            modules=self._modules(),
            optimizers=optimizers,
            after=after if optimizers else None,
            debug=self._debug_level,
            grad_enabled=True if optimizers else None,
        )

    def __call__(self, *args, **kwargs):
        from flow.graph.tracer import active_tracer

        if active_tracer() is not None:  # called from inside another graph's build: inline it
            return self.build(*args, **kwargs)
        if len(args) == 1 and not kwargs and hasattr(args[0], "__next__") and not hasattr(args[0], "shape"):
            args, kwargs = self._from_iterator(args[0])
        elif self._pending is not None:
            loaded = self._take_prefetched(args, kwargs)
            if loaded is not None:
                args, kwargs = loaded
        if self.config.auto_parallel is not None:
            args, kwargs = self._auto_parallel(args, kwargs)
        out = self._run_pipeline(args, kwargs)
        if out is NotImplemented:
            n = self.config.gradient_accumulation_steps
            if n > 1:
                from flow.graph.accumulate import run_accumulated

                out = run_accumulated(self, args, kwargs, n)
            else:
                out = self._run(args, kwargs)
        for _, sch in self._opts:
            if sch is not None:
                sch.step()
        return out

    def _run_pipeline(self, args: tuple, kwargs: dict):
        """A graph whose block has a pipeline stage (``set_stage``) runs as a pipeline through the
        plugin hook ``graph.pipeline`` (flow-dist, with more than one rank); NotImplemented when no
        block has a stage, no plugin provides the hook, or the hook declines (one rank)."""
        if not any(b.config.stage_id is not None for b in self._blocks.values()):
            return NotImplemented
        from flow import provided

        hook = provided.get("graph.pipeline")
        return NotImplemented if hook is None else hook(self, args, kwargs)

    def _auto_parallel(self, args: tuple, kwargs: dict):
        """The plugin hook that lays the model out (on the first call) and the inputs out (every call)."""
        from flow import provided

        hook = provided.require("graph.auto_parallel", "graph.config.enable_auto_parallel")
        args, kwargs = hook(self, args, kwargs)
        # the hook may have replaced submodules (a tensor-parallel attention): list the modules again
        self.__dict__.pop("_mods", None)
        return args, kwargs

    def __repr__(self) -> str:
        L = [f"({type(self).__name__}:nn.Graph)"]
        for b in self._blocks.values():
            L.append(f"  {b!r}")
        for opt, sch in self._opts:
            L.append(f"  (OPTIMIZER:{type(opt).__name__}{', LR_SCHEDULER:' + type(sch).__name__ if sch else ''})")
        L.append(f"  {self.config!r}")
        if self._latest is None:
            L.append("  (not compiled yet: call the graph once)")
        else:
            from flow.graph.debug import format_ir, format_log

            log = format_log(self._name, self._latest.log, self._latest, verbose=self._debug_level >= 2)
            L.append("  " + log.replace("\n", "\n  "))
            L.append("  " + format_ir(self._latest.ir).replace("\n", "\n  "))
        return "\n".join(L)
