"""flow-amp: automatic mixed precision for flow (``flow.amp``, ``flow.autocast``).

- :class:`autocast` (eager mixed precision, PyTorch's API) with the op colour table of
  :mod:`flow_amp.colors`, which op packages fill through the ``"amp_color"`` rule table;
- :class:`GradScaler` (dynamic loss scaling) and :class:`StaticGradScaler`, eager and in
  ``nn.Graph.set_grad_scaler``;
- the ``amp`` graph pass (``graph.config.enable_amp(True, dtype=...)``), :mod:`flow_amp.graph_pass`;
- :func:`custom_fwd` / :func:`custom_bwd` for custom ``autograd.Function``\\ s.

flow finds it through the ``flow.plugins`` entry point ``amp`` (module :mod:`flow_amp.plugin`);
once installed, ``flow.amp`` is this module and ``flow.autocast`` its :class:`autocast`.
"""

from flow_amp import debug  # flow.amp.debug.compare: where mixed precision loses accuracy
from flow_amp.autocast import (
    autocast,
    clear_autocast_cache,
    custom_bwd,
    custom_fwd,
    get_autocast_dtype,
    is_autocast_cache_enabled,
    is_autocast_enabled,
)
from flow_amp.grad_scaler import GradScaler, StaticGradScaler

__version__ = "0.1.0"

__all__ = [
    "autocast",
    "is_autocast_enabled",
    "get_autocast_dtype",
    "is_autocast_cache_enabled",
    "clear_autocast_cache",
    "custom_fwd",
    "custom_bwd",
    "GradScaler",
    "StaticGradScaler",
]
