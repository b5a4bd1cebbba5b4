"""``flow.compile(fn)``: the function form of graph mode.

>>> @flow.compile
... def train_step(x, y):
...     opt.zero_grad()
...     loss = flow.nn.functional.mse_loss(model(x), y)
...     loss.backward()
...     opt.step()
...     return loss

The modules and optimizers ``fn`` uses are found in its closure, the globals it names, its bound
``self`` (and that object's attributes) and its arguments; their parameters, buffers and
optimizer states become state inputs shared with eager mode. Tensor arguments are graph inputs
(a new shape or dtype compiles a new specialisation); other arguments are constants of the
specialisation. Python side effects inside ``fn`` (printing, ``sched.step()``) run only while
tracing: step LR schedulers outside the compiled function.
"""

from __future__ import annotations

import functools
import types

from flow.graph.compiler import Runner, compile_step
from flow.graph.config import GraphConfig


class _Found:
    """What ``fn`` uses (modules, optimizers) and where it was found, to re-check cheaply on each call."""

    def __init__(self) -> None:
        self.modules: dict = {}
        self.optimizers: list = []
        self.watch: list = []  # (mapping or cell, key, object seen there)
        self.arg_ids: tuple = ()

    def valid(self, args, kwargs) -> bool:
        for where, key, obj in self.watch:
            if key is None:
                try:
                    if where.cell_contents is not obj:
                        return False
                except ValueError:
                    return False
            elif where.get(key, _MISSING) is not obj:
                return False
        return _arg_ids(args, kwargs) == self.arg_ids


_MISSING = object()


def _arg_ids(args, kwargs) -> tuple:
    from flow._tensor import Tensor

    return tuple(
        id(a) for a in (*args, *kwargs.values()) if not isinstance(a, (Tensor, int, float, str, bool, type(None)))
    )


def _discover(fn, args, kwargs) -> _Found:
    from flow.nn.modules.module import Module
    from flow.optim.optimizer import Optimizer

    found = _Found()
    modules: dict = found.modules
    optimizers: list = found.optimizers
    seen: set = set()

    def visit(name, obj, depth):
        if id(obj) in seen:
            return
        if isinstance(obj, Module):
            seen.add(id(obj))
            modules[name] = obj
        elif isinstance(obj, Optimizer):
            seen.add(id(obj))
            optimizers.append((name, obj))
        elif depth < 2 and isinstance(obj, (list, tuple)):
            seen.add(id(obj))
            for i, o in enumerate(obj):
                visit(f"{name}.{i}", o, depth + 1)
        elif depth < 2 and isinstance(obj, dict):
            seen.add(id(obj))
            for k, o in obj.items():
                if isinstance(k, str):
                    visit(f"{name}.{k}", o, depth + 1)
        elif (
            depth < 1 and hasattr(obj, "__dict__") and not isinstance(obj, (type, types.ModuleType, types.FunctionType))
        ):
            seen.add(id(obj))
            for k, o in vars(obj).items():
                visit(f"{name}.{k}", o, depth + 1)

    def visit_code(f, depth=0):
        code = getattr(f, "__code__", None)
        if code is None or depth > 2:
            return
        closure = getattr(f, "__closure__", None) or ()
        for name, cell in zip(code.co_freevars, closure):
            try:
                val = cell.cell_contents
            except ValueError:
                continue
            found.watch.append((cell, None, val))
            visit(name, val, 0)
            if isinstance(val, types.FunctionType):
                visit_code(val, depth + 1)
        glb = getattr(f, "__globals__", {})
        codes = [code]
        while codes:
            c = codes.pop()
            for name in c.co_names:
                if name in glb:
                    val = glb[name]
                    found.watch.append((glb, name, val))
                    visit(name, val, 0)
                    if isinstance(val, types.FunctionType) and val is not f:
                        visit_code(val, depth + 1)
            codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))

    target = fn
    if isinstance(fn, functools.partial):
        for i, a in enumerate(fn.args):
            visit(f"partial{i}", a, 0)
        target = fn.func
    self_obj = getattr(target, "__self__", None)
    if self_obj is not None:
        visit("self", self_obj, 0)
        target = target.__func__
    visit_code(target)
    for i, a in enumerate(args):
        visit(f"arg{i}", a, 1)
    for k, a in kwargs.items():
        visit(k, a, 1)
    found.arg_ids = _arg_ids(args, kwargs)
    return found


class CompiledFunction(Runner):
    """A function compiled with graph mode; call it like the function."""

    def __init__(self, fn, config: GraphConfig | None = None, name: str | None = None) -> None:
        self._init_runner(name or getattr(fn, "__name__", "compiled"), config or GraphConfig())
        self.__dict__["fn"] = fn
        self.__dict__["_found"] = None
        functools.update_wrapper(self, fn, updated=())

    def _modules(self) -> dict:
        return self._found.modules if self._found is not None else {}

    def _optimizers(self) -> list:
        return self._found.optimizers if self._found is not None else []

    def _compile(self, args, kwargs):
        fn = self.fn
        target = fn.func if isinstance(fn, functools.partial) else fn
        code = getattr(getattr(target, "__func__", target), "__code__", None)
        return compile_step(
            fn,
            args,
            kwargs,
            name=self._name,
            config=self.config,
            entry_codes=(code,) if code is not None else (),
            modules=self._modules(),
            optimizers=self._optimizers(),
            debug=self._debug_level,
        )

    def __call__(self, *args, **kwargs):
        from flow.graph.tracer import active_tracer

        if active_tracer() is not None:  # called while another function is traced: inline it
            return self.fn(*args, **kwargs)
        if len(args) == 1 and not kwargs and hasattr(args[0], "__next__") and not hasattr(args[0], "shape"):
            args, kwargs = self._from_iterator(args[0])
        elif self._pending is not None:
            loaded = self._take_prefetched(args, kwargs)
            if loaded is not None:
                args, kwargs = loaded
        found = self._found
        if found is None or not found.valid(args, kwargs):
            self.__dict__["_found"] = _discover(self.fn, args, kwargs)
        n = self.config.gradient_accumulation_steps
        if n > 1:
            from flow.graph.accumulate import run_accumulated

            return run_accumulated(self, args, kwargs, n)
        return self._run(args, kwargs)

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        bound = self.__dict__.setdefault("_bound", {})
        c = bound.get(id(obj))
        if c is None:
            c = bound[id(obj)] = CompiledFunction(types.MethodType(self.fn, obj), self.config, self._name)
        return c

    def __repr__(self) -> str:
        from flow.graph.debug import format_ir, format_log

        s = f"<flow.compile {self._name}: {self.cache_size} specialisation(s)>"
        if self._latest is not None:
            log = format_log(self._name, self._latest.log, self._latest, verbose=self._debug_level >= 2)
            s += "\n" + log + "\n" + format_ir(self._latest.ir)
        return s


_MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def compile(  # noqa: A001
    fn=None,
    *,
    config: GraphConfig | None = None,
    name: str | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    mode: str | None = None,
    backend=None,
    options: dict | None = None,
    disable: bool = False,
):
    """Compile ``fn`` with graph mode (also usable as ``@flow.compile`` or ``@flow.compile(config=...)``).

    A function gives a :class:`CompiledFunction`; a ``flow.nn.Module`` gives an
    :class:`~flow.graph.compile_module.OptimizedModule` whose forward and backward are compiled.
    ``torch.compile``'s keywords are accepted: ``disable=True`` returns ``fn`` itself; ``fullgraph``
    (graph mode always compiles the whole function), ``dynamic`` (shapes are always specialised),
    ``mode``, ``backend`` and ``options`` have no meaning in flow and are checked, then ignored.
    """
    if mode not in _MODES:
        raise ValueError(f"flow.compile: unknown mode {mode!r}; expected one of {', '.join(map(repr, _MODES))}")
    if mode is not None and options is not None:
        raise ValueError("flow.compile: either mode or options can be given, not both")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"flow.compile: options must be a dict, got {type(options).__name__}")

    def make(f):
        from flow.nn.modules.module import Module

        if disable:
            return f
        if isinstance(f, Module):
            from flow.graph.compile_module import OptimizedModule

            return OptimizedModule(f, config, name)
        if not callable(f):
            raise TypeError(f"flow.compile: expected a function or a flow.nn.Module, got {type(f).__name__}")
        return CompiledFunction(f, config, name)

    if fn is None:
        return make
    return make(fn)
