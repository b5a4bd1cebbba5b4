"""The state one export works in: ONNX names of IR values, initializers, shapes of dynamic axes.

An export rule (see :mod:`flow.onnx`) gets the node and this context; it asks the context for the
ONNX name of each input (:meth:`ExportContext.name`, which turns parameters and constants into
initializers on first use), for fresh names, for constants it needs, and returns the ONNX nodes
that compute the node's outputs under :meth:`ExportContext.out`.
"""

from __future__ import annotations

import numpy as np

from flow.errors import FlowError
from flow.graph.ir import GraphIR, Lit, Node, Value


class OnnxExportError(FlowError, ValueError):
    """The model (or a node of its traced graph) cannot be written as ONNX."""


def onnx_dtype(dtype) -> int:
    """The ``onnx.TensorProto`` element type of a flow dtype."""
    from onnx import helper

    try:
        return helper.np_dtype_to_tensor_dtype(np.dtype(dtype.np))
    except (TypeError, KeyError, ValueError):
        raise OnnxExportError(f"dtype {dtype} has no ONNX element type") from None


class ExportContext:
    """Names, initializers and dynamic-axis facts of one export (rules use it, see module docstring).

    ``shapes2`` holds each value's shape in a second trace where every dynamic axis had another
    size: a dim that differs between the two traces depends on a dynamic axis.
    """

    def __init__(self, ir: GraphIR, opset: int, export_params: bool, shapes2: dict | None) -> None:
        self.ir = ir
        self.opset = opset
        self.export_params = export_params
        self.shapes2 = shapes2 or {}
        self.initializers: list = []
        self.graph_inputs: list = []  # extra graph inputs (states when export_params=False)
        self.input_dims: list = []  # (onnx input name, axis, size, size in trace 2) of dynamic graph-input dims
        self._names: dict[int, str] = {}
        self._used: set[str] = set()
        self._n = 0
        self.node: Node | None = None  # the node whose rule runs now (for error messages)

    # -- names ----------------------------------------------------------------------------
    def fresh(self, hint: str = "t") -> str:
        """A new unique ONNX value name."""
        while True:
            self._n += 1
            name = f"{hint}_{self._n}"
            if name not in self._used:
                self._used.add(name)
                return name

    def reserve(self, v: Value, name: str) -> None:
        if name in self._used:
            raise OnnxExportError(f"the ONNX name '{name}' is given twice (input_names / output_names)")
        self._used.add(name)
        self._names[v.id] = name

    def out(self, node: Node, i: int = 0) -> str:
        """The ONNX name a rule must give output ``i`` of ``node``."""
        v = node.outputs[i]
        name = self._names.get(v.id)
        if name is None:
            name = self.fresh(node.name)
            self._names[v.id] = name
        return name

    def alias(self, v: Value, name: str) -> None:
        """Make ``v`` the ONNX value ``name`` (a rule whose output is one of its inputs)."""
        self._names[v.id] = name

    def name(self, v: Value) -> str:
        """The ONNX name of an input value; parameters and constants become initializers here."""
        name = self._names.get(v.id)
        if name is not None:
            return name
        if v.kind == "const":
            self._check_static(v, "a constant captured by the model")
            name = self.const(np.asarray(self.ir.constants[v.id]), "const")
        elif v.kind == "state":
            spec = self.ir.state_specs[v.id]
            name = self._state_name(spec.name)
            arr = np.asarray(spec.get())
            if self.export_params:
                self.initializers.append(_tensor(arr, name))
            else:
                from onnx import helper

                self.graph_inputs.append(helper.make_tensor_value_info(name, onnx_dtype(v.dtype), list(v.shape)))
        else:
            raise OnnxExportError(f"value {v!r} ({v.kind}) is used before any node computes it")
        self._names[v.id] = name
        return name

    def _state_name(self, name: str) -> str:
        name = name or "param"
        if name in self._used:
            return self.fresh(name)
        self._used.add(name)
        return name

    # -- constants ------------------------------------------------------------------------
    def const(self, arr, hint: str = "c") -> str:
        """An initializer holding ``arr``; returns its name."""
        name = self.fresh(hint)
        self.initializers.append(_tensor(np.asarray(arr), name))
        return name

    def ints(self, values, hint: str = "shape") -> str:
        """A 1-D int64 initializer (shapes, axes, split sizes)."""
        return self.const(np.asarray(list(values), dtype=np.int64), hint)

    def scalar(self, value, like: Value) -> str:
        """A 0-d initializer of ``like``'s dtype holding a Python / NumPy scalar (a literal input)."""
        return self.const(np.asarray(value, dtype=like.dtype.np), "scalar")

    def operand(self, a, like: Value) -> str:
        """The ONNX name of a node input that is a tensor value or a literal scalar (cast to ``like``'s dtype)."""
        if isinstance(a, Lit):
            if a.value is None or not np.isscalar(a.value):
                raise self.error(f"a literal input {a.value!r} where a tensor or a number was expected")
            return self.scalar(a.value, like)
        return self.name(a)

    def array(self, v) -> np.ndarray | None:
        """The value of a parameter or constant input known at export time (else None)."""
        if not isinstance(v, Value):
            return None
        if v.kind == "const":
            return np.asarray(self.ir.constants[v.id])
        if v.kind == "state" and self.export_params:
            return np.asarray(self.ir.state_specs[v.id].get())
        return None

    # -- dynamic axes ---------------------------------------------------------------------
    def dyn(self, v: Value) -> tuple:
        """For each dim of ``v``: its size in the second trace (equal to ``v.shape`` where static)."""
        s2 = self.shapes2.get(v.id)
        return tuple(v.shape) if s2 is None else tuple(s2)

    def is_dynamic(self, v: Value) -> bool:
        return tuple(v.shape) != self.dyn(v)

    def _check_static(self, v: Value, what: str) -> None:
        if self.is_dynamic(v):
            raise self.error(
                f"{what} has shape {v.shape} that depends on a dynamic axis; it was baked in at trace time, "
                "so the graph cannot take another size there: drop that axis from dynamic_axes"
            )

    def shape_tensor(self, src: Value, out: Value, nodes: list, *, allow_infer: bool = False) -> str:
        """An int64 1-D ONNX tensor holding ``out``'s shape at run time.

        A static dim is a constant; a dim that depends on a dynamic axis is read from the run-time
        shape of ``src`` (or of a graph input) where a dim of the same sizes exists in both traces,
        else (``allow_infer``, a Reshape) it is -1, once.
        """
        from onnx import helper

        sizes, sizes2 = tuple(out.shape), self.dyn(out)
        if sizes == sizes2:
            return self.ints(sizes)
        src_dims = list(zip(src.shape, self.dyn(src)))
        parts: list[str] = []
        inferred = False
        shape_of: dict[str, str] = {}

        def dim_of(vname: str, axis: int) -> str:
            if vname not in shape_of:
                shape_of[vname] = self.fresh("shape")
                nodes.append(helper.make_node("Shape", [vname], [shape_of[vname]]))
            d = self.fresh("dim")
            nodes.append(helper.make_node("Gather", [shape_of[vname], self.ints([axis])], [d], axis=0))
            return d

        for i, (a, b) in enumerate(zip(sizes, sizes2)):
            if a == b:
                parts.append(self.ints([a]))
                continue
            # prefer the same position of the source, then any dim of it, then a graph input's dim
            cands = [i] if i < len(src_dims) and src_dims[i] == (a, b) else []
            cands += [j for j, p in enumerate(src_dims) if p == (a, b) and j not in cands]
            if cands:
                parts.append(dim_of(self.name(src), cands[0]))
                continue
            hit = next(((n, ax) for n, ax, s1, s2 in self.input_dims if (s1, s2) == (a, b)), None)
            if hit is not None:
                parts.append(dim_of(hit[0], hit[1]))
            elif allow_infer and not inferred:
                inferred = True
                parts.append(self.ints([-1]))
            else:
                raise self.error(
                    f"output dim {i} (size {a}) depends on dynamic axes in a way the exporter cannot "
                    "express as a run-time shape; export with fewer dynamic axes"
                )
        name = self.fresh("shape")
        nodes.append(helper.make_node("Concat", parts, [name], axis=0))
        return name

    # -- errors ---------------------------------------------------------------------------
    def error(self, msg: str) -> OnnxExportError:
        """An :class:`OnnxExportError` naming the node being exported and where the model called it."""
        n = self.node
        if n is None:
            return OnnxExportError(f"ONNX export: {msg}")
        where = f" at {n.loc.short()}" if n.loc is not None else ""
        return OnnxExportError(f"ONNX export of op '{n.name}'{where}: {msg}")


def _tensor(arr: np.ndarray, name: str):
    from onnx import numpy_helper

    # np.ascontiguousarray would make a 0-d array 1-d; a scalar must stay a scalar
    return numpy_helper.from_array(np.array(arr, order="C", copy=True), name)
