"""The conformance suites of flow.testing, as a plugin package would use them.

The device suite runs over every op on ``npdev`` (a NumPy-backed second device registered by a
test plugin, which runs the generic kernels where the CPU runs native ones) and on the
shape-only ``meta`` device, and must catch a wrong forward kernel and a wrong backward kernel.
The discovery suite runs against fake installed distributions in subprocesses, and must fail a
plugin that does not register what it declares, one without an entry point and one that needs
a module the machine lacks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import array_device_plugin
import numpy as np
import pytest
from test_plugins import GOOD_PLUGIN, fake_plugin

import flow
from flow.plugins import hookimpl
from flow.testing import OpCheckError, check_op_on_device, device_conformance_suite

NPDEV_PLUGIN = "tests.npdev"


@pytest.fixture(scope="module")
def npdev():
    flow.plugins.register(array_device_plugin, name=NPDEV_PLUGIN)
    yield array_device_plugin.NAME
    flow.plugins.unregister(NPDEV_PLUGIN)


# -- the device suite --------------------------------------------------------------------------------

# What a device plugin's tests do: one test per registered op, forward and backward against the reference.
test_npdev_conformance = pytest.mark.usefixtures("npdev")(device_conformance_suite("npdev"))


def _bad_kernel_plugin(name: str, op: str, factory):
    mod = types.ModuleType(name)
    mod.flow_register_kernels = hookimpl(lambda registry: registry.register_kernel(op, "npdev", factory))
    return mod


def test_the_suite_checks_forward_and_backward_on_the_device(npdev):
    report = check_op_on_device("silu", npdev)
    assert report["devices"] == ["npdev"] and report["samples"] > 0
    assert report["backward_checked"] > 0 and report["errors_checked"] > 0


def test_a_wrong_forward_kernel_fails_the_suite(npdev):
    flow.plugins.register(_bad_kernel_plugin("bad_exp", "exp", lambda x: np.exp(x) * 1.001), name="tests.bad_exp")
    try:
        with pytest.raises(OpCheckError, match=r"op 'exp' sample 0 on device 'npdev'.*differs from the reference"):
            check_op_on_device("exp", npdev)
    finally:
        flow.plugins.unregister("tests.bad_exp")
    check_op_on_device("exp", npdev)  # the generic kernel is back


def test_a_wrong_backward_kernel_fails_the_suite_on_the_op_it_differentiates(npdev):
    # silu's forward is right on npdev; its gradient runs silu_backward there, which is wrong
    def bad(grad, x):
        return grad * 0.5

    flow.plugins.register(_bad_kernel_plugin("bad_silu_bw", "silu_backward", bad), name="tests.bad_silu_bw")
    try:
        with pytest.raises(
            OpCheckError,
            match=r"op 'silu' sample \d+ on device 'npdev' dtype .*backward: "
            r"gradient of input 0 differs from the CPU's",
        ):
            check_op_on_device("silu", npdev, backward=True)
        check_op_on_device("silu", npdev, backward=False)  # forward alone still passes
    finally:
        flow.plugins.unregister("tests.bad_silu_bw")


def test_on_a_shape_only_device_the_suite_checks_shapes(meta_device):
    report = check_op_on_device("matmul", "meta")
    assert report["devices"] == ["meta"] and report["backward_checked"] == 0


def test_an_op_with_kernels_for_other_devices_only_is_skipped_saying_so(npdev):
    from flow.ops.meta import TensorMeta
    from flow.registry import schema

    mod = types.ModuleType("cpu_only")
    mod.flow_register_ops = hookimpl(
        lambda registry: registry.register_op(
            schema("tests_cpu_only_op", ["x"]), meta=lambda x: TensorMeta(tuple(x.shape), x.dtype, x.device)
        )
    )
    mod.flow_register_kernels = hookimpl(
        lambda registry: registry.register_kernel("tests_cpu_only_op", "cpu", lambda x: x)
    )
    flow.plugins.register(mod, name="tests.cpu_only")
    try:
        report = check_op_on_device("tests_cpu_only_op", npdev)
    finally:
        flow.plugins.unregister("tests.cpu_only")
    assert report["skipped"] == [
        "op 'tests_cpu_only_op' (plugin 'tests.cpu_only') has no kernel for 'npdev' and "
        "no generic kernel (it has kernels for: cpu)"
    ]


def test_an_unknown_device_type_is_named():
    with pytest.raises(OpCheckError, match="no device type 'nodev' is registered"):
        check_op_on_device("add", "nodev")


# -- the discovery suite -----------------------------------------------------------------------------


def run_suite(root, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOW_")}
    env["PYTHONPATH"] = str(root) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=str(root),
    )


def test_a_conforming_plugin_passes_every_check(tmp_path):
    fake_plugin(tmp_path, "fakeplugin", "fake", "fakeplugin_mod", GOOD_PLUGIN.format(op="fake_triple"))
    proc = run_suite(
        tmp_path,
        """
        from flow.testing import check_plugin_discovery
        print(check_plugin_discovery("fakeplugin", registers={"ops": ["fake_triple"], "kernels": ["fake_triple[cpu]"]}))
    """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(["entry_point", "hooks", "loads", "registers", "cli", "cli_select", "cli_skip"])


def test_the_pytest_form_is_one_parametrised_test(tmp_path):
    fake_plugin(tmp_path, "fakeplugin", "fake", "fakeplugin_mod", GOOD_PLUGIN.format(op="fake_triple"))
    (tmp_path / "test_disc.py").write_text(
        "from flow.testing import plugin_discovery_suite\n\n"
        "test_plugin_discovery = plugin_discovery_suite('fakeplugin', registers={'ops': ['fake_triple']},\n"
        "                                               absent_modules=['cupy'])\n"
    )
    proc = run_suite(
        tmp_path,
        """
        import sys, pytest
        sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "test_disc.py"]))
    """,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 passed" in proc.stdout


@pytest.mark.parametrize(
    "registers, check",
    [
        ({"ops": ["fake_triple", "fake_missing"]}, "registers"),
        ({"passes": ["fake_pass"]}, "registers"),
    ],
)
def test_a_plugin_that_does_not_register_what_it_declares_fails(tmp_path, registers, check):
    fake_plugin(tmp_path, "fakeplugin", "fake", "fakeplugin_mod", GOOD_PLUGIN.format(op="fake_triple"))
    proc = run_suite(
        tmp_path,
        f"""
        from flow.testing import discovery_checks
        discovery_checks("fakeplugin", registers={registers!r})["{check}"]()
    """,
    )
    assert proc.returncode != 0
    assert "PluginConformanceError" in proc.stderr and f"check '{check}'" in proc.stderr
    assert "should register" in proc.stderr


def test_a_plugin_that_needs_an_absent_module_fails(tmp_path):
    fake_plugin(tmp_path, "gpuplugin", "gpu", "gpuplugin_mod", "import cupy_not_here_either\n")
    (tmp_path / "cupy_not_here_either.py").write_text("")
    proc = run_suite(
        tmp_path,
        """
        from flow.testing import discovery_checks
        discovery_checks("gpuplugin", absent_modules=["cupy_not_here_either"])["absent"]()
    """,
    )
    assert proc.returncode != 0 and "check 'absent'" in proc.stderr and "cupy_not_here_either" in proc.stderr


def test_a_distribution_without_an_entry_point_fails(tmp_path):
    info = tmp_path / "plain-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plain\nVersion: 1.0\n")
    proc = run_suite(
        tmp_path,
        """
        from flow.testing import discovery_checks
        discovery_checks("plain")["entry_point"]()
    """,
    )
    assert proc.returncode != 0 and "declares no entry point in group 'flow.plugins'" in proc.stderr
