"""``flow.load(f, global_src_rank=r)``: one rank reads the checkpoint, every rank gets it.

(``flow.save(obj, f, global_dst_rank=r)`` needs nothing of its own here: the core gathers each
global tensor to its logical value, a collective every rank takes part in, and only rank ``r``
writes.) A checkpoint holds logical values, so it loads at any world size and into any layout:
``load_state_dict`` of a global module keeps each rank's piece of every value.
"""

from __future__ import annotations

import io
import os

import numpy as np

from flow.errors import FlowError
from flow_dist import env

__all__ = ["global_load"]


def global_load(f, src_rank: int, load):
    world = env.get_world_size()
    if not isinstance(src_rank, int) or not 0 <= src_rank < world:
        raise FlowError(f"flow.load: global_src_rank must be a rank of the job (0..{world - 1}), got {src_rank!r}")
    if world == 1:
        return load(f)
    from flow_dist.comm.backend import get_backend

    comm = get_backend("cpu", None)
    data = b""
    failure = ""
    if env.get_rank() == src_rank:
        try:
            if hasattr(f, "read"):
                data = f.read()
            else:
                with open(os.fspath(f), "rb") as fh:
                    data = fh.read()
        except OSError as e:  # every rank raises, not only the reader
            failure = f"{type(e).__name__}: {e}"
    # the size first (-1: the reader failed), then the bytes
    size = comm.broadcast(np.array([-1 if failure else len(data)], dtype=np.int64), src=src_rank)
    if int(size[0]) < 0:
        msg = failure or "see rank's error"
        raise FlowError(f"flow.load: rank {src_rank} could not read the checkpoint {f!r}: {msg}")
    buf = np.frombuffer(data, dtype=np.uint8).copy() if env.get_rank() == src_rank else np.empty(int(size[0]), np.uint8)
    buf = comm.broadcast(buf, src=src_rank)
    return load(io.BytesIO(np.asarray(buf, dtype=np.uint8).tobytes()))
