"""Bad optimizer and LR-scheduler arguments, parameter groups and state dicts: clear errors naming the optimizer,
the argument and the value, and an optimizer left exactly as it was. Driven by tables over every optimizer, so a
new optimizer without validation fails here."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from _optim_drive import drive, equal, flat_state_cases, plain

import flow
import flow.nn as nn
import flow.optim
from flow.optim import OptimizerError, OptimizerTypeError
from flow.optim import lr_scheduler as S

_EXPORTED = {getattr(flow.optim, n) for n in flow.optim.__all__}
OPTIMIZERS = sorted(
    (
        c
        for c in _EXPORTED
        if inspect.isclass(c) and issubclass(c, flow.optim.Optimizer) and c is not flow.optim.Optimizer
    ),
    key=lambda c: c.__name__,
)

# out-of-range values of every real-valued hyper-parameter an optimizer has (by argument name)
OUT_OF_RANGE = {
    "lr": [-1, -1e-9, math.nan, math.inf],
    "momentum": [-0.1, math.nan],
    "dampening": [-0.1, 1.5],
    "weight_decay": [-1e-3, math.inf],
    "eps": [-1e-8, math.nan],
    "alpha": [-0.1, 1.01],
    "lr_decay": [-0.1],
    "initial_accumulator_value": [-1.0],
    "betas": [(1.0, 0.9), (0.9, -0.1), (0.9, math.nan)],
    "rho": [-0.1, 1.5, math.nan],
    "momentum_decay": [-1e-3, math.nan],
    "lambd": [math.nan, math.inf],
    "t0": [math.nan],
    "etas": [(1.2, 0.5), (0.5, 1.0), (0.0, 1.2)],
    "step_sizes": [(1.0, 0.1), (-1.0, 1.0)],
    "max_iter": [0, -2],
    "max_eval": [0],
    "history_size": [0],
    "tolerance_grad": [-1e-3, math.nan],
    "tolerance_change": [-1e-3, math.inf],
    "line_search_fn": ["wolfe", "strong-wolfe"],
}
# arguments whose range differs from that of the same name elsewhere (ASGD's alpha is an exponent)
OUT_OF_RANGE_OF = {("ASGD", "alpha"): [math.nan, math.inf]}
BAD_SHAPE = {  # the wrong kind of value (a TypeError)
    "betas": [(0.9,), 0.9, (0.9, 0.99, 0.999)],
    "etas": [(0.5,), 0.5],
    "step_sizes": [(1e-6, 1.0, 2.0), 1.0],
}
# wrong-type values of arguments that default to None but are not flags (the default ones are for flags)
WRONG_TYPE = {
    "max_eval": ["abc", 2.5, True, [1]],
    "line_search_fn": [1, 0.0, True, ["strong_wolfe"]],
}
# optimizers that keep one parameter group (torch's LBFGS), with torch's message
ONE_GROUP_ONLY = {"LBFGS": r"^LBFGS doesn't support per-parameter options \(parameter groups\)$"}
# optimizers whose state is of the flat vector of all parameters (kept under the first one), not per element
FLAT_STATE = {"LBFGS"}


def hyper_params(cls) -> dict:
    """``{argument: default}`` of an optimizer's constructor (every argument but ``params``)."""
    sig = inspect.signature(cls.__init__)
    return {k: p.default for k, p in sig.parameters.items() if k not in ("self", "params")}


def params():
    return [nn.Parameter(flow.ones(2, 2)), nn.Parameter(flow.zeros(3))]


def snapshot(opt) -> tuple:
    """Everything an optimizer holds: group options, parameter identities, states, step counts."""
    sd = opt.state_dict()
    groups = [
        {k: (v if k != "params" else [id(p) for p in g["params"]]) for k, v in g.items()} for g in opt.param_groups
    ]
    state = {i: {k: plain(v) for k, v in st.items()} for i, st in sd["state"].items()}
    return groups, state


def same(a, b) -> bool:
    ga, sa = a
    gb, sb = b
    if ga != gb or sorted(sa) != sorted(sb):
        return False
    return all(set(sa[i]) == set(sb[i]) and all(equal(sa[i][k], sb[i][k]) for k in sa[i]) for i in sa)


def trained(cls, steps=2, **kw):
    ps = params()
    opt = cls(ps, **kw)
    for _ in range(steps):
        for p in ps:
            p.grad = flow.ones(*p.shape)
        drive(opt)
    return opt, ps


# -- hyper-parameters --------------------------------------------------------------------------------
def test_every_hyper_parameter_has_cases():
    """Each real-valued argument of each optimizer has out-of-range cases here (a new one must add them)."""
    for cls in OPTIMIZERS:
        for name, default in hyper_params(cls).items():
            if isinstance(default, bool) or default is None:
                continue
            assert name in OUT_OF_RANGE, f"{cls.__name__}({name}=...) has no out-of-range cases"


TYPE_CASES = [(cls, name) for cls in OPTIMIZERS for name in hyper_params(cls)]


@pytest.mark.parametrize("cls, name", TYPE_CASES, ids=[f"{c.__name__}-{n}" for c, n in TYPE_CASES])
def test_a_hyper_parameter_of_the_wrong_type_names_the_optimizer_and_argument(cls, name):
    default = hyper_params(cls)[name]
    if name in WRONG_TYPE:
        bad = list(WRONG_TYPE[name])
    else:
        bad = ["abc", [0.1], object()] if not isinstance(default, bool) and default is not None else ["yes", 1, 0.0]
    bad += BAD_SHAPE.get(name, [])
    for value in bad:
        with pytest.raises(OptimizerTypeError, match=rf"^{cls.__name__}: {name}") as ei:
            cls(params(), **{name: value})
        assert isinstance(ei.value, TypeError) and isinstance(ei.value, flow.errors.FlowError)
        assert type(value).__name__ in str(ei.value)


RANGE_CASES = [
    (cls, name, v)
    for cls in OPTIMIZERS
    for name in hyper_params(cls)
    for v in OUT_OF_RANGE_OF.get((cls.__name__, name), OUT_OF_RANGE.get(name, []))
]


@pytest.mark.parametrize("cls, name, value", RANGE_CASES, ids=[f"{c.__name__}-{n}={v}" for c, n, v in RANGE_CASES])
def test_a_hyper_parameter_out_of_range_names_the_optimizer_argument_and_value(cls, name, value):
    with pytest.raises(OptimizerError, match=rf"^{cls.__name__}: Invalid ") as ei:
        cls(params(), **{name: value})
    assert isinstance(ei.value, ValueError) and not isinstance(ei.value, TypeError)
    msg = str(ei.value)
    assert name in msg
    shown = value if not isinstance(value, tuple) else next(b for b in value if not (0 <= b < 1))
    assert repr(shown) in msg or str(shown) in msg


def test_torch_style_messages_and_cross_argument_rules():
    with pytest.raises(OptimizerError, match="SGD: Invalid learning rate: -1"):
        flow.optim.SGD(params(), lr=-1)
    with pytest.raises(OptimizerError, match="Invalid beta parameter at index 1: 1.0"):
        flow.optim.Adam(params(), betas=(0.9, 1.0))
    with pytest.raises(OptimizerError, match="Nesterov momentum requires a momentum and zero dampening"):
        flow.optim.SGD(params(), lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(OptimizerTypeError, match="SGD: lr must be a real number"):
        flow.optim.SGD(params(), lr="abc")


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_valid_values_of_every_kind_are_accepted(cls):
    hp = hyper_params(cls)
    kw = {"lr": flow.tensor(0.01)} if "lr" in hp else {}
    if "betas" in hp:
        kw["betas"] = [np.float32(0.5), 0]
    if "weight_decay" in hp:
        kw["weight_decay"] = np.float64(0.01)
    if "maximize" in hp:
        kw["maximize"] = np.bool_(True)
    opt, _ = trained(cls, **kw)
    assert opt.param_groups[0]["lr"] is kw["lr"]


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_a_bad_value_set_in_a_group_later_is_caught_at_the_next_step(cls):
    opt, ps = trained(cls)
    before = [p.detach().numpy().copy() for p in ps]
    for value, err, text in (
        ("abc", OptimizerTypeError, "lr must be a real number"),
        (-0.5, OptimizerError, "Invalid learning rate: -0.5"),
    ):
        opt.param_groups[0]["lr"] = value
        with pytest.raises(err, match=f"{cls.__name__}: {text}"):
            drive(opt)
        for p, b in zip(ps, before):
            np.testing.assert_array_equal(p.detach().numpy(), b)
    opt.param_groups[0]["lr"] = 0.01
    drive(opt)  # fine again


# -- parameters and groups ----------------------------------------------------------------------------
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_bad_params_arguments(cls):
    p = nn.Parameter(flow.ones(3))
    leaf = flow.ones(3, requires_grad=True)
    cases = [
        ([], OptimizerError, "empty parameter list"),
        ([{"params": []}], OptimizerError, "empty parameter list"),
        (p, OptimizerTypeError, "got a Tensor"),
        ({p}, OptimizerTypeError, "ordered collections"),
        ({"params": [p]}, OptimizerTypeError, "got a dict"),
        (5, OptimizerTypeError, "iterable of Tensors, got int"),
        (nn.Linear(2, 2), OptimizerTypeError, r"model.parameters\(\)"),
        ([p, np.ones(3)], OptimizerTypeError, r"param_groups\[0\]\['params'\]\[1\] is ndarray"),
        ([p, 3.0], OptimizerTypeError, "is float"),
        ([leaf * 2], OptimizerError, r"non-leaf Tensor \(param_groups\[0\]\['params'\]\[0\]"),
        ([flow.ones(3, dtype=flow.int64)], OptimizerTypeError, "floating-point Tensors.*int64"),
        ([p, p], OptimizerError, "appears more than once"),
        ([{"params": [p]}, {"params": [p]}], OptimizerError, "more than one parameter group"),
        ([{"params": [p]}, p], OptimizerTypeError, "mixes parameter groups"),
        ([{"lr": 0.1}], OptimizerError, "no 'params' entry"),
    ]
    for arg, err, text in cases:
        with pytest.raises(err, match=text):
            cls(arg)
    if cls.__name__ in ONE_GROUP_ONLY:  # two valid groups: refused with torch's message
        with pytest.raises(OptimizerError, match=ONE_GROUP_ONLY[cls.__name__]):
            cls([{"params": [p]}, {"params": [nn.Parameter(flow.ones(2))]}])


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_a_bad_param_group_leaves_the_optimizer_unchanged(cls):
    opt, ps = trained(cls)
    snap = snapshot(opt)
    fresh = nn.Parameter(flow.ones(4))
    bad_groups = [
        ("not a dict", OptimizerTypeError, "param_group must be a dict"),
        ({"params": [fresh], "lr": "fast"}, OptimizerTypeError, "lr must be a real number"),
        ({"params": [fresh], "lr": -3}, OptimizerError, "Invalid learning rate"),
        ({"params": [fresh], "weight_decay": -1}, OptimizerError, "weight_decay"),
        ({"params": [ps[0]]}, OptimizerError, "more than one parameter group"),
        ({"params": [fresh, fresh]}, OptimizerError, "more than once"),
        ({"params": [fresh, flow.ones(2, requires_grad=True) * 3]}, OptimizerError, "non-leaf"),
        ({"params": [flow.zeros(2, dtype=flow.int32)]}, OptimizerTypeError, "floating-point"),
        ({"params": {fresh}}, OptimizerTypeError, "ordered collections"),
        ({"lr": 0.1}, OptimizerError, "no 'params'"),
    ]
    one_group = ONE_GROUP_ONLY.get(cls.__name__)
    if one_group is not None:  # every group is refused, a good one too, with torch's message
        bad_groups = [(g, OptimizerError, one_group) for g, _, _ in bad_groups]
        bad_groups.append(({"params": [fresh], "lr": 0.5}, OptimizerError, one_group))
    for group, err, text in bad_groups:
        with pytest.raises(err, match=text):
            opt.add_param_group(group)
        assert len(opt.param_groups) == 1 and same(snapshot(opt), snap), group
    if one_group is not None:  # and it still steps its own parameters
        before = [p.detach().numpy().copy() for p in ps]
        for p in ps:
            p.grad = flow.ones(*p.shape)
        drive(opt)
        assert all(not np.array_equal(p.detach().numpy(), b) for p, b in zip(ps, before))
        return
    opt.add_param_group({"params": [fresh], "lr": 0.5})  # a good one still works
    fresh.grad = flow.ones(4)
    opt.step()
    assert not np.array_equal(fresh.detach().numpy(), np.ones(4))


# -- state dicts --------------------------------------------------------------------------------------
def _bad_state_dicts(cls, good: dict) -> list:
    import copy

    def edit(fn):
        sd = copy.deepcopy(
            {
                "state": {i: dict(st) for i, st in good["state"].items()},
                "param_groups": [dict(g) for g in good["param_groups"]],
            }
        )
        fn(sd)
        return sd

    first = next(iter(good["state"].values()), {})
    name = next((k for k in first if k != "step"), None)
    cases = [
        ("not a dict", OptimizerTypeError, "expects a dict"),
        ({"state": {}}, OptimizerError, "no 'param_groups'"),
        (
            edit(lambda sd: sd["param_groups"].append(dict(sd["param_groups"][0]))),
            OptimizerError,
            "has 2 parameter groups, but the optimizer has 1",
        ),
        (
            edit(lambda sd: sd["param_groups"][0].update(params=[0])),
            OptimizerError,
            "group 0 with 1 parameters, which doesn't match",
        ),
        (edit(lambda sd: sd["param_groups"][0].update(params=[0, 0])), OptimizerError, "more than once"),
        (edit(lambda sd: sd["param_groups"][0].update(params=[0, "1"])), OptimizerTypeError, "int index"),
        (
            edit(lambda sd: sd["param_groups"][0].update(lr=-1.0)),
            OptimizerError,
            r"Invalid learning rate: -1.0 .*in param_groups\[0\] of the loaded state dict",
        ),
        (edit(lambda sd: sd["param_groups"][0].update(lr="x")), OptimizerTypeError, "lr must be a real number"),
        (edit(lambda sd: sd["state"].update({7: {}})), OptimizerError, "state for parameter 7"),
        (edit(lambda sd: sd["state"].update({0: {"bogus": flow.zeros(2, 2)}})), OptimizerError, "has 'bogus', which"),
        (edit(lambda sd: sd["state"].update({0: "x"})), OptimizerTypeError, "must be a dict"),
    ]
    if cls.__name__ in FLAT_STATE:
        cases += flat_state_cases(edit)
    elif name is not None:
        cases += [
            (
                edit(lambda sd: sd["state"][0].update({name: flow.zeros(3)})),
                OptimizerError,
                rf"'{name}' of parameter 0 has shape \(3,\), but the parameter has shape \(2, 2\)",
            ),
            (
                edit(lambda sd: sd["state"][1].update({name: flow.zeros(2, 2)})),
                OptimizerError,
                r"has shape \(2, 2\), but the parameter has shape \(3,\)",
            ),
            (edit(lambda sd: sd["state"][0].update({name: "zeros"})), OptimizerTypeError, "Tensor or an array"),
        ]
    if cls._has_step and "step" in first:
        cases += [
            (edit(lambda sd: sd["state"][0].update(step=flow.tensor(-1.0))), OptimizerError, "step"),
            (edit(lambda sd: sd["state"][0].update(step=flow.tensor(1.5))), OptimizerError, "whole number"),
            (edit(lambda sd: sd["state"][0].update(step=flow.tensor(math.nan))), OptimizerError, "step"),
        ]
    return cases


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_a_mismatched_state_dict_is_an_error_and_changes_nothing(cls):
    kw = {"momentum": 0.9} if "momentum" in hyper_params(cls) else {}
    src, _ = trained(cls, steps=3, **kw)
    good = src.state_dict()
    opt, ps = trained(cls, steps=1, **kw)
    twin, tps = trained(cls, steps=1, **kw)
    snap = snapshot(opt)
    for sd, err, text in _bad_state_dicts(cls, good):
        with pytest.raises(err, match=text):
            opt.load_state_dict(sd)
        assert same(snapshot(opt), snap), text
    for o, qs in ((opt, ps), (twin, tps)):  # and it trains exactly as an optimizer that never saw them
        for q in qs:
            q.grad = flow.ones(*q.shape) * 0.5
        drive(o)
    for a, b in zip(ps, tps):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    opt.load_state_dict(good)  # the good one loads
    (g1,), st1 = snapshot(opt)
    (g2,), st2 = snapshot(src)
    g1.pop("params"), g2.pop("params")
    assert same(([g1], st1), ([g2], st2))


# -- LR schedulers ---------------------------------------------------------------------------------
def _opt():
    return flow.optim.SGD(params(), lr=0.1, momentum=0.9)


def _adam():
    return flow.optim.Adam(params(), lr=0.1)


SCHED_CASES = [
    (lambda o: S.StepLR(o, "3"), OptimizerTypeError, "StepLR: step_size must be an int"),
    (lambda o: S.StepLR(o, 0), OptimizerError, r"StepLR: Invalid step_size: 0 \(step_size must be >= 1\)"),
    (lambda o: S.StepLR(o, 3, gamma=-0.5), OptimizerError, "StepLR: Invalid gamma: -0.5"),
    (lambda o: S.StepLR(o, 3, gamma="x"), OptimizerTypeError, "StepLR: gamma must be a real number"),
    (lambda o: S.StepLR(o, 3, last_epoch=-2), OptimizerError, "last_epoch"),
    (lambda o: S.StepLR(o, 3, last_epoch=1.5), OptimizerTypeError, "last_epoch must be an int"),
    (lambda o: S.MultiStepLR(o, [2, -1]), OptimizerError, r"milestones\[1\]"),
    (lambda o: S.MultiStepLR(o, 5), OptimizerTypeError, "milestones must be a list of ints"),
    (lambda o: S.MultiStepLR(o, [2.5]), OptimizerTypeError, r"milestones\[0\] must be an int"),
    (lambda o: S.ExponentialLR(o, math.nan), OptimizerError, "ExponentialLR: Invalid gamma: nan"),
    (lambda o: S.CosineAnnealingLR(o, 0), OptimizerError, "T_max"),
    (lambda o: S.CosineAnnealingLR(o, 10, eta_min=-1), OptimizerError, "eta_min"),
    (lambda o: S.ConstantLR(o, factor=1.5), OptimizerError, "Constant multiplicative factor"),
    (lambda o: S.ConstantLR(o, factor=0.0), OptimizerError, "Constant multiplicative factor"),
    (lambda o: S.ConstantLR(o, total_iters=-1), OptimizerError, "total_iters"),
    (lambda o: S.LinearLR(o, start_factor=0), OptimizerError, "Starting multiplicative factor"),
    (lambda o: S.LinearLR(o, end_factor=2), OptimizerError, "Ending multiplicative factor"),
    (lambda o: S.LinearLR(o, total_iters=0), OptimizerError, "total_iters"),
    (lambda o: S.LambdaLR(o, 0.5), OptimizerTypeError, "lr_lambda must be a function"),
    (lambda o: S.LambdaLR(o, [lambda e: 1.0, lambda e: 1.0]), OptimizerError, "Expected 1 lr_lambdas"),
    (lambda o: S.MultiplicativeLR(o, [None]), OptimizerTypeError, r"lr_lambda\[0\] must be a function"),
    (
        lambda o: S.SequentialLR(o, [S.ExponentialLR(o, 0.9), S.ExponentialLR(o, 0.9)], [3, 5]),
        OptimizerError,
        "one milestone fewer",
    ),
    (
        lambda o: S.SequentialLR(o, [S.ExponentialLR(o, 0.9)] * 3, [3, 2]),
        OptimizerError,
        "SequentialLR: milestones must be strictly increasing",
    ),
    (lambda o: S.SequentialLR(o, [S.ExponentialLR(o, 0.9), "x"], [3]), OptimizerTypeError, "schedulers"),
    (lambda o: S.SequentialLR(o, [], []), OptimizerError, "at least one scheduler"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1), OptimizerError, "total_steps"),
    (lambda o: S.OneCycleLR(o, max_lr=-0.1, total_steps=10), OptimizerError, "max_lr"),
    (lambda o: S.OneCycleLR(o, max_lr=[0.1, 0.2], total_steps=10), OptimizerError, "expected 1 values for max_lr"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=0), OptimizerError, "total_steps"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=1.5), OptimizerTypeError, "total_steps must be an int"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, epochs=2, steps_per_epoch=0), OptimizerError, "steps_per_epoch"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=10, pct_start=1.5), OptimizerError, "pct_start"),
    (
        lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=10, anneal_strategy="cosine"),
        OptimizerError,
        "anneal_strategy must be one of 'cos', 'linear'",
    ),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=10, div_factor=0), OptimizerError, "div_factor"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=10, final_div_factor=-1), OptimizerError, "final_div_factor"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=10, max_momentum=1.5), OptimizerError, "max_momentum"),
    (lambda o: S.OneCycleLR(o, max_lr=0.1, total_steps=10, three_phase="no"), OptimizerTypeError, "three_phase"),
    (lambda o: S.ReduceLROnPlateau(o, factor=1.0), OptimizerError, "Factor"),
    (lambda o: S.ReduceLROnPlateau(o, factor=-0.1), OptimizerError, "Factor"),
    (lambda o: S.ReduceLROnPlateau(o, mode="lowest"), OptimizerError, "mode must be one of 'min', 'max'"),
    (lambda o: S.ReduceLROnPlateau(o, threshold_mode="pct"), OptimizerError, "threshold_mode"),
    (lambda o: S.ReduceLROnPlateau(o, patience=-1), OptimizerError, "patience"),
    (lambda o: S.ReduceLROnPlateau(o, patience=2.5), OptimizerTypeError, "patience must be an int"),
    (lambda o: S.ReduceLROnPlateau(o, cooldown=-1), OptimizerError, "cooldown"),
    (lambda o: S.ReduceLROnPlateau(o, threshold=-1e-4), OptimizerError, "threshold"),
    (lambda o: S.ReduceLROnPlateau(o, min_lr=-1), OptimizerError, "min_lr"),
    (lambda o: S.ReduceLROnPlateau(o, min_lr=[0, 0]), OptimizerError, "expected 1 values for min_lr"),
    (lambda o: S.ReduceLROnPlateau(o, eps="tiny"), OptimizerTypeError, "eps must be a real number"),
    (lambda o: S.CosineAnnealingWarmRestarts(o, 0), OptimizerError, r"Invalid T_0: 0 \(T_0 must be >= 1\)"),
    (lambda o: S.CosineAnnealingWarmRestarts(o, 3, T_mult=1.5), OptimizerTypeError, "T_mult must be an int"),
    (lambda o: S.PolynomialLR(o, total_iters=0), OptimizerError, "PolynomialLR: Invalid total_iters: 0"),
    (lambda o: S.PolynomialLR(o, power=math.nan), OptimizerError, "PolynomialLR: Invalid power: nan"),
    (lambda o: S.CyclicLR(o, 0.01, 0.1, mode="sine"), OptimizerError, "CyclicLR: Invalid mode: 'sine'"),
    (lambda o: S.CyclicLR(o, 0.01, [0.1, 0.2]), OptimizerError, "expected 1 values for max_lr"),
    (lambda o: S.CyclicLR(o, 0.01, 0.1, base_momentum=-0.1), OptimizerError, "base_momentum"),
    (lambda o: S.ChainedScheduler(o), OptimizerTypeError, "ChainedScheduler: schedulers must be a list"),
]


@pytest.mark.parametrize("i", range(len(SCHED_CASES)))
def test_lr_scheduler_arguments(i):
    make, err, text = SCHED_CASES[i]
    o = _opt()
    snap = snapshot(o)
    with pytest.raises(err, match=text):
        make(o)
    if "SequentialLR" not in text and "milestone" not in text and "scheduler" not in text:
        assert same(snapshot(o), snap) and "initial_lr" not in o.param_groups[0]  # nothing written yet


def test_every_scheduler_has_cases():
    """Each scheduler in lr_scheduler.__all__ has bad-argument cases above (a new one must add them)."""
    import re
    import sys

    covered = set(re.findall(r"S\.(\w+)\(o", inspect.getsource(sys.modules[__name__])))
    assert set(S.__all__) - {"LRScheduler"} <= covered


def test_lr_scheduler_runtime_arguments():
    o = _opt()
    s = S.StepLR(o, 2)
    with pytest.raises(OptimizerTypeError, match="StepLR: epoch must be an int"):
        s.step("3")
    with pytest.raises(OptimizerError, match="StepLR: Invalid epoch: -2"):
        s.step(-2)
    with pytest.raises(OptimizerTypeError, match="load_state_dict expects a dict"):
        s.load_state_dict([1, 2])
    p = S.ReduceLROnPlateau(_opt())
    with pytest.raises(OptimizerTypeError, match="ReduceLROnPlateau: metrics must be a real number"):
        p.step("loss")
    p.step(flow.tensor(0.5))
    p.step(np.float32(0.4))
    with pytest.raises(TypeError, match="not an Optimizer"):
        S.StepLR(object(), 3)
    a = S.OneCycleLR(_adam(), max_lr=0.1, total_steps=2, max_momentum=0.99)
    a.step()
    a.step()
    with pytest.raises(OptimizerError, match="Tried to step 3 times"):
        a.step()


def test_list_betas_work_in_graph_mode():
    m = nn.Linear(3, 2)
    opt = flow.optim.LAMB(m.parameters(), lr=0.01, betas=[0.9, 0.99])

    class Step(nn.Graph):
        def __init__(self):
            super().__init__()
            self.m = m
            self.add_optimizer(opt)

        def build(self, x):
            loss = (self.m(x) ** 2).mean()
            loss.backward()
            return loss

    step, x = Step(), flow.randn(4, 3)
    first = step(x).item()
    for _ in range(5):
        last = step(x).item()
    assert last < first


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=lambda c: c.__name__)
def test_a_bad_gradient_or_parameter_anywhere_stops_the_step_before_any_update(cls):
    a, b, c = nn.Parameter(flow.ones(3)), nn.Parameter(flow.ones(2)), nn.Parameter(flow.ones(4))
    if cls.__name__ in ONE_GROUP_ONLY:  # one group of the three: c is its third parameter
        opt, where = cls([a, b, c]), r"param_groups\[0\]\['params'\]\[2\]"
    else:
        opt, where = cls([{"params": [a, b]}, {"params": [c]}]), r"param_groups\[1\]\['params'\]\[0\]"
    for p in (a, b, c):
        p.grad = flow.ones(*p.shape)
    drive(opt)
    snap, values = snapshot(opt), [p.detach().numpy().copy() for p in (a, b, c)]
    c.grad = flow.ones(5)  # the last parameter's gradient has the wrong size
    with pytest.raises(OptimizerError, match=where + r" of shape \(4,\) has a gradient of shape \(5,\)"):
        drive(opt)
    ro = np.ones(4, np.float32)
    ro.flags.writeable = False
    c.grad, c.data = flow.ones(4), flow.from_numpy(ro)
    with pytest.raises(OptimizerError, match="read-only"):
        drive(opt)
    assert same(snapshot(opt), snap)
    for p, v in zip((a, b), values):
        np.testing.assert_array_equal(p.detach().numpy(), v)
