"""flow.provided: names of flow's API that a plugin provides (flow.placement, Tensor.to_global, ...).

Without the plugin they raise FeatureNotInstalledError naming the package; with it they answer
with what it registered, and removing the plugin takes them away again. A test-only "global"
array kind stands in for flow-dist's.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import flow
from flow import array_kinds, provided
from flow.errors import FeatureNotInstalledError, FlowError, PluginError, RegistrationError
from flow.plugins import hookimpl
from flow.registry import REGISTRY


class FakePlacement:
    def __init__(self, ranks):
        self.ranks = list(ranks)

    def __eq__(self, other):
        return isinstance(other, FakePlacement) and other.ranks == self.ranks

    __hash__ = None


class HalfArray:
    """A 'global' array of two ranks split on dim 0, of which this process holds piece 0."""

    is_global = True

    def __init__(self, whole: np.ndarray, placement, sbp):
        self.shape, self.dtype, self.ndim, self.size = whole.shape, whole.dtype, whole.ndim, whole.size
        self.local = np.array_split(whole, 2)[0] if sbp == ("S0",) else whole
        self.placement, self.sbp = placement, sbp


def _global_factory(t, placement, sbp):
    return array_kinds.wrap(HalfArray(t.numpy(), placement, sbp), t.device)


def _to_local(t):
    return flow.from_numpy(t._data.local)


def _module_to_global(m, placement, sbp):
    m.seen = (placement, sbp)
    return m


@pytest.fixture
def without_dist():
    """Where flow-dist and flow-amp are installed (the all-plugins session) they provide these names:
    take them away for the test, and give them back after."""
    from flow.plugins.manager import ensure_loaded, get_plugin_manager

    ensure_loaded()
    removed = []
    for name in ("dist", "amp"):
        mod = get_plugin_manager().get_plugin(name)
        if mod is not None:
            flow.plugins.unregister(name)
            removed.append((name, mod))
    try:
        yield
    finally:
        for name, mod in removed:
            flow.plugins.register(mod, name=name)


@pytest.fixture
def fake_dist(without_dist):
    mod = types.ModuleType("tests.fake_dist")

    def flow_register_api(registry):
        registry.register_api("placement", FakePlacement)
        registry.register_api("global_factory", _global_factory)
        registry.register_api("Tensor.to_local", _to_local)
        registry.register_api("Module.to_global", _module_to_global)
        registry.register_api("global_constant", lambda t, like: _global_factory(t, like.placement, ("B",)))
        registry.register_api("fake_extra", 42)  # a name the core does not know

    mod.flow_register_api = hookimpl(flow_register_api)
    array_kinds.register_array_kind(HalfArray, lambda op, inputs, attrs: NotImplemented)
    flow.plugins.register(mod, name="tests.fake_dist")
    try:
        yield
    finally:
        flow.plugins.unregister("tests.fake_dist")
        array_kinds.unregister_array_kind(HalfArray)


def test_without_the_plugin_the_names_say_which_package_provides_them(without_dist):
    for name in ("placement", "sbp", "env", "comm"):
        with pytest.raises(FeatureNotInstalledError, match="flow-dist"):
            getattr(flow, name)
        assert not hasattr(flow, name)
    with pytest.raises(FeatureNotInstalledError, match="flow-amp"):
        _ = flow.autocast
    x = flow.zeros(2, 3)
    with pytest.raises(FeatureNotInstalledError, match=r"Tensor.to_global.*flow-dist"):
        x.to_global(None, None)
    with pytest.raises(FeatureNotInstalledError, match="flow-dist"):
        flow.zeros(2, placement="p", sbp="s")
    with pytest.raises(FeatureNotInstalledError, match=r"nn.Module.to_global.*flow-dist"):
        flow.nn.Linear(2, 2).to_global("p", "s")
    with pytest.raises(FeatureNotInstalledError, match=r"DistributedDataParallel.*flow-dist"):
        flow.nn.parallel.DistributedDataParallel(flow.nn.Linear(2, 2))
    with pytest.raises(FeatureNotInstalledError, match=r"global_dst_rank.*flow-dist"):
        flow.save({}, "unused.safetensors", global_dst_rank=0)
    with pytest.raises(FeatureNotInstalledError, match=r"global_src_rank.*flow-dist"):
        flow.load("unused.safetensors", global_src_rank=0)


def test_an_unknown_name_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'") as e:
        _ = flow.no_such_name
    assert not isinstance(e.value, FeatureNotInstalledError)
    with pytest.raises(AttributeError):
        _ = flow._private_name


def test_a_local_tensor_is_not_global_and_has_no_placement_or_sbp():
    x = flow.ones(3)
    assert x.is_global is False and x.is_local is True
    with pytest.raises(FlowError, match="local tensor"):
        _ = x.placement
    with pytest.raises(FlowError, match="local tensor"):
        _ = x.sbp


def test_registered_names_answer_and_go_away_with_the_plugin(fake_dist):
    assert flow.placement is FakePlacement
    assert flow.fake_extra == 42
    assert provided.get("Module.to_global") is _module_to_global
    m = flow.nn.Linear(2, 2)
    assert m.to_global("P", "S") is m and m.seen == ("P", "S")
    flow.plugins.unregister("tests.fake_dist")
    try:
        with pytest.raises(FeatureNotInstalledError):
            _ = flow.placement
        with pytest.raises(AttributeError):
            _ = flow.fake_extra
    finally:
        flow.plugins.register(types.SimpleNamespace(), name="tests.fake_dist")  # the fixture removes it


def test_factories_build_the_whole_logical_tensor_and_the_hook_keeps_the_piece(fake_dist):
    p = FakePlacement([0, 1])
    flow.manual_seed(7)
    whole = flow.randn(5, 3)
    flow.manual_seed(7)
    g = flow.randn(5, 3, placement=p, sbp=("S0",), requires_grad=True)
    assert g.is_global and g.shape == (5, 3) and g.placement == p and g.sbp == ("S0",)
    assert g.requires_grad
    np.testing.assert_array_equal(g.to_local().numpy(), whole.numpy()[:3])  # same values, any SBP
    flow.manual_seed(7)
    b = flow.randn(5, 3, placement=p, sbp=("B",))
    np.testing.assert_array_equal(b.to_local().numpy(), whole.numpy())
    z = flow.zeros_like(g)  # *_like of a global tensor is global like it
    assert z.is_global and z.sbp == ("S0",) and z.to_local().shape == (3, 3)
    assert flow.arange(4, placement=p, sbp=("B",)).to_local().tolist() == [0, 1, 2, 3]
    with pytest.raises(FlowError, match="placement= and sbp= go together"):
        flow.ones(2, placement=p)


def test_a_second_provider_needs_override_and_removal_gives_the_first_back(fake_dist):
    other = types.ModuleType("tests.other_dist")
    other.flow_register_api = hookimpl(lambda registry: registry.register_api("placement", dict))
    with pytest.raises(PluginError, match="API name 'placement' is already registered by plugin 'tests.fake_dist'"):
        flow.plugins.register(other, name="tests.other_dist")
    other.flow_register_api = hookimpl(lambda registry: registry.register_api("placement", dict, override=True))
    flow.plugins.register(other, name="tests.other_dist2")
    try:
        assert flow.placement is dict
    finally:
        flow.plugins.unregister("tests.other_dist2")
    assert flow.placement is FakePlacement
    with pytest.raises(RegistrationError, match="public name"):
        REGISTRY.register_api("_hidden", 1)
    with pytest.raises(RegistrationError, match="needs an object"):
        REGISTRY.register_api("nothing", None)


def test_constants_of_composites_follow_their_input(fake_dist):
    from flow._creation import constant_for

    plain = constant_for(flow.ones(2), np.eye(2))
    assert not plain.is_global and plain.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    g = flow.ones(4, 2, placement=FakePlacement([0, 1]), sbp=("S0",))
    c = constant_for(g, np.eye(2))
    assert c.is_global and c.sbp == ("B",) and c.placement == g.placement
    np.testing.assert_array_equal(c.to_local().numpy(), np.eye(2))


def test_saving_a_global_tensor_needs_global_dst_rank(fake_dist, tmp_path):
    g = flow.ones(4, 2, placement=FakePlacement([0, 1]), sbp=("S0",))
    with pytest.raises(flow.serialization.CheckpointError, match=r"'w' is a global tensor; pass global_dst_rank="):
        flow.save({"w": g}, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()
