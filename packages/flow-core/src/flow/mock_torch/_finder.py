"""The machinery of :mod:`flow.mock_torch`: a meta-path finder that answers ``import torch...`` with flow.

``import torch.X.Y`` is answered with a :class:`TorchModule` that stands for flow's module ``flow.X.Y``
(or the module :data:`MODULE_TABLE` names where the paths differ). A ``TorchModule`` forwards every
attribute to its flow module, so ``torch.nn.Linear is flow.nn.Linear`` and ``torch.Tensor is
flow.Tensor``; submodules reached as attributes (``torch.nn.functional``) are ``TorchModule`` objects
too. A name flow lacks raises :class:`UnsupportedTorchAPIError` (an ``AttributeError``, so
``hasattr`` answers False and ``getattr(torch, name, default)`` works) and is recorded for the
``--report`` summary; an import of a module flow lacks raises ``ModuleNotFoundError`` and is
recorded the same way.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import types
from typing import Any

from flow.errors import FeatureNotInstalledError, FlowError

__all__ = ["MODULE_TABLE", "TorchModule", "TorchFinder", "UnsupportedTorchAPIError", "missing_names", "clear_missing"]

#: torch module paths whose flow module is not simply ``flow`` + the same path
MODULE_TABLE: dict[str, str] = {
    "torch.random": "flow._random",
    "torch.functional": "flow",  # torch.functional holds functions (einsum, split, ...) flow keeps at top level
    "torch.nn.modules.batchnorm": "flow.nn.modules.normalization",
    "torch.nn.modules.instancenorm": "flow.nn.modules.normalization",
}


class UnsupportedTorchAPIError(FlowError, AttributeError):
    """A name a PyTorch script used (``torch.X.name``) that flow does not have yet."""

    def __init__(self, name: str, detail: str = "") -> None:
        self.torch_name = name
        super().__init__(f"{name} is not supported by flow yet" + (f" ({detail})" if detail else ""))


# torch name -> "file:line" of the first use; the lock because DataLoader threads import too
_missing: dict[str, str] = {}
_lock = threading.Lock()


def _where() -> str:
    """file:line of the user code that asked, skipping this module and the import system."""
    f = sys._getframe(2)
    here = os.path.dirname(__file__)
    while f is not None:
        fn = f.f_code.co_filename
        if not (fn.startswith(here) or fn.startswith("<frozen importlib")):
            return f"{fn}:{f.f_lineno}"
        f = f.f_back
    return "?"


def record_missing(name: str) -> None:
    """Note that the script asked for ``name`` (a torch name flow lacks), with where it did first."""
    with _lock:
        if name not in _missing:
            _missing[name] = _where()


def missing_names() -> dict[str, str]:
    """Every torch name this process asked for that flow lacks: ``{name: "file:line" of first use}``."""
    with _lock:
        return dict(_missing)


def clear_missing() -> None:
    """Forget the recorded missing names."""
    with _lock:
        _missing.clear()


def _flow_module_name(torch_name: str) -> str:
    if torch_name in MODULE_TABLE:
        return MODULE_TABLE[torch_name]
    return "flow" + torch_name[len("torch") :]


def _is_flow_module(obj: Any) -> bool:
    # flow and its plugins (flow_amp, flow_dist, ...) are mocked; numpy or math reached from them are not
    return isinstance(obj, types.ModuleType) and obj.__name__.split(".")[0].startswith("flow")


class TorchModule(types.ModuleType):
    """The module ``torch.X`` stands for while mocked: every attribute is its flow module's."""

    def __init__(self, torch_name: str, target: types.ModuleType) -> None:
        super().__init__(torch_name, target.__doc__)
        # object.__setattr__: our own __setattr__ would forward these to the flow module
        object.__setattr__(self, "_flow_target", target)
        object.__setattr__(self, "__path__", [])  # a package, so `import torch.X.Y` asks the finders
        for attr in ("__file__", "__version__"):
            if hasattr(target, attr):
                object.__setattr__(self, attr, getattr(target, attr))

    def __getattr__(self, name: str) -> Any:
        full = f"{self.__name__}.{name}"
        if full in MODULE_TABLE:
            return _proxy(full)
        target = object.__getattribute__(self, "_flow_target")
        if name == "__all__":
            # `from torch import *`: flow's public names at the time of the import (this module's own
            # __dict__ holds none of them, so the default rule would import nothing)
            names = getattr(target, "__all__", None)
            return list(names) if names is not None else [n for n in vars(target) if not n.startswith("_")]
        try:
            value = getattr(target, name)
        except AttributeError as e:
            if name.startswith("__") and name.endswith("__"):
                # the import system, pickle, inspect, doctest ... probe dunders: a miss is no gap in flow
                raise AttributeError(f"module '{self.__name__}' has no attribute '{name}'") from None
            record_missing(full)
            # a plugin-provided name says which package to install: keep that advice
            detail = str(e) if isinstance(e, FeatureNotInstalledError) else ""
            raise UnsupportedTorchAPIError(full, detail) from None
        if _is_flow_module(value):
            return _proxy(full, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        # the import system sets __spec__, __loader__ and child modules on the parent: those stay
        # here; a script's settings (torch.backends.cudnn.benchmark = True) reach flow's module
        if isinstance(value, TorchModule) or (name.startswith("__") and name.endswith("__")):
            object.__setattr__(self, name, value)
        else:
            setattr(object.__getattribute__(self, "_flow_target"), name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(object.__getattribute__(self, "_flow_target"))) | set(self.__dict__))

    def __repr__(self) -> str:
        target = object.__getattribute__(self, "_flow_target")
        return f"<module '{self.__name__}' (flow.mock_torch: {target.__name__})>"


_proxies: dict[str, TorchModule] = {}


def _proxy(torch_name: str, target: types.ModuleType | None = None) -> TorchModule:
    """The (one) TorchModule for ``torch_name``; imports its flow module when ``target`` is not given."""
    mod = _proxies.get(torch_name)
    if mod is None:
        if target is None:
            target = _import_target(torch_name)
        mod = TorchModule(torch_name, target)
        _proxies[torch_name] = mod
    if is_installed():
        # attribute access may come before any import statement: keep sys.modules as torch would have it
        sys.modules.setdefault(torch_name, mod)
    return mod


def _import_target(torch_name: str) -> types.ModuleType:
    flow_name = _flow_module_name(torch_name)
    try:
        return importlib.import_module(flow_name)
    except ModuleNotFoundError as e:
        if e.name is None or not flow_name.startswith(e.name):
            raise  # flow's module exists but something it imports does not: not a torch gap
    # not a module of its own: a module-valued attribute (a plugin's `flow.cuda`, say)
    parent, _, leaf = torch_name.rpartition(".")
    if parent:
        value = getattr(_proxy(parent), leaf, None)
        if isinstance(value, TorchModule):
            return object.__getattribute__(value, "_flow_target")
    record_missing(torch_name)
    raise ModuleNotFoundError(f"{torch_name} is not supported by flow yet", name=torch_name)


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _proxy(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass  # the flow module behind it is already imported


class TorchFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path`` while mocked: ``torch`` and ``torch.*`` come from flow."""

    _loader = _Loader()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torch" and not fullname.startswith("torch."):
            return None
        if fullname in _proxies:
            return importlib.machinery.ModuleSpec(fullname, self._loader, is_package=True)
        _proxy(fullname)  # raises ModuleNotFoundError naming the torch module flow lacks
        return importlib.machinery.ModuleSpec(fullname, self._loader, is_package=True)


def is_installed() -> bool:
    """True while the finder is on ``sys.meta_path``."""
    return any(isinstance(f, TorchFinder) for f in sys.meta_path)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once) and drop every ``torch`` module imported so far."""
    if not is_installed():
        sys.meta_path.insert(0, TorchFinder())
    for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
        if not isinstance(sys.modules[name], TorchModule):
            del sys.modules[name]


def uninstall() -> None:
    """Take the finder off ``sys.meta_path`` and drop the mocked modules from ``sys.modules``."""
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TorchFinder)]
    for name in [n for n in sys.modules if n == "torch" or n.startswith("torch.")]:
        if isinstance(sys.modules[name], TorchModule):
            del sys.modules[name]
