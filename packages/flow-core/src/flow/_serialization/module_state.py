"""Whole ``nn.Module`` objects in flow checkpoints, for classes allow-listed with ``add_safe_globals``.

A module is stored as ``{"$mod": "package.module.ClassName", "state": <its __dict__ as a dict node>}``:
its parameters, buffers, submodules, flags and plain attributes, encoded like any other structure
(so its tensors are safetensors entries). Loading restores it as pickle would, ``cls.__new__(cls)``
and then its ``__dict__``, without running ``__init__``; the class is found by its name in the
allow-list, never imported, so a file naming a class nobody allow-listed is refused. Every module
class in the tree must be allow-listed (flow's own, such as ``flow.nn.Linear``, included), as with
``torch.load(weights_only=True)``. Anything a module holds that a checkpoint cannot (a hook, a
function, an arbitrary object) makes the save fail, naming where it is.
"""

from __future__ import annotations

from flow._serialization import safe_globals as _safe
from flow._serialization.errors import CheckpointError
from flow._serialization.structure import MAX_DEPTH, Decoder, Encoder

__all__ = ["ModuleEncoder", "ModuleDecoder"]

MODULE_KEY = "$mod"


def _module_class():
    from flow.nn.modules.module import Module

    return Module


class ModuleEncoder(Encoder):
    """:class:`Encoder` that also writes allow-listed modules (and refuses other modules clearly)."""

    def encode(self, obj, path: str = "", depth: int = 0):
        Module = _module_class()
        if not isinstance(obj, Module):
            return super().encode(obj, path, depth)
        cls = type(obj)
        name = _safe.qualified_name(cls)
        where = f" at '{path}'" if path else ""
        if _safe.lookup(name) is not cls:
            raise CheckpointError(
                f"flow.save: cannot save the whole module {name}{where}: checkpoints hold data, not objects; "
                f"save module.state_dict() (and rebuild the model, then load_state_dict), or allow-list its "
                f"class with flow.serialization.add_safe_globals([{cls.__qualname__}]) (every module class it "
                "holds must be allow-listed) to save the module itself"
            )
        if depth >= MAX_DEPTH:
            raise CheckpointError(
                f"flow.save: '{path}' is nested more than {MAX_DEPTH} levels deep; checkpoints may nest at most "
                f"{MAX_DEPTH} levels"
            )
        if id(obj) in self._open:
            raise CheckpointError(f"flow.save: the module{where} contains itself; a checkpoint holds a tree of values")
        self._open.add(id(obj))
        try:
            return {MODULE_KEY: name, "state": super().encode(dict(vars(obj)), path, depth + 1)}
        finally:
            self._open.discard(id(obj))


class ModuleDecoder(Decoder):
    """:class:`Decoder` that also restores the modules :class:`ModuleEncoder` wrote."""

    def decode(self, node, depth: int = 0):
        if not (isinstance(node, dict) and MODULE_KEY in node):
            return super().decode(node, depth)
        if set(node) != {MODULE_KEY, "state"} or not isinstance(node[MODULE_KEY], str):
            raise self.corrupt(f"a module node should be {{'{MODULE_KEY}': name, 'state': dict}}, got {node!r:.120}")
        if depth > 3 * MAX_DEPTH:
            raise self.corrupt(f"it is nested deeper than a checkpoint may be ({MAX_DEPTH} levels)")
        name = node[MODULE_KEY]
        cls = _safe.lookup(name)
        if not isinstance(cls, type) or not issubclass(cls, _module_class()):
            raise CheckpointError(
                f"flow.load: '{self.name}' holds a whole module of class '{name:.120}', which is not allow-listed; "
                f"if you trust the file, allow it with flow.serialization.add_safe_globals([{name.rsplit('.', 1)[-1]}])"
            )
        state = super().decode(node["state"], depth + 1)
        if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
            raise self.corrupt(f"the state of module {name} should be a dict of attribute names")
        obj = cls.__new__(cls)
        vars(obj).update(state)  # as pickle restores an object; __init__ does not run
        return obj
