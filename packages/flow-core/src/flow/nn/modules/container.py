"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict."""

from __future__ import annotations

import operator
from collections import OrderedDict
from itertools import islice
from typing import Iterable, Iterator, Mapping

from flow._tensor import Tensor
from flow.nn.modules.module import Module, _addindent
from flow.nn.parameter import Parameter

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


def _index(idx, n: int, kind: str) -> int:
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for a {kind} of length {n}")
    return idx % n


class Sequential(Module):
    """Modules run one after another: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 2))``.

    Also accepts one ``OrderedDict`` of named modules. Supports indexing, slicing, ``len``, iteration
    and ``append``.
    """

    def __init__(self, *args) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        i = _index(idx, len(self), "Sequential")
        return next(islice(self._modules.values(), i, None))

    def __setitem__(self, idx, module: Module) -> None:
        key = list(self._modules)[_index(idx, len(self), "Sequential")]
        setattr(self, key, module)

    def __delitem__(self, idx) -> None:
        keys = list(self._modules)
        if isinstance(idx, slice):
            for k in keys[idx]:
                del self._modules[k]
        else:
            del self._modules[keys[_index(idx, len(self), "Sequential")]]
        # keep numeric keys consecutive, as torch does
        items = list(self._modules.items())
        self._modules.clear()
        for i, (k, m) in enumerate(items):
            self._modules[str(i) if k.isdigit() else k] = m

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __add__(self, other: "Sequential") -> "Sequential":
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, got {type(other).__name__}")
        return Sequential(*self, *other)

    def append(self, module: Module) -> "Sequential":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "Sequential":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> "Sequential":
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type Module, got {type(module).__name__}")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        if index < 0:
            index += n
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m
        return self

    def pop(self, key) -> Module:
        m = self[key]
        del self[key]
        return m

    def forward(self, input):
        for module in self._modules.values():
            input = module(input)
        return input


class ModuleList(Module):
    """A list of modules whose parameters are registered: ``ModuleList([Linear(4, 4) for _ in range(3)])``."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self), "ModuleList"))]

    def __setitem__(self, idx, module: Module) -> None:
        setattr(self, str(_index(idx, len(self), "ModuleList")), module)

    def __delitem__(self, idx) -> None:
        if isinstance(idx, slice):
            for k in list(self._modules)[idx]:
                del self._modules[k]
        else:
            del self._modules[str(_index(idx, len(self), "ModuleList"))]
        mods = list(self._modules.values())
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)

    def __add__(self, other: Iterable[Module]) -> "ModuleList":
        return ModuleList(list(self) + list(other))

    def append(self, module: Module) -> "ModuleList":
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        if isinstance(modules, Module) and not isinstance(modules, (ModuleList, Sequential)):
            raise TypeError("ModuleList.extend should be called with an iterable of modules, got a Module")
        for m in list(modules):
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def pop(self, key=-1) -> Module:
        m = self[key]
        del self[key]
        return m

    def __repr__(self) -> str:
        if not self._modules:
            return "ModuleList()"
        # collapse runs of identical reprs, as torch does: (0-2): 3 x Linear(...)
        reprs = [repr(m) for m in self]
        lines, start = [], 0
        for i in range(1, len(reprs) + 1):
            if i == len(reprs) or reprs[i] != reprs[start]:
                r = _addindent(reprs[start], 2)
                if i - start == 1:
                    lines.append(f"({start}): {r}")
                else:
                    lines.append(f"({start}-{i - 1}): {i - start} x {r}")
                start = i
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"


class ModuleDict(Module):
    """An ordered dict of modules whose parameters are registered."""

    def __init__(self, modules: Mapping[str, Module] | Iterable | None = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key: str) -> Module:
        m = self[key]
        del self[key]
        return m

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules) -> None:
        items = modules.items() if isinstance(modules, (Mapping, ModuleDict)) else modules
        for j, kv in enumerate(items):
            if not isinstance(kv, (tuple, list)) or len(kv) != 2:
                raise ValueError(f"ModuleDict update sequence element #{j} should be a (key, module) pair")
            self[kv[0]] = kv[1]


def _as_param(value):
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value, requires_grad=value.dtype.is_floating_point)
    return value


class ParameterList(Module):
    """A list of parameters registered on the module (plain tensors are wrapped in Parameter)."""

    def __init__(self, values: Iterable | None = None) -> None:
        super().__init__()
        self._size = 0
        if values is not None:
            self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList([self[i] for i in range(len(self))[idx]])
        return getattr(self, str(_index(idx, len(self), "ParameterList")))

    def __setitem__(self, idx, value) -> None:
        setattr(self, str(_index(idx, len(self), "ParameterList")), _as_param(value))

    def __len__(self) -> int:
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values) -> "ParameterList":
        return self.extend(values)

    def append(self, value) -> "ParameterList":
        self._size += 1
        setattr(self, str(self._size - 1), _as_param(value))
        return self

    def extend(self, values) -> "ParameterList":
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        lines = []
        for i, p in enumerate(self):
            if isinstance(p, Tensor):
                kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
                lines.append(f"({i}): {kind} containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]")
            else:
                lines.append(f"({i}): Object of type: {type(p).__name__}")
        return "\n".join(lines)


class ParameterDict(Module):
    """An ordered dict of parameters registered on the module."""

    def __init__(self, parameters=None) -> None:
        super().__init__()
        self._keys: dict = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str):
        return getattr(self, key)

    def __setitem__(self, key: str, value) -> None:
        self._keys[key] = None
        setattr(self, key, _as_param(value))

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __contains__(self, key: str) -> bool:
        return key in self._keys

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def pop(self, key: str):
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        for k in list(self._keys):
            del self[k]

    def update(self, parameters) -> None:
        items = parameters.items() if isinstance(parameters, (Mapping, ParameterDict)) else parameters
        for k, v in items:
            self[k] = v

    def extra_repr(self) -> str:
        lines = []
        for k, p in self.items():
            kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
            lines.append(f"({k}): {kind} containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]")
        return "\n".join(lines)
