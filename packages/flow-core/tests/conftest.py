"""Shared fixtures of flow-core's tests.

``meta_device`` registers the test plugin :mod:`meta_device_plugin` (a shape-only second
device type) through ``flow.plugins.register`` and removes it afterwards, so tests can run
ops, autograd and opcheck on a device other than the CPU without a GPU.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import meta_device_plugin  # noqa: E402

import flow  # noqa: E402

META_PLUGIN_NAME = "tests.meta_device"


@pytest.fixture(scope="module")
def meta_device():
    """The ``meta`` device, registered by a test plugin for the duration of a test module."""
    already = any(i.name == META_PLUGIN_NAME for i in flow.plugins.list_plugins())
    if not already:
        flow.plugins.register(meta_device_plugin, name=META_PLUGIN_NAME)
    yield flow.device(meta_device_plugin.NAME)
    if not already:
        flow.plugins.unregister(META_PLUGIN_NAME)
