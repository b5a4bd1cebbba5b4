"""Bad input as part of an op's contract: :class:`ErrorInput` and how opcheck runs it.

An op's ``samples()`` yields, besides the calls that must work (:class:`SampleInput`), calls it
must reject (:class:`ErrorInput`): which flow exception, and a fragment of its message. opcheck
adds the ones the schema implies — each tensor input given a dtype its rule rejects, each
attribute with choices given a value that is none of them, each typed attribute a value of
another type, and on a device other than the CPU, one tensor left on the CPU — and checks on
every device that each raises a :class:`~flow.errors.FlowError` of the declared kind. Unless
the error depends on the values (``values=True``: an index out of range), the meta rule alone
must raise it too, so that it is raised before any kernel runs, in eager and in graph mode.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from flow import _dtype as D
from flow.errors import FlowError, OpError, OpTypeError


@dataclass
class ErrorInput:
    """A call the op must reject with ``error`` (a FlowError subclass) whose message contains ``match``.

    ``values=True``: the error depends on the tensors' values, not only on their shapes and
    dtypes (an index out of range), so the kernel raises it, and shape-only devices skip it.
    Tensors are given on the CPU; opcheck moves them to each device (dtypes are kept as given).
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    error: type = OpError
    match: str = ""
    values: bool = False
    note: str = ""  # what is wrong, for the failure message (filled in for generated inputs)
    on_cpu: tuple | None = None  # (i, j): input i (element j of a list, or None) stays on the CPU


# The dtypes generated wrong-dtype inputs are drawn from: one of each kind a rule may reject.
_PROBE_DTYPES = (D.float32, D.int64, D.int32, D.uint8, D.bool)


def split(items) -> tuple[list, list]:
    """The valid samples and the error inputs of what an op's ``samples()`` yielded."""
    from flow.testing.checks import SampleInput

    good, bad = [], []
    for s in items:
        if isinstance(s, ErrorInput):
            bad.append(s)
        elif isinstance(s, SampleInput):
            good.append(s)
        else:
            from flow.testing.checks import OpCheckError

            raise OpCheckError(f"samples must be SampleInput or ErrorInput, got {type(s).__name__}")
    return good, bad


def _is_tensor(x) -> bool:
    from flow._tensor import Tensor

    return isinstance(x, Tensor)


def _is_tensor_list(x) -> bool:
    return isinstance(x, (list, tuple)) and bool(x) and all(_is_tensor(t) for t in x)


def _cast(x, dt):
    if _is_tensor(x):
        return x.detach().to(dt)
    return type(x)(t.detach().to(dt) for t in x)


def generated(op, samples: list, device: str | None = None) -> list[ErrorInput]:
    """The error inputs an op's schema implies, built from its first valid samples."""
    out: list[ErrorInput] = []
    out += _wrong_dtypes(op, samples)
    out += _bad_attrs(op, samples)
    if device is not None and device != "cpu":
        out += _mixed_devices(op, samples)
    return out


def _wrong_dtypes(op, samples) -> list[ErrorInput]:
    out = []
    ins = op.schema.inputs
    for k, spec in enumerate(ins):
        rule = spec.dtypes
        if rule is None:
            continue
        s = next(
            (s for s in samples if k < len(s.args) and (_is_tensor(s.args[k]) or _is_tensor_list(s.args[k]))), None
        )
        if s is None:
            continue
        probes = [dt for dt in _PROBE_DTYPES if not rule.accepts(dt)]
        if rule.names is None:  # a rule of kinds rejects all dtypes of a kind alike: probe one of each
            seen: set = set()
            probes = [dt for dt in probes if not (dt.category in seen or seen.add(dt.category))]
        if not op.eager_meta and any(other.dtypes == rule for other in ins[:k]):
            continue  # done with the earlier input of this rule (below)
        for dt in probes:
            args = list(s.args)
            args[k] = _cast(args[k], dt)
            if not op.eager_meta:
                # inputs of these ops share a dtype (their dispatch checks the first): change all that
                # have this input's rule
                for j, other in enumerate(ins):
                    if j > k and other.dtypes == rule and j < len(args) and _is_tensor(args[j]):
                        args[j] = _cast(args[j], dt)
            frag = f"'{spec.name}' must hold" if spec.variadic else f"'{spec.name}' must be"
            out.append(
                ErrorInput(
                    tuple(args),
                    dict(s.kwargs),
                    OpTypeError,
                    frag,
                    note=f"'{spec.name}' of dtype {dt}, which {rule!r} rejects",
                )
            )
    return out


def _bad_attrs(op, samples) -> list[ErrorInput]:
    out = []
    if not samples:
        return out
    base = samples[0]
    for a in op.schema.attrs:
        s = next((s for s in samples if a.name in s.kwargs), base)
        kw = dict(s.kwargs)
        if a.choices is not None:
            kw[a.name] = "__not_a_choice__"
            out.append(
                ErrorInput(
                    s.args,
                    kw,
                    OpError,
                    f"attribute '{a.name}' must be one of",
                    note=f"attribute '{a.name}' not one of its choices",
                )
            )
            continue
        if a.type is object:
            continue
        types = a.type if isinstance(a.type, tuple) else (a.type,)
        wrong = "not-a-value" if str not in types else [1]
        kw = dict(s.kwargs)
        kw[a.name] = wrong
        out.append(
            ErrorInput(
                s.args,
                kw,
                OpTypeError,
                f"attribute '{a.name}' must be",
                note=f"attribute '{a.name}' of type {type(wrong).__name__}",
            )
        )
    return out


def _mixed_devices(op, samples) -> list[ErrorInput]:
    """One tensor left on the CPU while the others move to the device checked."""
    for s in samples:
        spots = [(i, None) for i, a in enumerate(s.args) if _is_tensor(a)]
        spots += [(i, j) for i, a in enumerate(s.args) if _is_tensor_list(a) and len(a) > 1 for j in range(len(a))]
        if len(spots) < 2:
            continue
        i, j = spots[-1]
        return [
            ErrorInput(s.args, dict(s.kwargs), OpError, "same device", note=f"input {i} left on the CPU", on_cpu=(i, j))
        ]
    return []


def check(op, errors: list[ErrorInput], infos: dict, report: dict) -> None:
    """Run every error input on every device; raise OpCheckError naming the first that misbehaves."""
    import flow
    from flow._dispatch import _meta_inputs
    from flow.testing.checks import _convert

    name = op.name
    for dev, info in infos.items():
        shape_only = bool(info.extra.get("shape_only"))
        todo = list(errors) + generated(op, report["_samples"], dev)
        for ei, e in enumerate(todo):
            if e.values and shape_only:
                continue
            pin = e.on_cpu
            args = tuple(
                a if pin is not None and pin[0] == i and pin[1] is None else _convert(a, None, dev)
                for i, a in enumerate(e.args)
            )
            if pin is not None and pin[1] is not None:
                seq = list(args[pin[0]])
                seq[pin[1]] = e.args[pin[0]][pin[1]]
                args = args[: pin[0]] + (type(e.args[pin[0]])(seq),) + args[pin[0] + 1 :]
            what = f" ({e.note})" if e.note else ""
            where = f"op '{name}' error input {ei}{what} on device '{dev}'"
            _expect(where, e, functools.partial(flow.ops.call, name, *args, **e.kwargs), "the call")
            if not e.values:
                _expect(where, e, functools.partial(op.meta, *_meta_inputs(args), **e.kwargs), "the meta rule")
            report["errors_checked"] += 1


def _expect(where: str, e: ErrorInput, fn, who: str) -> None:
    from flow.testing.checks import OpCheckError

    want = f"{e.error.__name__}" + (f" matching {e.match!r}" if e.match else "")
    try:
        fn()
    except FlowError as err:
        if not isinstance(err, e.error):
            raise OpCheckError(f"{where}: expected {want} from {who}, got {type(err).__name__}: {err}") from err
        if e.match and e.match not in str(err):
            raise OpCheckError(f"{where}: expected {want} from {who}, got the message: {err}") from err
        if "failed for inputs with shapes" in str(err):
            raise OpCheckError(f"{where}: the kernel failed and the meta rule did not explain it: {err}") from err
        return
    except Exception as err:
        raise OpCheckError(
            f"{where}: expected {want} from {who}, got a non-flow exception {type(err).__name__}: {err}"
        ) from err
    raise OpCheckError(f"{where}: expected {want} from {who}, but it succeeded")
