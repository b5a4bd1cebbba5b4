"""flow discovers flow-cuda through its entry point: flow's plugin discovery suite (flow.testing).

It checks the entry point, the hooks, loading in this process, the registrations, the listing of
``python -m flow plugins``, the FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD switches, and that the
package and its plugin import and load on a machine without CuPy.
"""

from flow.testing import plugin_discovery_suite

test_plugin_discovery = plugin_discovery_suite("flow-cuda", absent_modules=["cupy"])
