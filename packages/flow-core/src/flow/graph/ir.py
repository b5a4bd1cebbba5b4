"""The graph IR: values, nodes, graph inputs, state inputs, outputs and state updates.

A :class:`GraphIR` is a list of :class:`Node` in a valid execution order (topological; the
tracer records them in program order and passes keep it). Every node is a call of a registered
op (``node.op`` is its :class:`~flow.registry.ops.OpDef`), with

* ``inputs``: one entry per positional input of the op, each a :class:`Value` (a tensor), a
  list of values (a variadic input such as ``cat``'s) or a :class:`Lit` (any non-tensor input:
  a Python or NumPy scalar, ``None``);
* ``attrs``: the op's attributes (constants of the graph);
* ``outputs``: the values it defines; their shape/dtype/device come from the op's meta rule;
* ``loc``: where the user's code called it (:class:`SourceLoc`), ``scope``: the module
  (graph block) it ran in, ``tags``: free-form facts passes add or read (``phase``:
  forward / backward / optimizer, ``bwd_of``: id of the forward node a backward node
  differentiates, ...);
* ``inplace``: ``{output index: flat input index}`` when the kernel writes that output into the
  buffer of that input (the optimizer updates). Lowering orders every other reader of that input
  before the node.

Values have a ``kind``: ``input`` (an argument of build), ``state`` (persistent mutable state:
parameters, buffers, optimizer states, read through a binding at run time), ``host`` (a value
the runtime computes before each step on the host: the learning rate, step counts), ``const``
(a tensor baked into the graph, its array in ``ir.constants``) or ``node`` (an op's output).

State mutation is explicit: ``ir.updates`` lists ``(state value, new value)`` pairs; after a step
the executor writes each new value into the state's array (nothing to do when an in-place node
already wrote it there). ``ir.effects`` are host-side bookkeeping run after each step
(optimizer step counters), listed by name so dumps show them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from flow.ops.meta import TensorMeta

KINDS = ("input", "state", "host", "const", "node")


class Value:
    """A tensor of the graph: shape, dtype, device and where it comes from.

    ``attrs`` holds per-value facts passes attach (flow-dist's SBP, flow-amp's compute dtype):
    passes that replace or copy a value carry them over (:func:`inherit_attrs`), and the IR dump
    prints them when there are any.
    """

    __slots__ = ("id", "shape", "dtype", "device", "kind", "producer", "index", "name", "attrs")

    def __init__(
        self,
        vid: int,
        shape: tuple,
        dtype,
        device,
        kind: str,
        producer=None,
        index: int = 0,
        name: str = "",
        attrs: dict | None = None,
    ) -> None:
        self.attrs: dict = dict(attrs) if attrs else {}
        self.id = vid
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device
        self.kind = kind
        self.producer = producer
        self.index = index
        self.name = name

    @property
    def meta(self) -> TensorMeta:
        return TensorMeta(self.shape, self.dtype, self.device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def type_str(self) -> str:
        return f"{_short_dtype(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        return f"%{self.id}:{self.type_str()}"


class Lit:
    """A non-tensor input of a node (a number, ``None``, a tuple ...), kept as is."""

    __slots__ = ("value",)

    def __init__(self, value) -> None:
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)

    def key(self):
        v = self.value
        return (type(v).__name__, repr(v))


@dataclass(frozen=True)
class SourceLoc:
    """Where an op was called: the line in build (or the compiled function) and the innermost
    line of user code (e.g. in a module's ``forward``) when that is a different place."""

    file: str
    line: int
    function: str
    inner_file: str = ""
    inner_line: int = 0
    inner_function: str = ""

    def short(self) -> str:
        import os

        s = f"{os.path.basename(self.file)}:{self.line}"
        if self.inner_file and (self.inner_file, self.inner_line) != (self.file, self.line):
            s += f" ({os.path.basename(self.inner_file)}:{self.inner_line} in {self.inner_function})"
        return s

    def __str__(self) -> str:
        s = f'File "{self.file}", line {self.line}, in {self.function}'
        if self.inner_file and (self.inner_file, self.inner_line) != (self.file, self.line):
            s += f'\n  File "{self.inner_file}", line {self.inner_line}, in {self.inner_function}'
        return s


class Node:
    """One call of a registered op."""

    __slots__ = ("id", "op", "attrs", "inputs", "outputs", "loc", "scope", "inplace", "tags", "_meta_key")

    def __init__(
        self,
        nid: int,
        op,
        inputs: list,
        attrs: dict,
        loc: SourceLoc | None = None,
        scope: str = "",
        tags: dict | None = None,
    ) -> None:
        self.id = nid
        self.op = op
        self.attrs = dict(attrs)
        self.inputs = list(inputs)
        self.outputs: list[Value] = []
        self.loc = loc
        self.scope = scope
        self.inplace: dict[int, int] = {}
        self.tags: dict = dict(tags or {})
        self._meta_key = None  # what flow.graph.meta_check last checked against the meta rule

    @property
    def name(self) -> str:
        return self.op.name

    def input_values(self) -> Iterator[Value]:
        """Every tensor input, variadic lists flattened, in order (repeats included)."""
        for a in self.inputs:
            if a.__class__ is Value:
                yield a
            elif a.__class__ is list:
                yield from a

    def map_inputs(self, fn: Callable[[Value], Value]) -> None:
        """Replace every tensor input ``v`` by ``fn(v)``."""
        new = []
        for a in self.inputs:
            if a.__class__ is Value:
                new.append(fn(a))
            elif a.__class__ is list:
                new.append([fn(v) for v in a])
            else:
                new.append(a)
        self.inputs = new

    @property
    def has_side_effects(self) -> bool:
        """Writes a buffer in place, draws random numbers or communicates: never merged, folded or
        reordered freely."""
        return (
            bool(self.inplace)
            or bool(getattr(self.op, "nondeterministic", False))
            or bool(getattr(self.op, "collective", False))
            or bool(self.tags.get("side_effect"))
        )

    def __repr__(self) -> str:
        return f"<node {self.id} {self.name}>"


@dataclass
class StateSpec:
    """How a state value is bound to live memory: ``get()`` returns the array for this step."""

    name: str
    kind: str  # param | buffer | optimizer | captured
    get: Callable[[], Any]
    tensor: Any = None  # the flow Tensor, when the state is one


@dataclass
class HostSpec:
    """A value computed on the host before each step (``feed()`` returns the array)."""

    name: str
    feed: Callable[[], Any]


@dataclass
class Effect:
    """Host bookkeeping run after every step (optimizer step counters)."""

    name: str
    fn: Callable[[], None]


@dataclass
class GraphIR:
    """A traced step: see the module docstring."""

    name: str = "graph"
    inputs: list = field(default_factory=list)
    states: list = field(default_factory=list)
    hosts: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    outputs: list = field(default_factory=list)  # Value or Lit per leaf of the output structure
    out_tree: Any = None  # structure of build's return value (see flow.graph.tracer.flatten)
    updates: list = field(default_factory=list)  # (state Value, new Value)
    effects: list = field(default_factory=list)
    constants: dict = field(default_factory=dict)  # value id -> array
    state_specs: dict = field(default_factory=dict)  # value id -> StateSpec
    host_specs: dict = field(default_factory=dict)  # value id -> HostSpec
    blocks: dict = field(default_factory=dict)  # block (scope) name -> its config (activation checkpointing ...)
    meta: dict = field(default_factory=dict)  # free-form: trace time, input signature ...
    _next: int = 0

    # -- construction --------------------------------------------------------------------
    def _id(self) -> int:
        self._next += 1
        return self._next - 1

    def new_value(self, meta, kind: str, producer=None, index: int = 0, name: str = "") -> Value:
        return Value(self._id(), tuple(meta.shape), meta.dtype, meta.device, kind, producer, index, name)

    def add_input(self, meta, name: str = "") -> Value:
        v = self.new_value(meta, "input", name=name)
        self.inputs.append(v)
        return v

    def add_state(self, meta, spec: StateSpec) -> Value:
        v = self.new_value(meta, "state", name=spec.name)
        self.states.append(v)
        self.state_specs[v.id] = spec
        return v

    def add_host(self, meta, spec: HostSpec) -> Value:
        v = self.new_value(meta, "host", name=spec.name)
        self.hosts.append(v)
        self.host_specs[v.id] = spec
        return v

    def add_constant(self, array, dtype, device, name: str = "") -> Value:
        v = Value(self._id(), tuple(array.shape), dtype, device, "const", name=name)
        self.constants[v.id] = array
        return v

    def make_node(
        self, op, inputs: list, attrs: dict, out_metas, loc=None, scope: str = "", tags: dict | None = None
    ) -> Node:
        """A new node with outputs made from ``out_metas`` (not yet placed in ``nodes``)."""
        n = Node(self._id(), op, inputs, attrs, loc, scope, tags)
        n.outputs = [self.new_value(m, "node", n, i) for i, m in enumerate(out_metas)]
        return n

    def add_node(
        self, op, inputs: list, attrs: dict, out_metas, loc=None, scope: str = "", tags: dict | None = None
    ) -> Node:
        """Append a node (after every existing one) and return it."""
        n = self.make_node(op, inputs, attrs, out_metas, loc, scope, tags)
        self.nodes.append(n)
        return n

    def emit(
        self,
        op,
        inputs: list,
        attrs: dict | None = None,
        *,
        before: "Node | None" = None,
        after: "Node | None" = None,
        loc=None,
        scope: str = "",
        tags: dict | None = None,
    ) -> Node:
        """Create a node of the registered op ``op`` (name or OpDef) with outputs from its meta rule, and
        insert it before/after a node (default: at the end). ``inputs`` are Values, lists of Values or
        Lits (plain Python values are wrapped in Lit). What passes use to add ops (casts, recomputation)."""
        if isinstance(op, str):
            from flow.registry import get_op

            op = get_op(op)
        attrs = dict(attrs or {})
        ins = [a if a.__class__ in (Value, Lit, list) else Lit(a) for a in inputs]
        from flow._dispatch import _meta_inputs

        out = op.meta(*_meta_inputs(tuple(a.value if a.__class__ is Lit else a for a in ins)), **attrs)
        multi = isinstance(out, (tuple, list))
        tags = dict(tags or {})
        if multi:
            tags["multi_output"] = True
        n = self.make_node(op, ins, attrs, tuple(out) if multi else (out,), loc, scope, tags)
        from flow.graph.meta_check import mark_node_checked

        mark_node_checked(n)  # its metas are the rule's
        self.insert_node(n, before=before, after=after)
        return n

    def insert_node(self, node: Node, *, before: "Node | None" = None, after: "Node | None" = None) -> None:
        """Place ``node`` right before ``before`` or right after ``after`` (default: at the end)."""
        if before is not None:
            self.nodes.insert(self.nodes.index(before), node)
        elif after is not None:
            self.nodes.insert(self.nodes.index(after) + 1, node)
        else:
            self.nodes.append(node)

    # -- queries ------------------------------------------------------------------------
    def users(self) -> dict[int, list[Node]]:
        """value id -> nodes that read it (a node appears once per value even if it reads it twice)."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            seen = set()
            for v in n.input_values():
                if v.id not in seen:
                    seen.add(v.id)
                    out.setdefault(v.id, []).append(n)
        return out

    def live_roots(self) -> list[Value]:
        """Values the outside world reads: outputs and the new values of state updates."""
        roots = [v for v in self.outputs if isinstance(v, Value)]
        roots += [new for _, new in self.updates]
        return roots

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.name] = counts.get(n.name, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def node_by_id(self, nid: int) -> Node | None:
        for n in self.nodes:
            if n.id == nid:
                return n
        return None

    # -- rewriting ----------------------------------------------------------------------
    def replace_uses(self, mapping: dict) -> None:
        """Make every reader of value ``old`` (by id) read ``mapping[old.id]`` instead: node inputs,
        outputs and state updates. Chains (a -> b -> c) are followed. The replacement inherits the
        per-value ``attrs`` of the values it replaces (:func:`inherit_attrs`)."""
        if not mapping:
            return

        def res(v: Value) -> Value:
            seen = 0
            old = v
            while v.id in mapping and seen < 10_000:
                v = mapping[v.id]
                seen += 1
            if old.attrs and v is not old:
                inherit_attrs(old, v)
            return v

        for n in self.nodes:
            n.map_inputs(res)
        self.outputs = [res(v) if isinstance(v, Value) else v for v in self.outputs]
        self.updates = [(s, res(new)) for s, new in self.updates]

    def remove_nodes(self, dead) -> None:
        """Drop the nodes whose ids are in ``dead``."""
        if dead:
            self.nodes = [n for n in self.nodes if n.id not in dead]

    def prune_unused_inputs(self) -> None:
        """Forget states, host values and constants nothing reads any more (graph inputs stay: they are
        the signature of the step)."""
        used = {v.id for n in self.nodes for v in n.input_values()}
        used.update(v.id for v in self.live_roots())
        used.update(s.id for s, _ in self.updates)
        self.states = [v for v in self.states if v.id in used]
        self.state_specs = {k: s for k, s in self.state_specs.items() if k in used}
        self.hosts = [v for v in self.hosts if v.id in used]
        self.host_specs = {k: s for k, s in self.host_specs.items() if k in used}
        self.constants = {k: a for k, a in self.constants.items() if k in used}

    def verify(self, metas: bool = True) -> None:
        """Check the IR is well formed: each value defined once before use, outputs and updates
        defined, and (``metas``) each node's recorded output shapes and dtypes equal what its op's
        meta rule gives for its inputs. Raises :class:`~flow.errors.FlowError` naming the node."""
        from flow.errors import FlowError

        defined = {v.id for v in self.inputs} | {v.id for v in self.states} | {v.id for v in self.hosts}
        defined |= set(self.constants)
        const_vals: dict[int, Value] = {}
        for n in self.nodes:
            for v in n.input_values():
                if v.kind == "const":
                    const_vals[v.id] = v
                if v.id not in defined:
                    raise FlowError(f"graph IR: node {n.id} ({n.name}) reads %{v.id} before it is defined")
            for v in n.outputs:
                if v.id in defined:
                    raise FlowError(f"graph IR: %{v.id} is defined twice (node {n.id}, {n.name})")
                if v.producer is not n:
                    raise FlowError(f"graph IR: %{v.id} does not point back at its producer node {n.id}")
                defined.add(v.id)
        for v in self.live_roots():
            if v.id not in defined:
                raise FlowError(f"graph IR: output/update value %{v.id} is not defined")
        state_ids = {v.id for v in self.states}
        for s, _ in self.updates:
            if s.id not in state_ids:
                raise FlowError(f"graph IR: update of %{s.id}, which is not a state input")
        if metas:
            from flow.graph.meta_check import check_metas

            check_metas(self)

    def infer_metas(self) -> int:
        """Re-run every node's meta rule in order and set its outputs' shapes, dtypes and devices
        from it (after a pass rewrote dtypes or shapes); returns how many values changed. See
        :func:`flow.graph.meta_check.infer_metas`."""
        from flow.graph.meta_check import infer_metas

        return infer_metas(self)

    # -- text ---------------------------------------------------------------------------
    def __str__(self) -> str:
        from flow.graph.debug import format_ir

        return format_ir(self)


def _short_dtype(dt) -> str:
    name = getattr(dt, "name", str(dt))
    return {
        "float32": "f32",
        "float64": "f64",
        "float16": "f16",
        "bfloat16": "bf16",
        "int64": "i64",
        "int32": "i32",
        "int16": "i16",
        "int8": "i8",
        "uint8": "u8",
        "bool": "b1",
    }.get(name, name)


def flat_inputs(node: Node) -> list:
    """The node's tensor inputs as a flat list (the positions ``inplace`` refers to)."""
    return list(node.input_values())


def inherit_attrs(src: Value, dst: Value) -> None:
    """Give ``dst`` the per-value attributes of ``src`` it does not have (a pass replacing or copying
    ``src`` by ``dst``: CSE, simplification, constant folding, fusion, recomputation)."""
    if src.attrs and src is not dst:
        for k, v in src.attrs.items():
            dst.attrs.setdefault(k, v)
