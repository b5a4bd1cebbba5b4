"""State dicts of modules: ``state_dict`` and ``load_state_dict`` with torch's format and errors."""

from __future__ import annotations

import itertools
from collections import OrderedDict, namedtuple
from typing import Mapping

import numpy as np

from flow._tensor import Tensor
from flow.autograd.grad_mode import no_grad
from flow.nn.parameter import Parameter


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys that were missing and unexpected."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class StateDictMixin:
    """The state-dict half of :class:`flow.nn.Module` (kept apart to keep each file to one concern)."""

    __slots__ = ()

    # -- state dict ------------------------------------------------------------------
    def _save_to_state_dict(self, destination: dict, prefix: str, keep_vars: bool) -> None:
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()

    def state_dict(self, *, destination: dict | None = None, prefix: str = "", keep_vars: bool = False) -> dict:
        """An ordered dict of every parameter and persistent buffer by dotted name (detached tensors
        sharing storage with the module, unless ``keep_vars``)."""
        if destination is None:
            destination = OrderedDict()
            destination._metadata = OrderedDict()
        meta = getattr(destination, "_metadata", None)
        if meta is not None:
            meta[prefix[:-1]] = {"version": self._version}
        self._save_to_state_dict(destination, prefix, keep_vars)
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".", keep_vars=keep_vars)
        return destination

    def _load_from_state_dict(
        self,
        state_dict: Mapping,
        prefix: str,
        local_metadata: dict,
        strict: bool,
        missing_keys: list,
        unexpected_keys: list,
        error_msgs: list,
    ) -> None:
        """Load this module's own parameters and persistent buffers (not its children's)."""
        persistent = {k: v for k, v in self._buffers.items() if k not in self._non_persistent_buffers_set}
        local = {k: v for k, v in itertools.chain(self._parameters.items(), persistent.items()) if v is not None}
        assign = local_metadata.get("assign_to_params_buffers", False)
        for name, param in local.items():
            key = prefix + name
            if key not in state_dict:
                if strict:
                    missing_keys.append(key)
                continue
            value = state_dict[key]
            if isinstance(value, np.ndarray) or (not isinstance(value, Tensor) and hasattr(value, "__array__")):
                from flow._creation import tensor

                value = tensor(np.asarray(value))
            elif not isinstance(value, Tensor):
                error_msgs.append(
                    f'While copying the parameter named "{key}", expected a Tensor or an array '
                    f"from the checkpoint but received {type(value).__name__}"
                )
                continue
            shape = tuple(value.shape)
            if not (shape == tuple(param.shape) or (param.ndim == 0 and shape == (1,))):
                error_msgs.append(
                    f"size mismatch for {key}: copying a param with shape {list(shape)} from "
                    f"checkpoint, the shape in current model is {list(param.shape)}."
                )
                continue
            try:
                if assign:
                    if isinstance(param, Parameter):
                        setattr(self, name, Parameter(value.detach(), requires_grad=param.requires_grad))
                    else:
                        self._buffers[name] = value.detach()
                else:
                    with no_grad():
                        param.copy_(value.reshape(tuple(param.shape)))
            except Exception as e:
                error_msgs.append(
                    f'While copying the parameter named "{key}", whose dimensions in the model are '
                    f"{list(param.shape)} and whose dimensions in the checkpoint are {list(shape)}, "
                    f"an exception occurred : {e}."
                )
        if strict:
            for key in state_dict:
                if key.startswith(prefix):
                    input_name = key[len(prefix) :].split(".", 1)
                    if input_name[0] not in self._modules and input_name[0] not in local:
                        unexpected_keys.append(key)

    def load_state_dict(self, state_dict: Mapping, strict: bool = True, assign: bool = False) -> _IncompatibleKeys:
        """Copy parameters and buffers from ``state_dict`` (tensors or NumPy arrays) into this module.

        With ``strict`` (the default) missing or unexpected keys raise a RuntimeError listing them; a
        shape mismatch always raises. Returns a namedtuple ``(missing_keys, unexpected_keys)``.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}.")
        missing: list = []
        unexpected: list = []
        errors: list = []
        metadata = getattr(state_dict, "_metadata", None)
        state_dict = OrderedDict(state_dict)

        def load(module, local_sd: dict, prefix: str = "") -> None:
            local_meta = dict(metadata.get(prefix[:-1], {})) if metadata is not None else {}
            if assign:
                local_meta["assign_to_params_buffers"] = True
            module._load_from_state_dict(local_sd, prefix, local_meta, True, missing, unexpected, errors)
            for name, child in module._modules.items():
                if child is not None:
                    child_prefix = prefix + name + "."
                    load(child, {k: v for k, v in local_sd.items() if k.startswith(child_prefix)}, child_prefix)

        load(self, state_dict)
        if strict:
            if unexpected:
                errors.insert(
                    0, "Unexpected key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in unexpected))
                )
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError(
                "Error(s) in loading state_dict for {}:\n\t{}".format(self._get_name(), "\n\t".join(errors))
            )
        return _IncompatibleKeys(missing, unexpected)
