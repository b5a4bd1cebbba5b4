"""Op schemas and the op registry: an op is declared once, everything else attaches by name.

A schema is also the op's contract on bad input: each tensor input declares the dtypes it
accepts (:class:`Dtypes`), each attribute its type and choices (:class:`Attr`), and the
registered meta rule is wrapped so that every call checks them before the rule runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable, Mapping, Sequence

from flow.errors import OpError, OpTypeError, RegistrationError

_MISSING = object()
_KINDS = ("bool", "int", "float")  # by dtype.category (0, 1, 2)


@dataclass(frozen=True)
class Dtypes:
    """The dtypes a tensor input accepts: kinds (``"bool"``, ``"int"``, ``"float"``) or exact names.

    ``promote=True`` says integer and bool input is promoted to the default float dtype by the
    op's Python function before the op runs (as PyTorch's ``exp``, ``sin``, true ``div``); the op
    itself accepts only ``kinds`` and rejects the rest like any other dtype.
    """

    kinds: frozenset = frozenset(_KINDS)
    names: frozenset | None = None  # exact dtype names ({"int64"}); overrides kinds
    promote: bool = False
    text: str = "a tensor"  # what the error says the input must be

    def accepts(self, dtype) -> bool:
        if self.names is not None:
            return dtype.name in self.names
        return _KINDS[dtype.category] in self.kinds

    def __repr__(self) -> str:
        name = next((k for k, v in DTYPE_RULES.items() if v == self), None)
        return name or f"Dtypes({self.text!r})"


def dtypes(*kinds: str, names: Sequence[str] | None = None, promote: bool = False, text: str = "") -> Dtypes:
    """A :class:`Dtypes` rule: ``dtypes("int", "float")``, ``dtypes(names=["int32", "int64"])``."""
    for k in kinds:
        if k not in _KINDS:
            raise RegistrationError(f"dtype kind must be one of {_KINDS}, got {k!r}")
    if names is not None:
        return Dtypes(frozenset(), frozenset(names), promote, text or f"a tensor of dtype {' or '.join(names)}")
    return Dtypes(frozenset(kinds), None, promote, text or f"a {' or '.join(kinds)} tensor")


# The rules the core's ops use; a plugin may build its own with :func:`dtypes`.
ANY = dtypes(*_KINDS, text="a tensor")
FLOAT = dtypes("float", text="a floating-point tensor")
FLOAT_PROMOTE = dtypes("float", promote=True, text="a floating-point tensor")  # ints promoted by the function
NUMERIC = dtypes("int", "float", text="an integer or floating-point tensor (not bool)")
INTEGRAL = dtypes("bool", "int", text="an integer or bool tensor")
INTEGER = dtypes("int", text="an integer tensor")
BOOL = dtypes(names=["bool"], text="a bool tensor")
INDEX = dtypes(names=["int32", "int64"], text="an int32 or int64 tensor of indices")
INDEX64 = dtypes(names=["int64"], text="an int64 tensor of indices")
DTYPE_RULES = {
    "ANY": ANY,
    "FLOAT": FLOAT,
    "FLOAT_PROMOTE": FLOAT_PROMOTE,
    "NUMERIC": NUMERIC,
    "INTEGRAL": INTEGRAL,
    "INTEGER": INTEGER,
    "BOOL": BOOL,
    "INDEX": INDEX,
    "INDEX64": INDEX64,
}


@dataclass(frozen=True)
class Attr:
    """A typed attribute of an op (``dim: int = -1``)."""

    name: str
    type: Any = object
    default: Any = _MISSING
    choices: tuple | None = None
    items: Any = None  # the type of each element when the value is a tuple (``shape``, ``dims``)

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def check(self, op: str, value) -> None:
        if self.choices is not None:
            try:
                ok = value in self.choices
            except TypeError:  # an unhashable or uncomparable value is no choice
                ok = False
            if not ok:
                raise OpError(op, f"attribute '{self.name}' must be one of {self.choices}, got {value!r}")
        if self.type is object or value is None:
            return
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if not _isinstance(value, types):
            names = "/".join(t.__name__ for t in types)
            raise OpTypeError(op, f"attribute '{self.name}' must be {names}, got {type(value).__name__} {value!r}")
        if self.items is not None and isinstance(value, tuple):
            its = self.items if isinstance(self.items, tuple) else (self.items,)
            for k, v in enumerate(value):
                if not _isinstance(v, its):
                    names = "/".join(t.__name__ for t in its)
                    raise OpTypeError(
                        op, f"attribute '{self.name}' must hold {names} values, element {k} is {type(v).__name__} {v!r}"
                    )


def _isinstance(value, types: tuple) -> bool:
    """``isinstance`` with the numeric tower of attributes: an int is a float, a bool is not an int."""
    if isinstance(value, bool) and bool not in types and object not in types:
        return False
    if float in types and isinstance(value, int):
        return True
    return isinstance(value, types)


@dataclass(frozen=True)
class Input:
    """A tensor input of an op; ``variadic`` takes a sequence of tensors (cat, stack)."""

    name: str
    optional: bool = False
    variadic: bool = False
    dtypes: Dtypes | None = None  # None: not declared (opcheck fails on it)


@dataclass(frozen=True)
class OpSchema:
    """Name, tensor inputs, typed attributes and outputs of an op."""

    name: str
    inputs: tuple[Input, ...]
    attrs: tuple[Attr, ...] = ()
    outputs: tuple[str, ...] = ("out",)

    @cached_property
    def attr_map(self) -> dict:
        return {a.name: a for a in self.attrs}

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


def schema(
    name: str,
    inputs: Sequence[str | Input],
    attrs: Sequence[Attr] = (),
    outputs=("out",),
    dtypes: Dtypes | Mapping[str, Dtypes] | None = None,
) -> OpSchema:
    """Build an :class:`OpSchema`; input names ending in ``?`` are optional, ``*`` variadic.

    ``dtypes`` is one :class:`Dtypes` rule for every tensor input, or a mapping from input
    name to rule (an :class:`Input` given with its own ``dtypes`` keeps it).
    """
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
    if dtypes is not None:
        if isinstance(dtypes, Dtypes):
            rules = {i.name: dtypes for i in ins}
        else:
            rules = dict(dtypes)
            unknown = set(rules) - {i.name for i in ins}
            if unknown:
                raise RegistrationError(f"op '{name}': dtypes given for unknown inputs {sorted(unknown)}")
        ins = [Input(i.name, i.optional, i.variadic, rules.get(i.name)) if i.dtypes is None else i for i in ins]
    return OpSchema(name, tuple(ins), tuple(attrs), tuple(outputs))


def _is_tensor(x) -> bool:
    from flow.ops.meta import is_tensor_like

    return is_tensor_like(x)


_SCALARS = (int, float, bool)


def check_call(schema: OpSchema, inputs: tuple, attrs: Mapping) -> None:
    """Check a call against the schema: input count, dtypes of tensor inputs, attribute names,
    types and choices. Raises OpTypeError/OpError naming the op and the argument."""
    op = schema.name
    ins = schema.inputs
    dev = None
    if len(inputs) > len(ins):
        raise OpTypeError(op, f"takes {len(ins)} inputs ({', '.join(i.name for i in ins)}), got {len(inputs)}")
    for k, spec in enumerate(ins):
        if k >= len(inputs):
            if not spec.optional:
                raise OpTypeError(op, f"missing input '{spec.name}'")
            continue
        x = inputs[k]
        if spec.variadic:
            if x.__class__ is not list and x.__class__ is not tuple:
                raise OpTypeError(op, f"'{spec.name}' must be a sequence of Tensors, got {type(x).__name__}")
            rule = spec.dtypes
            for j, t in enumerate(x):
                if not _is_tensor(t):
                    raise OpTypeError(op, f"'{spec.name}' must hold Tensors, element {j} is {type(t).__name__}")
                if rule is not None and not rule.accepts(t.dtype):
                    raise OpTypeError(op, f"'{spec.name}' must hold {_plural(rule.text)}, element {j} is {t.dtype}")
                if dev is None:
                    dev = t.device
                elif t.device != dev:
                    raise _mixed_devices(op, dev, t.device)
        elif x is None:
            if not spec.optional:
                raise OpTypeError(op, f"input '{spec.name}' is required, got None")
        elif _is_tensor(x):
            rule = spec.dtypes
            if rule is not None and not rule.accepts(x.dtype):
                raise OpTypeError(op, f"'{spec.name}' must be {rule.text}, got {x.dtype}")
            if dev is None:
                dev = x.device
            elif x.device != dev:
                raise _mixed_devices(op, dev, x.device)
        elif not isinstance(x, _SCALARS):  # numbers are scalar operands (where, binary ops)
            raise OpTypeError(op, f"'{spec.name}' must be a Tensor, got {type(x).__name__}")
    known = schema.attr_map
    for name, value in attrs.items():
        a = known.get(name)
        if a is None:
            raise OpTypeError(op, f"unexpected attribute '{name}'; expected one of {sorted(known)}")
        a.check(op, value)
    for a in schema.attrs:
        if a.required and a.name not in attrs:
            raise OpTypeError(op, f"missing required attribute '{a.name}'")


def _mixed_devices(op: str, a, b) -> OpError:
    return OpError(op, f"expected all tensors on the same device, got tensors on {a} and {b}")


def _plural(text: str) -> str:
    # "a floating-point tensor" -> "floating-point tensors"
    for art in ("a ", "an "):
        if text.startswith(art):
            text = text[len(art) :]
            break
    return text.replace("tensor", "tensors", 1)


def checked_meta(schema: OpSchema, rule: Callable) -> Callable:
    """The meta rule as registered: the schema's checks (:func:`check_call`), then ``rule``."""

    def meta(*inputs, **attrs):
        check_call(schema, inputs, attrs)
        return rule(*inputs, **attrs)

    meta.rule = rule
    meta.__name__ = f"meta_{schema.name}"
    meta.__doc__ = rule.__doc__
    return meta


@dataclass
class KernelEntry:
    fn: Callable
    plugin: str
    name: str = "default"
    generic: bool = False  # a factory taking the device's array module
    # the same computation taking ``out=`` (a factory too when generic); graph memory planning
    # writes the result into a buffer it chose (flow.graph.pass_tables.out_kernel)
    out: Callable | None = None


class OpDef:
    """A registered op: schema, meta rule, gradient, kernels, and plugin-owned table entries.

    ``save`` says what autograd keeps for the gradient: ``"inputs"``,
    ``"outputs"``, ``"both"`` or ``"none"``; shapes and dtypes of inputs are
    always available to the gradient.

    ``dynamic_shape=True`` marks an op whose output shape depends on the input
    values (``nonzero``): its meta rule raises, and shape-only devices skip it.

    The meta rule must be a pure function of what it is given (shapes, dtypes,
    devices, attributes, non-tensor inputs): eager dispatch runs it once per
    input signature and remembers the signatures that passed. ``meta`` is
    stored wrapped (:func:`checked_meta`): the schema's dtype rules and
    attribute types run first, then the rule (``meta.rule``).

    ``no_error_samples`` is the reason an op has no input it rejects (opcheck
    otherwise requires its samples to include :class:`flow.testing.ErrorInput`).
    """

    __slots__ = (
        "schema",
        "name",
        "meta",
        "grad",
        "save",
        "plugin",
        "kernels",
        "_kcache",
        "_mcache",
        "elementwise",
        "eager_meta",
        "doc",
        "samples",
        "nondeterministic",
        "collective",
        "differentiable_inputs",
        "composite",
        "dynamic_shape",
        "has_variadic",
        "no_error_samples",
        "origin",
        "saved_outputs",
    )

    def __init__(
        self,
        schema: OpSchema,
        meta: Callable,
        grad: Callable | None = None,
        save: str = "both",
        plugin: str = "",
        elementwise: bool = False,
        samples: Callable | None = None,
        nondeterministic: bool = False,
        collective: bool = False,
        doc: str = "",
        differentiable_inputs: tuple[int, ...] | None = None,
        eager_meta: bool | None = None,
        composite: bool = False,
        dynamic_shape: bool = False,
        no_error_samples: str = "",
        origin: tuple[str, int] | None = None,
        saved_outputs: tuple[int, ...] | None = None,
    ) -> None:
        if save not in ("inputs", "outputs", "both", "none"):
            raise RegistrationError(f"op '{schema.name}': save must be inputs/outputs/both/none, got {save!r}")
        if not callable(meta):
            raise RegistrationError(f"op '{schema.name}': the meta rule must be callable, got {meta!r}")
        self.schema = schema
        self.name = schema.name
        self.meta = checked_meta(schema, getattr(meta, "rule", meta))
        self.grad = grad
        self.save = save
        # which outputs autograd keeps (and checks for in-place writes) when save keeps outputs: all by
        # default; batch norm keeps its statistics, not the normalised output a following in-place
        # activation overwrites
        self.saved_outputs = None if saved_outputs is None else tuple(int(i) for i in saved_outputs)
        self.plugin = plugin
        self.kernels: dict[tuple, list[KernelEntry]] = {}
        self._kcache: dict = {}  # (device type, dtype) -> kernel, filled by the dispatcher
        self._mcache: set = set()  # input signatures that passed the meta rule (eager dispatch)
        self.elementwise = elementwise
        self.samples = samples
        self.nondeterministic = nondeterministic
        # Communicates with other processes (flow-dist's boxing): every process of the job must run
        # these calls in the same order, so a compiled graph never folds, merges, drops or reorders
        # them among themselves.
        self.collective = collective
        self.doc = doc
        self.differentiable_inputs = differentiable_inputs
        # Eager calls run the meta rule first, except elementwise ops whose checks
        # (broadcast, promotion) are done by the caller; their kernel failures are
        # explained by the meta rule afterwards, and their dtype rules are checked
        # when their kernel is resolved (dtype_guard).
        # Elementwise ops with attributes run it too, so that the attributes are checked.
        self.eager_meta = (not elementwise or bool(schema.attrs)) if eager_meta is None else eager_meta
        self.composite = composite
        # The output shape depends on the input values (nonzero, unique, masked_select): the meta
        # rule cannot give it, so shape-only devices and tracing cannot run the op.
        self.dynamic_shape = dynamic_shape
        self.has_variadic = any(i.variadic for i in schema.inputs)  # gradients come back as lists
        self.no_error_samples = no_error_samples
        self.origin = origin  # (file, line) of the declaration, for `python -m flow op`

    def __repr__(self) -> str:
        return f"<op {self.schema}>"

    def dtype_guard(self, dtype) -> Callable | None:
        """For ops that skip the eager meta step (elementwise ops, ``where``): the kernel for a first
        input of ``dtype`` when the schema rejects that dtype, a function raising the schema's error.

        Kernels are resolved once per (device type, dtype of the first tensor input), so the
        check costs nothing per call. Inputs of such ops share the first one's dtype (the
        Python function promotes them), so checking the first checks them all.
        """
        if self.eager_meta or not self.schema.inputs:
            return None
        spec = self.schema.inputs[0]
        rule = spec.dtypes
        if rule is None or rule.accepts(dtype):
            return None
        msg = (
            f"'{spec.name}' must hold {_plural(rule.text)}, element 0 is {dtype}"
            if spec.variadic
            else f"'{spec.name}' must be {rule.text}, got {dtype}"
        )
        name = self.name

        def rejected(*arrays, **attrs):
            raise OpTypeError(name, msg)

        return rejected

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
