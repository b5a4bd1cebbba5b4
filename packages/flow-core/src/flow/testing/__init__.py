"""Testing tools for op authors and plugin packages.

``gradcheck``, ``opcheck`` and ``assert_close`` check an op's registrations; the conformance
suites check a whole plugin package: ``plugin_discovery_suite`` (its entry point is found,
loads, registers what it declares and is listed by ``python -m flow plugins``) and
``device_conformance_suite`` (every op, forward and backward, on a device type against the
reference). Plugins reuse these to check their own ops and devices against the core's
reference kernels.
"""

from flow.testing.checks import OpCheckError, SampleInput, assert_close, gradcheck, gradgradcheck, opcheck
from flow.testing.error_inputs import ErrorInput

# The suites are imported on first use: `import flow` imports flow.testing, and the discovery
# suite needs subprocess and importlib.metadata, which `import flow` otherwise does not load.
_LAZY = {
    "check_device": "device_suite",
    "check_op_on_device": "device_suite",
    "device_conformance_suite": "device_suite",
    "PluginConformanceError": "plugin_suite",
    "check_plugin_discovery": "plugin_suite",
    "discovery_checks": "plugin_suite",
    "plugin_discovery_suite": "plugin_suite",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'flow.testing' has no attribute '{name}'")
    import importlib

    return getattr(importlib.import_module(f"flow.testing.{mod}"), name)


__all__ = [
    "SampleInput",
    "ErrorInput",
    "gradcheck",
    "gradgradcheck",
    "opcheck",
    "assert_close",
    "OpCheckError",
    "check_device",
    "check_op_on_device",
    "device_conformance_suite",
    "PluginConformanceError",
    "check_plugin_discovery",
    "discovery_checks",
    "plugin_discovery_suite",
]
