"""Op schemas and the op registry: an op is declared once, everything else attaches by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from flow.errors import OpError, OpTypeError, RegistrationError

_MISSING = object()


@dataclass(frozen=True)
class Attr:
    """A typed attribute of an op (``dim: int = -1``)."""

    name: str
    type: Any = object
    default: Any = _MISSING
    choices: tuple | None = None

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def check(self, op: str, value) -> None:
        if self.choices is not None and value not in self.choices:
            raise OpError(op, f"attribute '{self.name}' must be one of {self.choices}, got {value!r}")
        if self.type is object or value is None:
            return
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if float in types:
            types = types + (int,)
        if not isinstance(value, types):
            names = "/".join(t.__name__ for t in types)
            raise OpTypeError(op, f"attribute '{self.name}' must be {names}, got {type(value).__name__} {value!r}")


@dataclass(frozen=True)
class Input:
    """A tensor input of an op; ``variadic`` takes a sequence of tensors (cat, stack)."""

    name: str
    optional: bool = False
    variadic: bool = False


@dataclass(frozen=True)
class OpSchema:
    """Name, tensor inputs, typed attributes and outputs of an op."""

    name: str
    inputs: tuple[Input, ...]
    attrs: tuple[Attr, ...] = ()
    outputs: tuple[str, ...] = ("out",)

    def __str__(self) -> str:
        ins = ", ".join(
            ("Tensor[] " if i.variadic else "Tensor? " if i.optional else "Tensor ") + i.name for i in self.inputs
        )
        ats = ", ".join(
            f"{a.name}: {getattr(a.type, '__name__', a.type)}" + ("" if a.required else f"={a.default!r}")
            for a in self.attrs
        )
        outs = ", ".join(self.outputs)
        return f"{self.name}({ins}{', *, ' + ats if ats else ''}) -> ({outs})"


def schema(name: str, inputs: Sequence[str | Input], attrs: Sequence[Attr] = (), outputs=("out",)) -> OpSchema:
    """Build an :class:`OpSchema`; input names ending in ``?`` are optional, ``*`` variadic."""
    ins = []
    for i in inputs:
        if isinstance(i, Input):
            ins.append(i)
        elif i.endswith("?"):
            ins.append(Input(i[:-1], optional=True))
        elif i.startswith("*"):
            ins.append(Input(i[1:], variadic=True))
        else:
            ins.append(Input(i))
    return OpSchema(name, tuple(ins), tuple(attrs), tuple(outputs))


@dataclass
class KernelEntry:
    fn: Callable
    plugin: str
    name: str = "default"
    generic: bool = False  # a factory taking the device's array module


class OpDef:
    """A registered op: schema, meta rule, gradient, kernels, and plugin-owned table entries.

    ``save`` says what autograd keeps for the gradient: ``"inputs"``,
    ``"outputs"``, ``"both"`` or ``"none"``; shapes and dtypes of inputs are
    always available to the gradient.

    ``dynamic_shape=True`` marks an op whose output shape depends on the input
    values (``nonzero``): its meta rule raises, and shape-only devices skip it.

    The meta rule must be a pure function of what it is given (shapes, dtypes,
    devices, attributes, non-tensor inputs): eager dispatch runs it once per
    input signature and remembers the signatures that passed.
    """

    __slots__ = (
        "schema", "name", "meta", "grad", "save", "plugin", "kernels", "_kcache", "_mcache",
        "elementwise", "eager_meta", "doc", "samples", "nondeterministic", "differentiable_inputs",
        "composite", "dynamic_shape", "has_variadic",
    )

    def __init__(self, schema: OpSchema, meta: Callable, grad: Callable | None = None, save: str = "both",
                 plugin: str = "", elementwise: bool = False, samples: Callable | None = None,
                 nondeterministic: bool = False, doc: str = "",
                 differentiable_inputs: tuple[int, ...] | None = None, eager_meta: bool | None = None,
                 composite: bool = False, dynamic_shape: bool = False) -> None:
        if save not in ("inputs", "outputs", "both", "none"):
            raise RegistrationError(f"op '{schema.name}': save must be inputs/outputs/both/none, got {save!r}")
        self.schema = schema
        self.name = schema.name
        self.meta = meta
        self.grad = grad
        self.save = save
        self.plugin = plugin
        self.kernels: dict[tuple, list[KernelEntry]] = {}
        self._kcache: dict = {}  # (device type, dtype) -> kernel, filled by the dispatcher
        self._mcache: set = set()  # input signatures that passed the meta rule (eager dispatch)
        self.elementwise = elementwise
        self.samples = samples
        self.nondeterministic = nondeterministic
        self.doc = doc
        self.differentiable_inputs = differentiable_inputs
        # Eager calls run the meta rule first, except elementwise ops whose checks
        # (broadcast, promotion) are done by the caller; their kernel failures are
        # explained by the meta rule afterwards.
        self.eager_meta = (not elementwise) if eager_meta is None else eager_meta
        self.composite = composite
        # The output shape depends on the input values (nonzero, unique, masked_select): the meta
        # rule cannot give it, so shape-only devices and tracing cannot run the op.
        self.dynamic_shape = dynamic_shape
        self.has_variadic = any(i.variadic for i in schema.inputs)  # gradients come back as lists

    def __repr__(self) -> str:
        return f"<op {self.schema}>"

    def check_attrs(self, attrs: dict) -> dict:
        """Validate attribute names and types; fill defaults. Used off the hot path."""
        known = {a.name: a for a in self.schema.attrs}
        for k in attrs:
            if k not in known:
                raise OpTypeError(self.name, f"unexpected attribute '{k}'; expected one of {sorted(known)}")
        out = {}
        for a in self.schema.attrs:
            if a.name in attrs:
                a.check(self.name, attrs[a.name])
                out[a.name] = attrs[a.name]
            elif a.required:
                raise OpTypeError(self.name, f"missing required attribute '{a.name}'")
            else:
                out[a.name] = a.default
        return out


@dataclass
class OpTableEntry:
    value: Any
    plugin: str


@dataclass
class OpRegistryState:
    ops: dict = field(default_factory=dict)
