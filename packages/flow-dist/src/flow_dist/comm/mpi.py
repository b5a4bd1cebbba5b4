"""The MPI backend (mpi4py): collectives between processes on NumPy arrays.

Every call first checks that the ranks agree on what they are doing: one small all-reduce of a
fixed-size header (the collective, its reduction, dtype and shape; max and min at once), so a
rank with another shape or dtype makes every rank raise :class:`CommError` naming who had what,
instead of a hang or corrupted data. ``FLOW_COMM_CHECK=0`` turns the check off. Then the data
moves with nonblocking MPI calls, waited on against a deadline of ``FLOW_COMM_TIMEOUT`` seconds
(default 300): a rank that never arrives makes the waiting ranks raise :class:`CommTimeoutError`.

Data moves as bytes (so float16, bfloat16 and bool need no MPI type); reductions use MPI's types,
float16 and bfloat16 reduced in float32, bool as uint8 (sum and max are "any", prod and min
"all"). Uneven pieces (all-gather, all-to-all) exchange their shapes first, which doubles as
their check. mpi4py is imported on first use, never at import of flow-dist.
"""

from __future__ import annotations

import os
import time
from typing import Sequence

import numpy as np

from flow_dist.comm.base import REDUCE_OPS, Backend, Work
from flow_dist.comm.errors import CommError, CommTimeoutError

__all__ = ["MPIBackend", "world_communicator", "timeout", "checking"]

_WORLD = None
_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "barrier")
_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool")
_HLEN = 12  # kind, op, dtype, ndim, 7 dims, a hash of the rest
_MAXDIMS = 7
_SPIN_S = 0.5  # how long a wait polls without pause before it starts to nap


def _mpi():
    from mpi4py import MPI

    return MPI


def world_communicator():
    """flow's own duplicate of MPI_COMM_WORLD (so its traffic never meets the user's)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = _mpi().COMM_WORLD.Dup()
    return _WORLD


def timeout() -> float:
    try:
        return float(os.environ.get("FLOW_COMM_TIMEOUT", "300"))
    except ValueError:
        value = os.environ["FLOW_COMM_TIMEOUT"]
        raise CommError(f"FLOW_COMM_TIMEOUT must be a number of seconds, got {value!r}") from None


def checking() -> bool:
    return os.environ.get("FLOW_COMM_CHECK", "1") not in ("0", "false", "False", "")


def _dtype_code(dt: np.dtype) -> int:
    name = np.dtype(dt).name
    try:
        return _DTYPES.index(name)
    except ValueError:
        raise CommError(f"communication of dtype {name} is not supported (supported: {', '.join(_DTYPES)})") from None


def _bytes(a: np.ndarray) -> np.ndarray:
    a = a if a.flags.c_contiguous else np.ascontiguousarray(a)
    return a.reshape(-1).view(np.uint8)


def _reduce_type(dt: np.dtype):
    """(the dtype a reduction runs in, its MPI type)."""
    MPI = _mpi()
    name = np.dtype(dt).name
    if name in ("float16", "bfloat16"):
        return np.dtype(np.float32), MPI.FLOAT
    if name == "bool":
        return np.dtype(np.uint8), MPI.UINT8_T
    table = {
        "float32": MPI.FLOAT,
        "float64": MPI.DOUBLE,
        "int8": MPI.INT8_T,
        "int16": MPI.INT16_T,
        "int32": MPI.INT32_T,
        "int64": MPI.INT64_T,
        "uint8": MPI.UINT8_T,
    }
    return np.dtype(name), table[name]


def _mpi_op(op: str, dt: np.dtype):
    MPI = _mpi()
    if op not in REDUCE_OPS:
        raise CommError(f"unknown reduction {op!r}; expected one of {REDUCE_OPS}")
    if np.dtype(dt).name == "bool":
        return MPI.MAX if op in ("sum", "max") else MPI.MIN
    if op == "avg" and not np.issubdtype(np.dtype(dt) if np.dtype(dt).name != "bfloat16" else np.float32, np.floating):
        raise CommError(f"reduction 'avg' needs a floating dtype, got {np.dtype(dt).name}")
    return {"sum": MPI.SUM, "avg": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}[op]


class MPIBackend(Backend):
    """Collectives over a group of global ranks (a sub-communicator of flow's world)."""

    def __init__(self, ranks: tuple) -> None:
        world = world_communicator()
        self.ranks = tuple(ranks)
        if self.ranks == tuple(range(world.Get_size())):
            self.comm = world
        else:  # collective over the members only
            self.comm = world.Create_group(world.Get_group().Incl(list(self.ranks)), tag=_tag(self.ranks))
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    # -- waiting and checking -------------------------------------------------------------------
    def _wait(self, reqs: list, what: str) -> None:
        MPI = _mpi()
        if MPI.Request.Testall(reqs):
            return
        # MPI moves a collective's data only while a rank polls it (as MPI_Wait does): poll without
        # pause for a while, then, for a rank that is late, with naps until the deadline
        start = time.monotonic()
        limit = timeout()
        nap = 1e-4
        while not MPI.Request.Testall(reqs):
            waited = time.monotonic() - start
            if waited < _SPIN_S:
                continue
            if waited > limit:
                raise CommTimeoutError(
                    f"{what} on ranks {list(self.ranks)} did not complete within FLOW_COMM_TIMEOUT={limit:g} s "
                    f"(this is rank {self.ranks[self.rank]}); a rank did not join it. The job's communication "
                    "is now in an unknown state: abort it (the launcher does when a rank raises)"
                )
            time.sleep(nap)
            nap = min(nap * 2, 0.01)

    def _agree(self, kind: str, op: str = "", a: np.ndarray | None = None, extra: tuple = ()) -> None:
        """Every rank must be running the same collective on the same dtype and shape."""
        if not checking():
            return
        MPI = _mpi()
        h = np.full(_HLEN, -1, dtype=np.int64)
        h[0] = _KINDS.index(kind)
        h[1] = REDUCE_OPS.index(op) if op else -1
        if a is not None:
            h[2] = _dtype_code(a.dtype)
            h[3] = a.ndim
            dims = a.shape[:_MAXDIMS]
            h[4 : 4 + len(dims)] = dims
            extra = tuple(a.shape[_MAXDIMS:]) + tuple(extra)
        h[_HLEN - 1] = hash(tuple(extra)) & 0x7FFFFFFFFFFFFFFF if extra else -1
        both = np.concatenate([h, -h])
        out = np.empty_like(both)
        self._wait([self.comm.Iallreduce(both, out, op=MPI.MAX)], f"{kind} (header check)")
        if (out[:_HLEN] == -out[_HLEN:]).all():
            return
        every = np.empty((self.size, _HLEN), dtype=np.int64)
        self._wait([self.comm.Iallgather(h, every)], f"{kind} (header exchange)")
        raise CommError(
            f"{kind}: the ranks disagree on the call: "
            + "; ".join(f"rank {self.ranks[r]} runs {_describe(row)}" for r, row in enumerate(every))
        )

    # -- collectives ----------------------------------------------------------------------------
    def all_reduce(self, a, op="sum", async_op=False, out=None):
        """``out`` (optional): a contiguous array like ``a`` to receive into (saves allocating one)."""
        self._agree("all_reduce", op, a)
        rdt, mtype = _reduce_type(a.dtype)
        mop = _mpi_op(op, a.dtype)
        send = np.ascontiguousarray(a, dtype=rdt).reshape(-1)  # (1-d: a 0-d array has no buffer shape)
        if out is not None and out.dtype == rdt and out.size == send.size and out.flags.c_contiguous:
            recv = out.reshape(-1)
        else:
            recv = np.empty_like(send)
        req = self.comm.Iallreduce([send, mtype], [recv, mtype], op=mop)

        def finish():
            self._wait([req], "all_reduce")
            if op == "avg":
                np.divide(recv, self.size, out=recv, casting="unsafe")
            return recv.astype(a.dtype, copy=False).reshape(a.shape)

        return _result(finish, req, async_op, keep=(send, recv))

    def all_gather(self, a, async_op=False):
        shapes = self._shapes("all_gather", a)
        send = _bytes(a)
        counts = [int(np.prod(s)) * a.dtype.itemsize for s in shapes]
        displs = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist()
        recv = np.empty(sum(counts), dtype=np.uint8)
        req = self.comm.Iallgatherv(send, [recv, counts, displs, _mpi().BYTE])

        def finish():
            self._wait([req], "all_gather")
            return [recv[o : o + c].view(a.dtype).reshape(s).copy() for o, c, s in zip(displs, counts, shapes)]

        return _result(finish, req, async_op, keep=(send, recv))

    def reduce_scatter(self, pieces, op="sum", async_op=False):
        if len(pieces) != self.size:
            raise CommError(f"reduce_scatter: {len(pieces)} pieces for a group of {self.size}")
        dt = pieces[0].dtype
        self._agree("reduce_scatter", op, None, extra=(_dtype_code(dt),) + tuple(tuple(p.shape) for p in pieces))
        rdt, mtype = _reduce_type(dt)
        mop = _mpi_op(op, dt)
        send = np.concatenate([np.asarray(p, dtype=rdt).reshape(-1) for p in pieces])
        counts = [int(p.size) for p in pieces]
        mine = pieces[self.rank]
        recv = np.empty(counts[self.rank], dtype=rdt)
        req = self.comm.Ireduce_scatter([send, mtype], [recv, mtype], counts, op=mop)

        def finish():
            self._wait([req], "reduce_scatter")
            r = recv / self.size if op == "avg" else recv
            return r.astype(dt, copy=False).reshape(mine.shape)

        return _result(finish, req, async_op, keep=(send, recv))

    def broadcast(self, a, src=0, async_op=False):
        self._peer(src, "broadcast")
        self._agree("broadcast", "", a, extra=(src,))
        buf = np.array(a, copy=True, order="C")
        req = self.comm.Ibcast(_bytes(buf), root=src)

        def finish():
            self._wait([req], "broadcast")
            return buf

        return _result(finish, req, async_op, keep=(buf,))

    def reduce(self, a, dst=0, op="sum", async_op=False):
        self._peer(dst, "reduce")
        self._agree("reduce", op, a, extra=(dst,))
        rdt, mtype = _reduce_type(a.dtype)
        mop = _mpi_op(op, a.dtype)
        send = np.ascontiguousarray(a, dtype=rdt).reshape(-1)
        recv = np.empty_like(send) if self.rank == dst else None
        req = self.comm.Ireduce([send, mtype], [recv, mtype] if recv is not None else None, op=mop, root=dst)

        def finish():
            self._wait([req], "reduce")
            if recv is None:
                return None
            r = recv / self.size if op == "avg" else recv
            return r.astype(a.dtype, copy=False).reshape(a.shape)

        return _result(finish, req, async_op, keep=(send, recv))

    def all_to_all(self, pieces, async_op=False):
        if len(pieces) != self.size:
            raise CommError(f"all_to_all: {len(pieces)} pieces for a group of {self.size}")
        dt = pieces[0].dtype
        # what every rank sends every other: dtype and shape, which the receivers need anyway
        mine = np.full((self.size, 2 + _MAXDIMS), -1, dtype=np.int64)
        for j, p in enumerate(pieces):
            if p.dtype != dt or p.ndim > _MAXDIMS:
                raise CommError(f"all_to_all: pieces must share one dtype and have at most {_MAXDIMS} dims")
            mine[j, 0], mine[j, 1] = _dtype_code(p.dtype), p.ndim
            mine[j, 2 : 2 + p.ndim] = p.shape
        theirs = np.empty_like(mine)
        self._agree("all_to_all", "", None, extra=(_dtype_code(dt),) if checking() else ())
        self._wait([self.comm.Ialltoall(mine, theirs)], "all_to_all (shapes)")
        shapes = [tuple(int(d) for d in row[2 : 2 + row[1]]) for row in theirs]
        scounts = [int(p.size) * dt.itemsize for p in pieces]
        rcounts = [int(np.prod(s)) * dt.itemsize for s in shapes]
        sdispl = np.concatenate([[0], np.cumsum(scounts)[:-1]]).astype(int).tolist()
        rdispl = np.concatenate([[0], np.cumsum(rcounts)[:-1]]).astype(int).tolist()
        send = np.concatenate([_bytes(p) for p in pieces]) if pieces else np.empty(0, np.uint8)
        recv = np.empty(sum(rcounts), dtype=np.uint8)
        BYTE = _mpi().BYTE
        req = self.comm.Ialltoallv([send, scounts, sdispl, BYTE], [recv, rcounts, rdispl, BYTE])

        def finish():
            self._wait([req], "all_to_all")
            return [recv[o : o + c].view(dt).reshape(s).copy() for o, c, s in zip(rdispl, rcounts, shapes)]

        return _result(finish, req, async_op, keep=(send, recv))

    def send(self, a, dst, tag=0, async_op=False):
        self._peer(dst, "send")
        head = np.full(2 + _MAXDIMS, -1, dtype=np.int64)
        head[0], head[1] = _dtype_code(a.dtype), a.ndim
        head[2 : 2 + min(a.ndim, _MAXDIMS)] = a.shape[:_MAXDIMS]
        data = np.array(a, copy=True, order="C")
        reqs = [self.comm.Isend(head, dest=dst, tag=2 * tag), self.comm.Isend(_bytes(data), dest=dst, tag=2 * tag + 1)]

        def finish():
            self._wait(reqs, "send")
            return None

        return _result(finish, reqs[0], async_op, reqs, keep=(head, data))

    def recv(self, out, src, tag=0, async_op=False):
        self._peer(src, "recv")
        head = np.empty(2 + _MAXDIMS, dtype=np.int64)
        self._wait([self.comm.Irecv(head, source=src, tag=2 * tag)], "recv (header)")
        shape = tuple(int(d) for d in head[2 : 2 + head[1]])
        if head[0] != _dtype_code(out.dtype) or shape != tuple(out.shape):
            sent = f"{shape} {_DTYPES[head[0]]}"
            # take the data off the wire so the channel stays usable, then refuse it
            junk = np.empty(int(np.prod(shape)) * np.dtype(_np_dtype(head[0])).itemsize, np.uint8)
            self._wait([self.comm.Irecv(junk, source=src, tag=2 * tag + 1)], "recv")
            raise CommError(
                f"recv: rank {self.ranks[src]} sent {sent}, but the buffer is {tuple(out.shape)} {out.dtype}"
            )
        buf = np.empty(out.shape, dtype=out.dtype)
        req = self.comm.Irecv(_bytes(buf), source=src, tag=2 * tag + 1)

        def finish():
            self._wait([req], "recv")
            out[...] = buf
            return out

        return _result(finish, req, async_op, keep=(buf,))

    def barrier(self, async_op=False):
        self._agree("barrier")
        req = self.comm.Ibarrier()

        def finish():
            self._wait([req], "barrier")

        return _result(finish, req, async_op)

    # -- helpers ------------------------------------------------------------------------------
    def _peer(self, r, what: str) -> None:
        if not isinstance(r, (int, np.integer)) or not 0 <= r < self.size:
            raise CommError(f"{what}: rank {r!r} is not in the group (0..{self.size - 1})")

    def _shapes(self, kind: str, a: np.ndarray) -> list:
        """Every rank's shape (an all-gather of a small header: also the call's check)."""
        if a.ndim > _MAXDIMS:
            raise CommError(f"{kind}: arrays of more than {_MAXDIMS} dims are not supported")
        h = np.full(3 + _MAXDIMS, -1, dtype=np.int64)
        h[0], h[1], h[2] = _KINDS.index(kind), _dtype_code(a.dtype), a.ndim
        h[3 : 3 + a.ndim] = a.shape
        every = np.empty((self.size, 3 + _MAXDIMS), dtype=np.int64)
        self._wait([self.comm.Iallgather(h, every)], f"{kind} (shapes)")
        if (every[:, :3] != h[:3]).any():
            raise CommError(
                f"{kind}: the ranks disagree on the call: "
                + "; ".join(
                    f"rank {self.ranks[r]} runs {_KINDS[row[0]] if 0 <= row[0] < len(_KINDS) else '?'} on a "
                    f"{row[2]}-d {_DTYPES[row[1]] if 0 <= row[1] < len(_DTYPES) else '?'} array of shape "
                    f"{tuple(int(d) for d in row[3 : 3 + max(row[2], 0)])}"
                    for r, row in enumerate(every)
                )
            )
        return [tuple(int(d) for d in row[3 : 3 + row[2]]) for row in every]


def _np_dtype(code: int):
    name = _DTYPES[code]
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


def _describe(row) -> str:
    kind = _KINDS[row[0]] if 0 <= row[0] < len(_KINDS) else "?"
    s = kind
    if row[1] >= 0:
        s += f"({REDUCE_OPS[row[1]]})"
    if row[2] >= 0:
        dims = tuple(int(d) for d in row[4 : 4 + min(row[3], _MAXDIMS)])
        s += f" on {_DTYPES[row[2]]} of shape {dims}"
    return s


def _tag(ranks: tuple) -> int:
    return hash(ranks) & 0x7FFF


def _result(finish, req, async_op: bool, reqs: Sequence | None = None, keep: tuple = ()):
    """Run ``finish`` now, or return a Work that runs it on wait(). ``keep``: the buffers MPI reads
    or writes while the request is in flight — mpi4py does not hold them, so a send buffer made
    here (a concatenation, a converted copy) would be freed and reused mid-collective and the
    result silently wrong; the Work holds them until the request has completed."""
    if not async_op:
        return finish()
    MPI = _mpi()
    watch = list(reqs) if reqs is not None else [req]

    def wait():
        out = finish()
        held.clear()
        return out

    held = list(keep)
    return Work(wait, lambda: MPI.Request.Testall(watch))
