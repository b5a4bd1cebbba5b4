"""PyTorch-compatibility namespaces scripts import at the top even on one CPU: flow.cuda (answered by
flow-cuda when it provides the device), flow.cuda.amp, flow.accelerator, flow.backends.*, the legacy
tensor types, memory formats, finfo / iinfo, thread counts, tensor predicates and nn.DataParallel.
Compared with torch where it is installed."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import flow
import flow.nn as nn
from flow.errors import FeatureNotInstalledError, FlowError
from flow.plugins import hookimpl

ALL_DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"]
FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int64", "int32", "int16", "int8", "uint8"]
LEGACY = {
    "FloatTensor": "float32",
    "DoubleTensor": "float64",
    "HalfTensor": "float16",
    "BFloat16Tensor": "bfloat16",
    "LongTensor": "int64",
    "IntTensor": "int32",
    "ShortTensor": "int16",
    "CharTensor": "int8",
    "ByteTensor": "uint8",
    "BoolTensor": "bool",
}


def _torch():
    return pytest.importorskip("torch")


# -- flow.cuda ---------------------------------------------------------------------------------------
QUERIES = [
    ("is_available", ()),
    ("device_count", ()),
    ("is_initialized", ()),
    ("is_bf16_supported", ()),
    ("get_arch_list", ()),
    ("manual_seed", (1,)),
    ("manual_seed_all", (1,)),
    ("seed", ()),
    ("seed_all", ()),
    ("memory_allocated", ()),
    ("max_memory_allocated", ()),
    ("memory_reserved", ()),
    ("max_memory_reserved", ()),
    ("memory_stats", ()),
    ("empty_cache", ()),
    ("get_rng_state_all", ()),
]
NEEDS_DEVICE = [
    ("current_device", ()),
    ("synchronize", ()),
    ("initial_seed", ()),
    ("get_device_name", ()),
    ("get_device_capability", ()),
    ("get_device_properties", (0,)),
    ("get_rng_state", ()),
    ("init", ()),
    ("mem_get_info", ()),
    ("current_stream", ()),
]


@pytest.mark.parametrize("name,args", QUERIES, ids=[q[0] for q in QUERIES])
def test_cuda_queries_answer_like_torch_without_a_gpu(name, args):
    torch = _torch()
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    assert getattr(flow.cuda, name)(*args) == getattr(torch.cuda, name)(*args)


@pytest.mark.parametrize("name,args", NEEDS_DEVICE, ids=[q[0] for q in NEEDS_DEVICE])
def test_cuda_functions_that_need_a_device_raise_naming_flow_cuda(name, args):
    with pytest.raises(flow.cuda.CudaNotAvailableError, match=rf"flow\.cuda\.{name}\(\): no CUDA device.*flow-cuda"):
        getattr(flow.cuda, name)(*args)
    # the type torch.cuda raises there, and flow's own error type
    assert issubclass(flow.cuda.CudaNotAvailableError, AssertionError)
    assert issubclass(flow.cuda.CudaNotAvailableError, FlowError)


def test_cuda_set_device_and_device_context():
    with pytest.raises(flow.cuda.CudaNotAvailableError, match="set_device"):
        flow.cuda.set_device(0)
    with flow.cuda.device(None):  # a no-op, as in torch
        pass
    with pytest.raises(flow.cuda.CudaNotAvailableError, match=r"device\(1\)"):
        with flow.cuda.device(1):
            pass
    with pytest.raises(ValueError, match="expected a cuda device"):
        flow.cuda.device("cpu")
    with pytest.raises(TypeError, match="device index"):
        flow.cuda.device(1.5)
    with pytest.raises(TypeError, match="seed must be an integer"):
        flow.cuda.manual_seed_all("abc")
    assert not hasattr(flow.cuda, "Stream")  # FeatureNotInstalledError is an AttributeError
    with pytest.raises(FeatureNotInstalledError, match="flow-cuda"):
        _ = flow.cuda.Event
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        _ = flow.cuda.nonsense


def test_cuda_is_the_same_module_from_the_namespace_and_import():
    import flow.cuda as c

    assert flow.cuda is c and flow.cuda.__name__ == "flow.cuda"


@pytest.fixture
def fake_cuda():
    """A plugin that provides flow.cuda's device (as flow-cuda will): a module registered as "cuda"."""
    impl = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 2,
        current_device=lambda: 1,
        set_device=lambda d: calls.append(("set_device", d)),
        synchronize=lambda *a: calls.append(("synchronize",) + a),
        memory_allocated=lambda device=None: 123,
        empty_cache=lambda: calls.append(("empty_cache",)),
        Stream="the provider's Stream",
    )
    calls: list = []
    plugin = types.ModuleType("tests.fake_cuda")
    plugin.flow_register_api = hookimpl(lambda registry: registry.register_api("cuda", impl))
    flow.plugins.register(plugin, name="tests.fake_cuda")
    try:
        yield calls
    finally:
        flow.plugins.unregister("tests.fake_cuda")


def test_a_plugin_providing_cuda_answers_every_name(fake_cuda):
    assert flow.cuda.is_available() and flow.cuda.device_count() == 2 and flow.cuda.current_device() == 1
    flow.cuda.set_device(0)
    flow.cuda.synchronize()
    assert flow.cuda.memory_allocated() == 123
    assert flow.cuda.Stream == "the provider's Stream"  # names only the provider knows
    assert fake_cuda == [("set_device", 0), ("synchronize",)]
    assert flow.accelerator.is_available() and flow.accelerator.device_count() == 2
    assert flow.accelerator.current_accelerator() == flow.device("cuda")
    assert flow.accelerator.current_device_index() == 1
    assert flow.backends.cuda.is_built()


def test_without_the_plugin_cuda_is_back_to_no_device(fake_cuda):
    flow.plugins.unregister("tests.fake_cuda")
    try:
        assert not flow.cuda.is_available() and flow.cuda.device_count() == 0
        assert flow.accelerator.current_accelerator() is None
    finally:
        plugin = types.ModuleType("tests.fake_cuda")
        plugin.flow_register_api = hookimpl(lambda registry: registry.register_api("cuda", types.SimpleNamespace()))
        flow.plugins.register(plugin, name="tests.fake_cuda")  # for the fixture's teardown


# -- flow.cuda.amp -------------------------------------------------------------------------------
def test_cuda_amp_aliases_warn_and_disable_like_torch_without_cuda():
    pytest.importorskip("flow_amp")
    torch = _torch()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a = flow.cuda.amp.autocast()
        s = flow.cuda.amp.GradScaler()
    kinds = [x.category for x in w]
    assert kinds == [FutureWarning, UserWarning, FutureWarning, UserWarning]
    assert isinstance(a, flow.amp.autocast) and a.device_type == "cuda" and a.fast_dtype is flow.float16
    assert isinstance(s, flow.amp.GradScaler) and not s.is_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ta, ts = torch.cuda.amp.autocast(), torch.cuda.amp.GradScaler()
        assert a.enabled == ta._enabled and s.is_enabled() == ts.is_enabled()
    # disabled: a CUDA script runs in full precision on the CPU, the scaler passes the loss through
    with a:
        y = flow.ones(2, 2) @ flow.ones(2, 2)
    assert y.dtype is flow.float32
    loss = flow.tensor(3.0)
    assert s.scale(loss) is loss
    assert flow.cuda.amp.custom_fwd.keywords == {"device_type": "cuda"}


def test_cuda_amp_without_flow_amp_names_the_package():
    from flow.plugins.manager import ensure_loaded, get_plugin_manager

    ensure_loaded()
    mod = get_plugin_manager().get_plugin("amp")
    if mod is not None:
        flow.plugins.unregister("amp")
    try:
        for name in ("autocast", "GradScaler"):
            with pytest.raises(FeatureNotInstalledError, match=rf"flow\.cuda\.amp\.{name}.*flow-amp"):
                getattr(flow.cuda.amp, name)
    finally:
        if mod is not None:
            flow.plugins.register(mod, name="amp")
    with pytest.raises(AttributeError):
        _ = flow.cuda.amp.nonsense


# -- flow.accelerator ---------------------------------------------------------------------------
def test_accelerator_on_a_cpu_only_machine_matches_torch():
    torch = _torch()
    if torch.accelerator.is_available():
        pytest.skip("torch sees an accelerator here")
    assert flow.accelerator.is_available() is torch.accelerator.is_available() is False
    assert flow.accelerator.current_accelerator() is torch.accelerator.current_accelerator() is None
    assert flow.accelerator.device_count() == torch.accelerator.device_count() == 0
    for name, args in [
        ("current_device_index", ()),
        ("set_device_index", (0,)),
        ("synchronize", ()),
        ("empty_cache", ()),
        ("memory_allocated", ()),
    ]:
        with pytest.raises(RuntimeError):
            getattr(torch.accelerator, name)(*args)
        with pytest.raises(flow.accelerator.AcceleratorNotAvailableError, match=f"{name}.*none is available"):
            getattr(flow.accelerator, name)(*args)


# -- flow.backends ---------------------------------------------------------------------------------
def test_backend_flags_have_torch_defaults_and_are_settable():
    torch = _torch()
    cudnn, tcudnn = flow.backends.cudnn, torch.backends.cudnn
    for flag in ("enabled", "benchmark", "deterministic", "allow_tf32"):
        assert getattr(cudnn, flag) == getattr(tcudnn, flag), flag
    assert cudnn.is_available() == tcudnn.is_available() is False and cudnn.version() is tcudnn.version() is None
    for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        assert getattr(flow.backends.cuda.matmul, flag) == getattr(torch.backends.cuda.matmul, flag), flag
    assert flow.backends.cuda.is_built() == torch.backends.cuda.is_built() is False
    assert flow.backends.mps.is_available() == torch.backends.mps.is_available() is False
    assert flow.backends.mps.is_built() == torch.backends.mps.is_built() is False
    assert flow.backends.mkldnn.enabled is True and flow.backends.mkldnn.is_available() is False
    assert isinstance(flow.backends.openmp.is_available(), bool)
    assert flow.backends.cuda.flash_sdp_enabled() == torch.backends.cuda.flash_sdp_enabled()


def test_backend_flags_take_bools_only_and_flags_context_restores():
    cudnn = flow.backends.cudnn
    saved = cudnn.benchmark
    try:
        cudnn.benchmark = True
        assert cudnn.benchmark is True
        with pytest.raises(TypeError, match="benchmark expects a bool, got str"):
            cudnn.benchmark = "yes"
        with cudnn.flags(enabled=False, benchmark=None, deterministic=True):
            assert cudnn.enabled is False and cudnn.benchmark is True and cudnn.deterministic is True
        assert cudnn.enabled is True and cudnn.deterministic is False
        with pytest.raises(TypeError, match="deterministic expects a bool"):
            with cudnn.flags(deterministic=1):
                pass
        assert cudnn.deterministic is False
    finally:
        cudnn.benchmark = saved
    m = flow.backends.cuda.matmul
    m.allow_tf32 = True
    assert m.allow_tf32 is True
    m.allow_tf32 = False
    with pytest.raises(AttributeError, match="has no attribute 'allow_tf33'"):
        m.allow_tf33 = True
    with pytest.raises(TypeError, match="expects a bool"):
        m.allow_tf32 = 1
    flow.backends.cuda.enable_flash_sdp(False)
    assert not flow.backends.cuda.flash_sdp_enabled()
    flow.backends.cuda.enable_flash_sdp(True)


# -- legacy tensor types --------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(LEGACY))
def test_legacy_types_construct_and_check_like_torch(name):
    torch = _torch()
    ftype, ttype = getattr(flow, name), getattr(torch, name)
    assert ftype.dtype is getattr(flow, LEGACY[name])
    assert ftype(2, 3).shape == ttype(2, 3).shape and ftype(2, 3).dtype is ftype.dtype
    assert tuple(ftype(flow.Size([4])).shape) == tuple(ttype(torch.Size([4])).shape)
    assert tuple(ftype().shape) == tuple(ttype().shape) == (0,)
    data = [[1, 0], [2, 3]]
    np.testing.assert_array_equal(ftype(data).numpy().astype(np.float64), ttype(data).float().numpy())
    t = flow.zeros(2, dtype=ftype.dtype)
    assert isinstance(t, ftype) and isinstance(t, flow.Tensor)
    assert t.type() == "flow." + name and ttype(2).type() == "torch." + name
    for other in LEGACY:
        if other != name:
            assert not isinstance(t, getattr(flow, other))
    assert isinstance(flow.nn.Parameter(flow.zeros(1)), flow.FloatTensor)
    assert not isinstance(np.zeros(2), ftype) and not isinstance(1.0, ftype)


def test_legacy_type_conversions():
    torch = _torch()
    x, tx = flow.tensor([1.5, -2.5, 3.0]), torch.tensor([1.5, -2.5, 3.0])
    for dst in ("LongTensor", "DoubleTensor", "ByteTensor", "BoolTensor", "HalfTensor"):
        for f_arg, t_arg in [
            (getattr(flow, dst), getattr(torch, dst)),
            ("flow." + dst, "torch." + dst),
            ("torch." + dst, "torch." + dst),
        ]:
            y, ty = x.type(f_arg), tx.type(t_arg)
            assert y.type() == "flow." + dst
            np.testing.assert_array_equal(y.numpy(), ty.numpy())
    assert x.type(flow.int16).dtype is flow.int16 and x.type(flow.FloatTensor) is x
    assert flow.LongTensor(flow.tensor([1, 2])).tolist() == [1, 2]
    with pytest.raises(TypeError, match="expected a flow.float32 tensor, got flow.int64"):
        flow.FloatTensor(flow.tensor([1, 2]))
    with pytest.raises(ValueError, match="invalid type: 'foo'"):
        x.type("foo")
    with pytest.raises(ValueError, match="invalid type"):
        x.type("flow.meta.FloatTensor")
    with pytest.raises(TypeError, match="expected a legacy tensor type"):
        x.type(3)
    with pytest.raises(TypeError, match="invalid data type 'str'"):
        flow.FloatTensor("abc")
    with pytest.raises(RuntimeError, match="expects device type cpu"):
        flow.FloatTensor(2, device="cuda")
    assert repr(flow.FloatTensor) == "<class 'flow.FloatTensor'>"


# -- memory formats -----------------------------------------------------------------------------------
def test_memory_formats_are_accepted_where_torch_accepts_them():
    torch = _torch()
    x4, x2 = flow.randn(2, 3, 4, 5), flow.randn(2, 3)
    for fmt in ("contiguous_format", "preserve_format", "channels_last"):
        f, t = getattr(flow, fmt), getattr(torch, fmt)
        assert repr(f) == "flow." + fmt and repr(t) == "torch." + fmt
        y = x4.contiguous(memory_format=f)
        np.testing.assert_array_equal(y.numpy(), x4.numpy())
        assert y.is_contiguous()  # flow stays row-major, channels_last too (documented)
        np.testing.assert_array_equal(x4.to(memory_format=f).numpy(), x4.numpy())
        np.testing.assert_array_equal(x4.clone(memory_format=f).numpy(), x4.numpy())
    assert x4.to(flow.float64, memory_format=flow.contiguous_format).dtype is flow.float64
    with pytest.raises(RuntimeError):
        torch.zeros(2, 3).contiguous(memory_format=torch.channels_last)
    with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last"):
        x2.contiguous(memory_format=flow.channels_last)
    with pytest.raises(RuntimeError, match="required rank 5 tensor to use channels_last_3d"):
        x4.to(memory_format=flow.channels_last_3d)
    with pytest.raises(TypeError, match="memory_format must be a flow.memory_format, got str"):
        x2.contiguous(memory_format="channels_last")
    m = nn.Conv2d(3, 4, 3)
    w = m.weight
    assert m.to(memory_format=flow.channels_last) is m and m.weight is w
    import pickle

    assert pickle.loads(pickle.dumps(flow.channels_last)) is flow.channels_last


# -- finfo / iinfo and predicates ---------------------------------------------------------------------
@pytest.mark.parametrize("name", FLOATS)
def test_finfo_matches_torch(name):
    torch = _torch()
    f, t = flow.finfo(getattr(flow, name)), torch.finfo(getattr(torch, name))
    for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
        assert getattr(f, attr) == getattr(t, attr), attr
        assert type(getattr(f, attr)) is type(getattr(t, attr)), attr
    assert repr(f) == repr(t)


@pytest.mark.parametrize("name", INTS)
def test_iinfo_matches_torch(name):
    torch = _torch()
    f, t = flow.iinfo(getattr(flow, name)), torch.iinfo(getattr(torch, name))
    for attr in ("bits", "max", "min", "dtype"):
        assert getattr(f, attr) == getattr(t, attr), attr
    assert repr(f) == repr(t)


def test_finfo_iinfo_errors_and_default():
    assert flow.finfo() == flow.finfo(flow.get_default_dtype())
    assert flow.finfo("float16").eps == 2.0**-10
    with pytest.raises(TypeError, match="requires a floating point dtype, got flow.int32"):
        flow.finfo(flow.int32)
    with pytest.raises(TypeError, match="requires an integer dtype, got flow.float32"):
        flow.iinfo(flow.float32)
    with pytest.raises(TypeError, match="flow.bool is not supported by flow.iinfo"):
        flow.iinfo(flow.bool)
    with pytest.raises(TypeError, match="expected a flow dtype"):
        flow.finfo(3)


def test_tensor_predicates_match_torch():
    torch = _torch()
    for name in ALL_DTYPES:
        f, t = flow.zeros(2, dtype=getattr(flow, name)), torch.zeros(2, dtype=getattr(torch, name))
        assert flow.is_floating_point(f) == torch.is_floating_point(t)
        assert flow.is_complex(f) == torch.is_complex(t)
    for v in (0.0, 0.5, float("nan"), -1):
        assert flow.is_nonzero(flow.tensor([v])) == torch.is_nonzero(torch.tensor([v]))
    for bad in ([1, 2], []):
        with pytest.raises(RuntimeError):
            torch.is_nonzero(torch.tensor(bad))
        with pytest.raises(RuntimeError, match="ambiguous"):
            flow.is_nonzero(flow.tensor(bad))
    with pytest.raises(TypeError, match="must be a Tensor, not list"):
        flow.is_floating_point([1.0])
    x, tx = flow.zeros(1), torch.zeros(1)
    for prop in ("is_sparse", "is_cuda", "is_xpu", "is_mps", "is_quantized", "is_meta", "is_cpu"):
        assert getattr(x, prop) == getattr(tx, prop), prop
    assert flow.get_device(x) == torch.get_device(tx) == x.get_device() == -1
    assert x.is_shared() == tx.is_shared() is False


def test_thread_counts():
    torch = _torch()
    n = flow.get_num_threads()
    try:
        flow.set_num_threads(1)
        assert flow.get_num_threads() == 1
    finally:
        flow.set_num_threads(n)
    for bad, err in [(0, ValueError), (-1, ValueError), (1.5, TypeError), ("2", TypeError)]:
        with pytest.raises(RuntimeError):
            torch.set_num_threads(bad)
        with pytest.raises(err, match="set_num_threads expects"):
            flow.set_num_threads(bad)
    assert flow.get_num_interop_threads() >= 1
    flow.set_num_interop_threads(3)
    assert flow.get_num_interop_threads() == 3
    with pytest.raises(ValueError, match="positive"):
        flow.set_num_interop_threads(0)


# -- nn.DataParallel --------------------------------------------------------------------------------
def test_data_parallel_is_transparent_on_cpu_like_torch():
    torch = _torch()
    m = nn.Linear(3, 2)
    dp = nn.DataParallel(m)
    assert nn.DataParallel is nn.parallel.DataParallel and dp.module is m and dp.device_ids == []
    tm = torch.nn.Linear(3, 2)
    tdp = torch.nn.DataParallel(tm)
    assert dp.device_ids == tdp.device_ids and list(dp.state_dict()) == list(tdp.state_dict())
    assert repr(dp).replace("flow", "torch") == repr(tdp)
    with torch.no_grad():
        tm.weight.copy_(torch.from_numpy(m.weight.detach().numpy()))
        tm.bias.copy_(torch.from_numpy(m.bias.detach().numpy()))
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    out, tout = dp(flow.from_numpy(x)), tdp(torch.from_numpy(x))
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-6)
    out.sum().backward()
    assert m.weight.grad is not None
    assert list(dp.parameters()) == list(m.parameters())
    with pytest.raises(TypeError, match="expected an nn.Module, got str"):
        nn.DataParallel("x")
