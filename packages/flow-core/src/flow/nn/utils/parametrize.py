"""Parametrizations of module tensors, as ``torch.nn.utils.parametrize``.

``register_parametrization(module, "weight", p)`` moves the tensor to
``module.parametrizations.weight.original`` (or ``original0``, ``original1``, ... when
``p.right_inverse`` returns a tuple) and turns ``module.weight`` into a property that evaluates
``p(original)`` on every access. The module's class is swapped for a subclass holding that property
(``ParametrizedLinear`` ...), so the state dict keys are torch's and torch checkpoints load.
"""

from __future__ import annotations

from flow._tensor import Tensor
from flow.autograd.grad_mode import no_grad
from flow.nn.modules.container import ModuleDict, ModuleList
from flow.nn.modules.module import Module
from flow.nn.parameter import Parameter

__all__ = ["register_parametrization", "remove_parametrizations", "is_parametrized", "ParametrizationList"]


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and the ``original`` tensor(s) they act on."""

    def __init__(self, modules: list, original: Tensor, unsafe: bool = False) -> None:
        super().__init__(modules)
        self.unsafe = unsafe
        new = original
        with no_grad():
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    new = m.right_inverse(new)
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if not unsafe and (new.dtype != original.dtype or tuple(new.shape) != tuple(original.shape)):
                raise ValueError(
                    "When `right_inverse` outputs one tensor, it may not change the dtype or shape of the "
                    f"original: {original.dtype}{tuple(original.shape)} became {new.dtype}{tuple(new.shape)}"
                )
            # keep the original object (an optimizer may hold it); only its value changes
            if new is not original:
                with no_grad():
                    original.data = new.detach().clone()
            self._register_original("original", original)
        else:
            for i, t in enumerate(new):
                if not isinstance(t, Tensor):
                    raise ValueError(f"'right_inverse' must return a Tensor or a sequence of Tensors, got {type(t)}")
                self._register_original(f"original{i}", t, original.requires_grad)
        if not unsafe:
            z = self()
            if not isinstance(z, Tensor):
                raise ValueError(f"A parametrization must return a tensor, got {type(z).__name__}")
            if z.dtype != original.dtype or tuple(z.shape) != tuple(original.shape):
                raise ValueError(
                    "Registering a parametrization may not change the dtype or shape of the tensor: "
                    f"{original.dtype}{tuple(original.shape)} became {z.dtype}{tuple(z.shape)}; pass unsafe=True"
                )

    def _register_original(self, name: str, t: Tensor, requires_grad: bool | None = None) -> None:
        if isinstance(t, Parameter):
            self.register_parameter(name, t)
        elif requires_grad or (requires_grad is None and t.requires_grad):
            self.register_parameter(name, Parameter(t.detach().clone()))
        else:
            self.register_buffer(name, t.detach().clone())

    def right_inverse(self, value: Tensor) -> None:
        """Set the original tensor(s) so that the parametrized value becomes ``value``."""
        with no_grad():
            for m in reversed(list(self)):
                if hasattr(m, "right_inverse"):
                    value = m.right_inverse(value)
            if self.is_tensor:
                self.original.copy_(value)
            else:
                for i, t in enumerate(value):
                    getattr(self, f"original{i}").copy_(t)

    def forward(self) -> Tensor:
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for m in list(self)[1:]:
            x = m(x)
        return x


def _inject_class(module: Module) -> None:
    cls = module.__class__
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {"_parametrized_base": cls})


def _inject_property(module: Module, name: str) -> None:
    def get(self):
        return self.parametrizations[name]()

    def set_(self, value):
        self.parametrizations[name].right_inverse(value)

    setattr(module.__class__, name, property(get, set_))


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether ``module`` has a parametrization (on ``tensor_name``, if given)."""
    p = module.__dict__.get("_modules", {}).get("parametrizations")
    if p is None or not isinstance(p, ModuleDict):
        return False
    return len(p) > 0 if tensor_name is None else tensor_name in p


def register_parametrization(module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False):
    """Make ``module.<tensor_name>`` the output of ``parametrization`` applied to the stored tensor.

    Registering a second parametrization on the same tensor chains it after the first.
    """
    if not isinstance(parametrization, Module):
        raise TypeError(f"register_parametrization: the parametrization must be a Module, got {type(parametrization)}")
    if is_parametrized(module, tensor_name):
        plist = module.parametrizations[tensor_name]
        if not unsafe:
            y = getattr(module, tensor_name)
            x = parametrization(y)
            if not isinstance(x, Tensor) or x.dtype != y.dtype or tuple(x.shape) != tuple(y.shape):
                raise ValueError("Registering a parametrization may not change the dtype or shape of the tensor")
        plist.append(parametrization)
        return module
    if tensor_name in module._parameters or tensor_name in module._buffers:
        original = getattr(module, tensor_name)
        if original is None:
            raise ValueError(f"register_parametrization: module's '{tensor_name}' is None")
        plist = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = plist
        return module
    raise ValueError(
        f"Module '{type(module).__name__}' has no parameter or buffer named '{tensor_name}' to parametrize"
    )


def remove_parametrizations(module: Module, tensor_name: str, leave_parametrized: bool = True) -> Module:
    """Undo :func:`register_parametrization` on ``tensor_name``.

    With ``leave_parametrized`` the tensor keeps its current parametrized value, else its original.
    """
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {type(module).__name__} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if plist.is_tensor:
        original = plist.original
        if leave_parametrized:
            with no_grad():
                value = getattr(module, tensor_name)
            with no_grad():
                original.data = value.detach().clone()
    else:
        if not leave_parametrized:
            raise ValueError(
                "Cannot leave unparametrized (leave_parametrized=False) a tensor parametrized in terms "
                "of a sequence of tensors"
            )
        with no_grad():
            value = getattr(module, tensor_name)
        original = Parameter(value.detach().clone(), value.requires_grad)
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    if isinstance(original, Parameter):
        module.register_parameter(tensor_name, original)
    else:
        module.register_buffer(tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__._parametrized_base
    return module
