"""The executor: runs a :class:`~flow.graph.lowering.plan.Plan` on raw arrays.

The plan's schedule is turned into one generated Python function, one line per kernel call,
with every value in a local variable and a ``del`` right after its last reader: no flow Tensor,
no autograd node, no dispatch per op, which is where graph mode beats eager mode. Kernels,
attributes, literals and constants are globals of that function; autotuning swaps a kernel by
rebinding its global.

A failing kernel is reported as :class:`GraphExecutionError` naming the op and the user's line in
build that created it (the generated function has one line per step, so the traceback's line
number is the step).
"""

from __future__ import annotations

import time

import numpy as np

from flow._fpstate import IGNORE as FP_IGNORE
from flow._fpstate import fp_reset, fp_set
from flow.errors import FlowError
from flow.graph.dataflow import run_dataflow

# Set by flow.profiler while a profile records: ``hook(executor, inputs, states, hosts)`` runs the
# step with each plan node timed. Checked once per step; None (no work) otherwise.
PROFILE_HOOK = None


class GraphExecutionError(FlowError):
    """An op failed while a compiled graph ran; ``node`` and ``loc`` say which and where it was written."""

    def __init__(self, message: str, node=None, loc=None) -> None:
        super().__init__(message)
        self.node = node
        self.loc = loc


class GraphMemoryError(GraphExecutionError, MemoryError):
    """An op of a compiled graph ran out of memory (``except MemoryError`` catches it)."""


def _located_error(plan, step, err: BaseException) -> GraphExecutionError:
    n = step.node
    loc = n.loc
    kind = n.tags.get("phase", "forward")
    what = f"op '{n.name}'"
    if kind == "backward":
        what = (
            f"op '{n.name}' (in the backward pass"
            + (f" of the op at {n.tags['fwd_loc']}" if "fwd_loc" in n.tags else "")
            + ")"
        )
    elif kind == "optimizer":
        what = f"op '{n.name}' (optimizer update)"
    where = f"\n  {loc}" if loc is not None else ""
    shapes = []
    for a in n.inputs:
        if hasattr(a, "shape") and hasattr(a, "dtype") and not isinstance(a, list):
            shapes.append(a.type_str())
    msg = (
        f"graph '{plan.name}': {what} failed{' at ' + loc.short() if loc else ''} "
        f"(inputs {', '.join(shapes)}): {type(err).__name__}: {err}{where}"
    )
    cls = GraphMemoryError if isinstance(err, MemoryError) else GraphExecutionError
    return cls(msg, n, loc)


class _Tuner:
    """Times each candidate kernel of a step on the first runs, then installs the fastest."""

    def __init__(self, executor, step, candidates, runs: int) -> None:
        self.executor = executor
        self.step = step
        self.cands = list(candidates)
        self.runs = max(1, runs)
        self.times: list[list[float]] = [[] for _ in self.cands]
        self.calls = 0
        sync = None
        if step.device_type != "cpu":
            from flow.registry import get_device_type

            sync = get_device_type(step.device_type).synchronize
        self.sync = sync

    def __call__(self, *args, **kwargs):
        k = self.calls % len(self.cands)
        fn = self.cands[k][1]
        if self.sync is not None:
            self.sync(None)
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if self.sync is not None:
            self.sync(None)
        self.times[k].append(time.perf_counter() - t0)
        self.calls += 1
        if self.calls >= self.runs * len(self.cands):
            best = min(range(len(self.cands)), key=lambda i: min(self.times[i]))
            self.executor.choose(self.step, best, {n: min(t) for (n, _), t in zip(self.cands, self.times)})
        return out


class Executor:
    """Runs a plan: ``run(inputs, states, hosts) -> (outputs, new state values)`` on raw arrays."""

    def __init__(self, plan, config=None) -> None:
        self.plan = plan
        self.mode = getattr(config, "executor", "static")
        self.autotune_runs = int(getattr(config, "autotune_runs", 2))
        self.choices: dict[int, dict] = {}  # node id -> {"chosen": name, "times": {name: seconds}}
        self._env: dict = {"np": np, "_asarray": np.asarray}
        self.memory = getattr(plan, "memory", None)  # memory planning: arena views as globals, out= per step
        if self.memory is not None:
            self.memory.bind(self._env)
        src = self._codegen()
        self.source = src
        code = compile(src, f"<flow.graph {plan.name}>", "exec")
        exec(code, self._env)
        self._fn = self._env["_step"]
        self._code = self._fn.__code__
        for st in plan.steps:
            if st.candidates:
                self._env[f"k{st.index}"] = _Tuner(self, st, st.candidates, self.autotune_runs)

    # -- code generation --------------------------------------------------------------------
    def _const(self, value, prefix: str) -> str:
        if (
            value is None
            or value is True
            or value is False
            or (type(value) is int)
            or (type(value) is str and len(value) < 64)
        ):
            return repr(value)
        name = f"{prefix}{len(self._env)}"
        self._env[name] = value
        return name

    def _codegen(self) -> str:
        plan = self.plan
        env = self._env
        L = ["def _step(I, S, H):"]
        if plan.input_slots:
            L.append("    " + "".join(f"v{s}, " for s in plan.input_slots) + "= I")
        if plan.state_slots:
            L.append("    " + "".join(f"v{s}, " for s in plan.state_slots) + "= S")
        if plan.host_slots:
            L.append("    " + "".join(f"v{s}, " for s in plan.host_slots) + "= H")
        for slot, arr in plan.const_slots.items():
            env[f"v{slot}"] = arr  # constants are globals of the function
        self.step_lines: dict[int, int] = {}
        for st in plan.steps:
            env[f"k{st.index}"] = st.kernel
            args = []
            for kind, a in st.args:
                if kind == "s":
                    args.append(f"v{a}")
                elif kind == "l":
                    args.append("[" + ", ".join(f"v{x}" for x in a) + "]")
                else:
                    args.append(self._const(a, "c"))
            for k, v in st.attrs.items():
                args.append(f"{k}={self._const(v, 'a')}")
            out = self.memory.out_arg(st.index) if self.memory is not None else None
            if out is not None:
                args.append(f"out={out}")
            call = f"k{st.index}({', '.join(args)})"
            if st.scalar_out:
                call = f"_asarray({call})"
            if len(st.outs) == 1 and not st.node.tags.get("multi_output"):
                lhs = f"v{st.outs[0]}"
            else:
                lhs = "".join(f"v{o}, " for o in st.outs)
            self.step_lines[len(L) + 1] = st.index
            L.append(f"    {lhs} = {call}")
            frees = [f"v{s}" for s in st.frees if s not in plan.const_slots]
            if frees:
                L.append(f"    del {', '.join(frees)}")
        outs = "".join(f"v{s}, " if isinstance(s, int) else f"{self._const(s[1], 'c')}, " for s in plan.output_slots)
        ups = "".join(f"v{s}, " for _, s in plan.update_slots)
        L.append(f"    return ({outs}), ({ups})")
        return "\n".join(L) + "\n"

    # -- running ------------------------------------------------------------------------------
    def run(self, inputs, states, hosts):
        tok = fp_set(FP_IGNORE)  # kernels give inf/nan silently, as in eager mode (flow._fpstate)
        try:
            if self.mode == "dataflow":
                return self._run_dataflow(inputs, states, hosts)
            if PROFILE_HOOK is not None:
                return PROFILE_HOOK(self, inputs, states, hosts)
            return self._fn(inputs, states, hosts)
        except Exception as e:
            if self.mode == "dataflow":
                raise
            step = self._failed_step(e)
            if step is None:
                raise
            raise _located_error(self.plan, step, e) from e
        finally:
            fp_reset(tok)

    def _failed_step(self, err):
        tb = err.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code is self._code:
                i = self.step_lines.get(tb.tb_lineno)
                return self.plan.steps[i] if i is not None else None
            tb = tb.tb_next
        return None

    def _run_dataflow(self, inputs, states, hosts):
        plan = self.plan
        values: list = [None] * plan.n_slots
        for s, a in zip(plan.input_slots, inputs):
            values[s] = a
        for s, a in zip(plan.state_slots, states):
            values[s] = a
        for s, a in zip(plan.host_slots, hosts):
            values[s] = a
        for s, a in plan.const_slots.items():
            values[s] = a
        current = {}

        def kern(st):
            return self._env[f"k{st.index}"]

        for st in plan.steps:
            current[st.index] = st.kernel
            st.kernel = kern(st)
        try:
            run_dataflow(plan, values)
        except FlowError:
            raise
        except Exception as e:
            failed = next((st for st in plan.steps if any(values[o] is None for o in st.outs)), None)
            if failed is None:
                raise
            raise _located_error(plan, failed, e) from e
        finally:
            for st in plan.steps:
                st.kernel = current[st.index]
        outs = tuple(values[s] if isinstance(s, int) else s[1] for s in plan.output_slots)
        return outs, tuple(values[s] for _, s in plan.update_slots)

    # -- autotuning ---------------------------------------------------------------------------
    def choose(self, step, best: int, times: dict) -> None:
        name, fn = step.candidates[best]
        self._env[f"k{step.index}"] = fn
        self.choices[step.node.id] = {"op": step.node.name, "chosen": name, "times": times}

    @property
    def tuning(self) -> bool:
        return any(isinstance(self._env.get(f"k{st.index}"), _Tuner) for st in self.plan.steps if st.candidates)
