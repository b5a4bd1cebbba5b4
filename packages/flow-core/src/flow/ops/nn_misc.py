"""Misc nn ops. The nn op families live in their own modules, imported here so the
built-in ``flow.ops`` plugin (which imports this module) registers them."""

from __future__ import annotations

from flow.ops import nn_act, nn_ctc, nn_loss, nn_norm, nn_sparse  # noqa: F401  (registered with this module)

__all__: list[str] = []
