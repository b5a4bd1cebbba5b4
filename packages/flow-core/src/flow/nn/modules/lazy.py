"""Lazily initialised layers: parameters whose shape is inferred from the first input (LazyLinear).

As in PyTorch, a lazy module holds :class:`UninitializedParameter` placeholders until its first call;
then it materialises them in place (so an optimizer made earlier keeps the same objects), initialises
them like the eager layer and turns into that layer's class (``LazyLinear`` becomes ``Linear``).
Loading a state dict into a module that is still lazy materialises the parameters with the stored shapes.
"""

from __future__ import annotations

from flow import _creation as C
from flow.autograd.grad_mode import no_grad
from flow.nn.modules.linear import Linear
from flow.nn.parameter import Parameter

__all__ = ["UninitializedParameter", "LazyLinear"]

_NO_SHAPE = (
    "Can't access the shape of an uninitialized parameter or buffer. This error usually happens in "
    "`load_state_dict` when trying to load an uninitialized parameter into an initialized one. Call "
    "`forward` to initialize the parameters before accessing their attributes."
)


class UninitializedParameter(Parameter):
    """A parameter without a shape yet; :meth:`materialize` gives it one and makes it a plain Parameter."""

    __slots__ = ()
    cls_to_become = Parameter

    def __new__(cls, requires_grad: bool = True, device=None, dtype=None):
        return super().__new__(cls, C.empty(0, device=device, dtype=dtype), requires_grad)

    def __init__(self, requires_grad: bool = True, device=None, dtype=None) -> None:
        pass

    @property
    def shape(self):
        raise ValueError(_NO_SHAPE)

    def size(self, dim: int | None = None):
        raise ValueError(_NO_SHAPE)

    def numel(self) -> int:
        raise ValueError(_NO_SHAPE)

    def materialize(self, shape, device=None, dtype=None) -> None:
        """Allocate (uninitialised) storage of ``shape`` and become a :class:`~flow.nn.Parameter`."""
        shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.data = C.empty(
            *shape, device=self.device if device is None else device, dtype=self.dtype if dtype is None else dtype
        )
        self.__class__ = self.cls_to_become

    def __repr__(self) -> str:
        return "<UninitializedParameter>"

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = type(self)(self.requires_grad, self.device, self.dtype)
        return memo[id(self)]


def _is_lazy(p) -> bool:
    return isinstance(p, UninitializedParameter)


class LazyLinear(Linear):
    """A :class:`Linear` whose ``in_features`` is the last dim of its first input.

    >>> m = flow.nn.LazyLinear(3)
    >>> m(flow.randn(2, 5)).shape, m.weight.shape
    (flow.Size([2, 3]), flow.Size([3, 5]))
    """

    cls_to_become = Linear

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        # a 0-input Linear first (cheap), then the placeholders replace its parameters
        super().__init__(0, out_features, False, device=device, dtype=dtype)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def has_uninitialized_params(self) -> bool:
        """Whether some parameter is still an :class:`UninitializedParameter`."""
        return any(_is_lazy(p) for p in self._parameters.values())

    def initialize_parameters(self, input) -> None:
        """Materialise the parameters for ``input`` (in_features = its last dim) and initialise them."""
        if not self.has_uninitialized_params():
            return
        if input.ndim < 1:
            raise ValueError(f"LazyLinear: expected an input with at least 1 dim, got shape {tuple(input.shape)}")
        with no_grad():
            self.in_features = int(input.shape[-1])
            self.weight.materialize((self.out_features, self.in_features))
            if self.bias is not None:
                self.bias.materialize((self.out_features,))
            self.reset_parameters()

    def forward(self, input):
        self.initialize_parameters(input)
        self.__class__ = self.cls_to_become  # from now on an ordinary Linear, as torch's lazy modules
        return Linear.forward(self, input)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ) -> None:
        for name, p in self._parameters.items():
            key = prefix + name
            if _is_lazy(p) and key in state_dict:
                p.materialize(tuple(state_dict[key].shape))
        if not self.has_uninitialized_params():
            self.in_features = int(self.weight.shape[1])
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
