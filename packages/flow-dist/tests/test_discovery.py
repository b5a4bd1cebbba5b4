"""flow discovers flow-dist through its entry point: flow's plugin discovery suite (flow.testing).

It checks the entry point, the hooks, loading in this process, the registrations, the listing of
``python -m flow plugins``, the FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD switches, and that the
package and its plugin import and load without mpi4py and CuPy (both optional).
"""

from flow.testing import plugin_discovery_suite

test_plugin_discovery = plugin_discovery_suite("flow-dist", absent_modules=["mpi4py", "cupy"])
