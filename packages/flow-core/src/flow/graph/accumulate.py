"""Gradient accumulation, done by the runtime until a ``gradient_accumulation`` pass exists.

With ``config.set_gradient_accumulation_steps(n)`` a call's tensor inputs are split along dim 0
into ``n`` micro-batches. The step is traced on one micro-batch; its IR is cut in two: the
forward + backward part (every node that is not the optimizer update or after it) and the update
part. The first runs once per micro-batch (state updates such as BatchNorm running statistics
apply after each), the gradients it hands to the update are averaged over the micro-batches
(``config.options["gradient_accumulation.reduce"] = "sum"`` sums them instead), then the update
runs once. Outputs are concatenated along dim 0, except 0-d ones (losses), which are averaged.

A registered pass named ``gradient_accumulation`` replaces this (the runtime then runs the
compiled step once with the whole batch).
"""

from __future__ import annotations

import numpy as np

from flow._tensor import Tensor
from flow.errors import FlowError
from flow.graph.ir import GraphIR, Value
from flow.graph.tracer import flatten, unflatten


def _split(runner, leaves, n):
    micro = [[] for _ in range(n)]
    for t in leaves:
        if t.ndim == 0 or t.shape[0] % n:
            raise FlowError(
                f"graph '{runner._name}': gradient accumulation over {n} micro-batches needs every "
                f"tensor input to have a first dim divisible by {n}, got shape {tuple(t.shape)}"
            )
        m = t.shape[0] // n
        for i in range(n):
            part = Tensor._make(t._data[i * m : (i + 1) * m], t.dtype, t.device)
            part._requires_grad = t._requires_grad
            micro[i].append(part)
    return micro


class AccumulatedStep:
    """A compiled step cut into "forward + backward" (run per micro-batch) and "update" (run once)."""

    def __init__(self, step, config) -> None:
        from flow.graph.executor import Executor
        from flow.graph.lowering.plan import lower

        ir = step.ir
        self.step = step
        after: set[int] = set()
        for nd in ir.nodes:
            if nd.tags.get("phase") == "optimizer" or any(
                v.producer is not None and v.producer.id in after for v in nd.input_values()
            ):
                after.add(nd.id)
        a_nodes = [nd for nd in ir.nodes if nd.id not in after]
        b_nodes = [nd for nd in ir.nodes if nd.id in after]
        in_a = {o.id for nd in a_nodes for o in nd.outputs}
        iface, seen = [], set()
        for nd in b_nodes:
            for v in nd.input_values():
                if v.id in in_a and v.id not in seen:
                    if not v.dtype.is_floating_point:
                        raise FlowError(
                            f"graph '{ir.name}': gradient accumulation can only carry floating-point "
                            f"values (gradients) to the update, not {v!r}"
                        )
                    seen.add(v.id)
                    iface.append(v)
        for v in ir.outputs:
            if isinstance(v, Value) and v.producer is not None and v.producer.id in after:
                raise FlowError(
                    f"graph '{ir.name}': with gradient accumulation, outputs must be computed before "
                    "the optimizer update"
                )
        b_ids = {o.id for nd in b_nodes for o in nd.outputs}
        ups_a = [(s, new) for s, new in ir.updates if new.id not in b_ids]
        ups_b = [(s, new) for s, new in ir.updates if new.id in b_ids]

        def sub(name, inputs, nodes, outputs, updates) -> GraphIR:
            g = GraphIR(
                name,
                inputs=list(inputs),
                states=list(ir.states),
                hosts=list(ir.hosts),
                nodes=nodes,
                outputs=list(outputs),
                updates=updates,
                constants=ir.constants,
                state_specs=ir.state_specs,
                host_specs=ir.host_specs,
            )
            g._next = ir._next
            return g

        self.n_out = len(ir.outputs)
        self.ir_a = sub(ir.name + "[micro-batch]", ir.inputs, a_nodes, list(ir.outputs) + iface, ups_a)
        self.ir_b = sub(ir.name + "[update]", iface, b_nodes, [], ups_b)
        self.plan_a, self.plan_b = lower(self.ir_a, config), lower(self.ir_b, config)
        self.exe_a, self.exe_b = Executor(self.plan_a, config), Executor(self.plan_b, config)
        self.reduce = config.options.get("gradient_accumulation.reduce", "mean")

    def run(self, micro: list[list]):
        step = self.step
        from flow.graph import optim_trace

        for opt in step.optimizers:
            optim_trace.sync(opt)
        states = [g() for g in step._getters]
        hosts = [f() for f in step._feeders]
        sums = None
        outs_all = []
        for arrays in micro:
            outs, news = self.exe_a.run(arrays, states, hosts)
            for (k, _), new in zip(self.plan_a.update_slots, news):
                if new is not states[k]:
                    states[k][...] = new
            outs_all.append(outs[: self.n_out])
            grads = outs[self.n_out :]
            if sums is None:
                sums = [np.array(g, copy=True) for g in grads]
            else:
                for s, g in zip(sums, grads):
                    s += g
        if self.reduce == "mean" and sums:
            n = len(micro)
            for s in sums:
                s *= s.dtype.type(1.0 / n)
        _, news = self.exe_b.run(sums or [], states, hosts)
        for (k, _), new in zip(self.plan_b.update_slots, news):
            if new is not states[k]:
                states[k][...] = new
        for fn in step._effects:
            fn()
        step.runs += 1
        merged = []
        for k in range(self.n_out):
            parts = [o[k] for o in outs_all]
            a0 = parts[0]
            if not hasattr(a0, "shape"):
                merged.append(a0)
            elif a0.ndim == 0:
                merged.append(np.asarray(np.mean(np.stack(parts)), dtype=a0.dtype))
            else:
                merged.append(np.concatenate(parts, axis=0))
        return step.wrap(merged)


def run_accumulated(runner, args: tuple, kwargs: dict, n: int):
    """One call with gradient accumulation over ``n`` micro-batches (see the module docstring)."""
    from flow.registry import REGISTRY

    leaves: list = []
    tree = flatten((args, kwargs), leaves)
    if "gradient_accumulation" in REGISTRY.passes and runner.config.pass_enabled(
        REGISTRY.passes["gradient_accumulation"]
    ):
        return runner._run(args, kwargs)  # the pass does it inside the graph
    micro = _split(runner, leaves, n)
    margs, mkwargs = unflatten(tree, micro[0])
    step = runner._step_for(margs, mkwargs, micro[0], tree)
    acc = getattr(step, "_accumulated", None)
    if acc is None:
        acc = step._accumulated = AccumulatedStep(step, runner.config)
    outs = acc.run([[t._data for t in m] for m in micro])
    return unflatten(step.ir.out_tree, outs)
