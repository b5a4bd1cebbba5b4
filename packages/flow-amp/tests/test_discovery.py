"""flow discovers flow-amp through its entry point: flow's plugin discovery suite (flow.testing).

It checks the entry point, the hooks, loading in this process, the registrations, the listing of
``python -m flow plugins`` and the FLOW_PLUGINS / FLOW_DISABLE_PLUGIN_AUTOLOAD switches.
"""

from flow.testing import plugin_discovery_suite

test_plugin_discovery = plugin_discovery_suite("flow-amp")
