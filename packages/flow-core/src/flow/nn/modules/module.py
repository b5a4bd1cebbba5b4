"""``flow.nn.Module``: the base class of every layer and model, with PyTorch's semantics."""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any, Callable, Iterator

from flow import _dtype as D
from flow._device import device as _device
from flow._tensor import Tensor
from flow.autograd.grad_mode import no_grad
from flow.nn.modules.hooks import (
    _GLOBAL_HOOKS,
    _GLOBAL_PRE_HOOKS,
    BackwardHook,
    RemovableHandle,
    register_module_forward_hook,
    register_module_forward_pre_hook,
)
from flow.nn.modules.module_state import StateDictMixin
from flow.nn.parameter import Buffer, Parameter

__all__ = ["Module", "RemovableHandle", "register_module_forward_pre_hook", "register_module_forward_hook"]


def _addindent(s: str, n: int) -> str:
    lines = s.split("\n")
    if len(lines) == 1:
        return s
    return lines[0] + "\n" + "\n".join(" " * n + line for line in lines[1:])


def _check_name(kind: str, name, owner: "Module") -> None:
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
    if "." in name:
        raise KeyError(f'{kind} name can\'t contain ".", got: {name}')
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')


class Module(StateDictMixin):
    """Base class of neural-network modules; subclasses assign layers and parameters in ``__init__``.

    >>> class Net(flow.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = flow.nn.Linear(4, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    >>> Net()(flow.randn(3, 4)).shape
    flow.Size([3, 2])
    """

    training: bool
    _version: int = 1  # state-dict format version, stored in state_dict()._metadata

    def __init__(self, *args, **kwargs) -> None:
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments {args} {kwargs}")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = OrderedDict()
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_pre_hooks_with_kwargs"] = {}
        d["_forward_hooks"] = OrderedDict()
        d["_forward_hooks_with_kwargs"] = {}
        d["_forward_hooks_always_called"] = {}
        d["_backward_hooks"] = OrderedDict()
        d["_backward_pre_hooks"] = OrderedDict()

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # -- calling ---------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        # Hot path: no hooks anywhere -> straight to forward.
        if self._forward_pre_hooks or self._forward_hooks or _GLOBAL_PRE_HOOKS or _GLOBAL_HOOKS or self._has_bw_hooks():
            return self._call_with_hooks(args, kwargs)
        return self.forward(*args, **kwargs)

    def _call_with_hooks(self, args: tuple, kwargs: dict):
        for hid, hook in itertools.chain(_GLOBAL_PRE_HOOKS.items(), self._forward_pre_hooks.items()):
            if hid in self._forward_pre_hooks_with_kwargs:
                r = hook(self, args, kwargs)
                if r is not None:
                    if not (isinstance(r, tuple) and len(r) == 2):
                        raise RuntimeError(
                            f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {r}."
                        )
                    args, kwargs = r
            else:
                r = hook(self, args)
                if r is not None:
                    args = r if isinstance(r, tuple) else (r,)
        bw = None
        if self._has_bw_hooks():
            d = self.__dict__
            bw = BackwardHook(self, list(d["_backward_hooks"].values()), list(d["_backward_pre_hooks"].values()))
            args = bw.setup_input_hook(args)
        called = set()
        try:
            result = self.forward(*args, **kwargs)
            for hid, hook in itertools.chain(_GLOBAL_HOOKS.items(), self._forward_hooks.items()):
                called.add(hid)
                if hid in self._forward_hooks_with_kwargs:
                    r = hook(self, args, kwargs, result)
                else:
                    r = hook(self, args, result)
                if r is not None:
                    result = r
            if bw is not None:
                result = bw.setup_output_hook(result)
        except Exception:
            for hid, hook in self._forward_hooks.items():
                if hid in self._forward_hooks_always_called and hid not in called:
                    try:
                        if hid in self._forward_hooks_with_kwargs:
                            hook(self, args, kwargs, None)
                        else:
                            hook(self, args, None)
                    except Exception:
                        pass
            raise
        return result

    def register_forward_pre_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Run ``hook(module, args)`` (or ``hook(module, args, kwargs)``) before ``forward``.

        The hook may return new args (a tuple, or one value) or, with ``with_kwargs``, ``(args, kwargs)``.
        """
        h = RemovableHandle(self._forward_pre_hooks, self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[h.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[h.id] = True
        if prepend:
            self._forward_pre_hooks.move_to_end(h.id, last=False)
        return h

    def _has_bw_hooks(self) -> bool:
        d = self.__dict__  # .get: modules unpickled from before these hooks existed lack the dicts
        return bool(d.get("_backward_hooks") or d.get("_backward_pre_hooks"))

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(module, grad_input, grad_output)`` when the gradients of the inputs are computed.

        Both are tuples (None for inputs that are not tensors or need no gradient); a non-None return
        value replaces ``grad_input``.
        """
        h = RemovableHandle(self.__dict__.setdefault("_backward_hooks", OrderedDict()))
        self._backward_hooks[h.id] = hook
        if prepend:
            self._backward_hooks.move_to_end(h.id, last=False)
        return h

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """Run ``hook(module, grad_output)`` when the gradients of the outputs arrive, before those of
        the inputs are computed; a non-None return value replaces ``grad_output``."""
        h = RemovableHandle(self.__dict__.setdefault("_backward_pre_hooks", OrderedDict()))
        self._backward_pre_hooks[h.id] = hook
        if prepend:
            self._backward_pre_hooks.move_to_end(h.id, last=False)
        return h

    def register_forward_hook(
        self, hook: Callable, *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ) -> RemovableHandle:
        """Run ``hook(module, args, output)`` (or ``hook(module, args, kwargs, output)``) after ``forward``.

        A non-None return value replaces the output.
        """
        h = RemovableHandle(self._forward_hooks, self._forward_hooks_with_kwargs, self._forward_hooks_always_called)
        self._forward_hooks[h.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[h.id] = True
        if always_call:
            self._forward_hooks_always_called[h.id] = True
        if prepend:
            self._forward_hooks.move_to_end(h.id, last=False)
        return h

    # -- attribute registry ------------------------------------------------------------
    def __getattr__(self, name: str):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            s = d.get(store)
            if s is not None and name in s:
                return s[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        params = d.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_attr(name, keep="_parameters")
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' (flow.nn.Parameter or None expected)"
                )
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            if d.get("_modules") is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_attr(name, keep="_modules")
            d["_modules"][name] = value
        elif d.get("_modules") is not None and name in d["_modules"]:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' (flow.nn.Module or None expected)"
                )
            d["_modules"][name] = value
        elif isinstance(value, Buffer) or (d.get("_buffers") is not None and name in d["_buffers"]):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' (flow.Tensor or None expected)"
                )
            if isinstance(value, Buffer):
                persistent = value.__dict__.get("persistent", True)
                self._remove_attr(name, keep="_buffers")
            else:
                persistent = name not in self._non_persistent_buffers_set
            self.register_buffer(name, value, persistent)
        else:
            object.__setattr__(self, name, value)

    def _remove_attr(self, name: str, keep: str) -> None:
        d = self.__dict__
        d.pop(name, None)
        for store in ("_parameters", "_buffers", "_modules"):
            if store != keep:
                d[store].pop(name, None)
        if keep != "_buffers":
            d["_non_persistent_buffers_set"].discard(name)

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if name in d.get(store, ()):
                del d[store][name]
                d["_non_persistent_buffers_set"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        keys = list(super().__dir__()) + list(self._parameters) + list(self._buffers) + list(self._modules)
        return sorted(k for k in set(keys) if not k[0].isdigit())

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add a tensor that is state but not a parameter (e.g. running statistics).

        Persistent buffers are part of ``state_dict()``; non-persistent ones are not.
        """
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_name("buffer", name, self)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' (flow Tensor or None required)"
            )
        if isinstance(tensor, Buffer):
            tensor = tensor.detach()
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or None) under ``name``; same as assigning a Parameter attribute."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_name("parameter", name, self)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None:
            if not isinstance(param, Parameter):
                raise TypeError(
                    f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                    "(flow.nn.Parameter or None required)"
                )
            if param.grad_fn is not None:
                raise ValueError(
                    f"Cannot assign non-leaf Tensor to parameter '{name}'. Model parameters must be "
                    "created explicitly; to express '{name}' as a function of another Tensor, compute "
                    "the value in forward()"
                )
        self._parameters[name] = param

    def add_module(self, name: str, module: "Module | None") -> None:
        """Add a child module under ``name`` (reachable as an attribute)."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        _check_name("module", name, self)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """The submodule at a dotted path such as ``"encoder.layers.0"`` ("" is the module itself)."""
        mod = self
        if target == "":
            return mod
        for item in target.split("."):
            if not hasattr(mod, item):
                raise AttributeError(f"{mod._get_name()} has no attribute `{item}`")
            mod = getattr(mod, item)
            if not isinstance(mod, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return mod

    def get_parameter(self, target: str) -> Parameter:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if not hasattr(mod, name):
            raise AttributeError(f"{mod._get_name()} has no attribute `{name}`")
        p = getattr(mod, name)
        if not isinstance(p, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return p

    def get_buffer(self, target: str) -> Tensor:
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return mod._buffers[name]

    # -- iteration -------------------------------------------------------------------
    def named_modules(self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True):
        """Yield ``(dotted name, module)`` for this module and every descendant, depth first."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if self in memo:
                return
            memo.add(self)
        yield prefix, self
        for name, module in self._modules.items():
            if module is None:
                continue
            yield from module.named_modules(memo, prefix + ("." if prefix else "") + name, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        memo = set()
        for name, module in self._modules.items():
            if module is not None and module not in memo:
                memo.add(module)
                yield name, module

    def children(self) -> Iterator["Module"]:
        for _, m in self.named_children():
            yield m

    def _named_members(self, store: str, prefix: str, recurse: bool, remove_duplicate: bool):
        memo = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for mod_prefix, module in mods:
            for k, v in module.__dict__[store].items():
                if v is None or (remove_duplicate and v in memo):
                    continue
                if remove_duplicate:
                    memo.add(v)
                yield mod_prefix + ("." if mod_prefix else "") + k, v

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        """Yield ``(dotted name, parameter)``; a parameter shared by several modules is yielded once."""
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # -- modes and gradients -----------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Set training mode (``mode=False`` is evaluation mode) on this module and all descendants."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for m in self.children():
            m.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters (to None by default, else to zeros in place)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                g = p.grad.detach() if p.grad.grad_fn is not None else p.grad
                g.requires_grad = False
                with no_grad():
                    g.zero_()
                p.grad = g

    # -- conversion ------------------------------------------------------------------
    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> "Module":
        if recurse:
            for m in self.children():
                m._apply(fn)
        for p in self._parameters.values():
            if p is None:
                continue
            with no_grad():
                new = fn(p)
            if new is not p:
                p.data = new  # parameters keep their identity (optimizers hold references)
            if p.grad is not None:
                with no_grad():
                    g = fn(p.grad)
                if g is not p.grad:
                    p.grad = g
        for k, b in self._buffers.items():
            if b is not None:
                self._buffers[k] = fn(b)
        return self

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn`` on every submodule (children first) and then on this module; e.g. for init."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """Move and/or cast parameters and buffers: ``m.to("cuda")``, ``m.to(flow.float64)``, ``m.to(t)``.

        Only floating-point tensors change dtype; parameters are converted in place (same objects).
        """
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        kwargs.pop("non_blocking", None)
        kwargs.pop("memory_format", None)
        if kwargs:
            raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = a.device, a.dtype
            elif isinstance(a, D.dtype):
                dtype = a
            elif isinstance(a, (str, _device, int)) and not isinstance(a, bool):
                if isinstance(a, str) and a.replace("flow.", "").replace("torch.", "") in D._BY_NAME:
                    dtype = a
                else:
                    device = f"cuda:{a}" if isinstance(a, int) else a
            elif a is not None:
                raise TypeError(f"to(): unexpected argument {a!r}")
        if dtype is not None:
            dtype = D.as_dtype(dtype)
            if not dtype.is_floating_point:
                raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired dtype={dtype}")
        if device is not None and not isinstance(device, _device):
            device = _device(device)

        def convert(t: Tensor) -> Tensor:
            return t.to(device=device, dtype=dtype if t.is_floating_point() else None)

        return self._apply(convert)

    def to_global(self, placement=None, sbp=None) -> "Module":
        """Make every parameter and buffer global on ``placement`` with ``sbp`` (flow-dist; OneFlow's API)."""
        from flow import provided

        return provided.require("Module.to_global", "nn.Module.to_global")(self, placement, sbp)

    def share_memory(self) -> "Module":
        """Move every parameter, gradient and buffer into shared memory (``Tensor.share_memory_``), in
        place, so that processes forked afterwards update the same values (Hogwild training)."""
        return self._apply(lambda t: t.share_memory_())

    def cpu(self) -> "Module":
        return self._apply(lambda t: t.cpu())

    def cuda(self, device=None) -> "Module":
        return self._apply(lambda t: t.cuda(device))

    def type(self, dst_type) -> "Module":
        return self._apply(lambda t: t.type(dst_type))

    def _float_cast(self, dtype) -> "Module":
        return self._apply(lambda t: t.to(dtype) if t.is_floating_point() else t)

    def float(self) -> "Module":
        return self._float_cast(D.float32)

    def double(self) -> "Module":
        return self._float_cast(D.float64)

    def half(self) -> "Module":
        return self._float_cast(D.float16)

    def bfloat16(self) -> "Module":
        return self._float_cast(D.bfloat16)

    # -- repr ------------------------------------------------------------------------
    def _get_name(self) -> str:
        return type(self).__name__

    def extra_repr(self) -> str:
        """The layer's own settings for ``repr`` (override in subclasses, e.g. ``in_features=4``)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({k}): " + _addindent(repr(m), 2) for k, m in self._modules.items()]
        lines = extra_lines + child_lines
        s = self._get_name() + "("
        if lines:
            if len(extra_lines) == 1 and not child_lines:
                s += extra_lines[0]
            else:
                s += "\n  " + "\n  ".join(lines) + "\n"
        return s + ")"
