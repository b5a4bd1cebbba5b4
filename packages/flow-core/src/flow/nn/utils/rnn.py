"""Variable-length sequences for the recurrent layers, as ``torch.nn.utils.rnn``.

A :class:`PackedSequence` stores a batch of sequences sorted by decreasing length, time step by time
step: ``data`` holds the ``batch_sizes[t]`` still-running sequences of step ``t`` one after the other,
so the recurrent layers never compute on padding. ``sorted_indices`` maps the sorted batch back to the
caller's order (``unsorted_indices`` is its inverse). Packing and padding are index selects, slices,
pads and concatenations, so gradients flow through them.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from flow._tensor import Tensor

__all__ = [
    "PackedSequence",
    "pad_sequence",
    "unpad_sequence",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pack_sequence",
    "unpack_sequence",
    "invert_permutation",
]


class PackedSequence(NamedTuple):
    """A packed batch of sequences: ``(data, batch_sizes, sorted_indices, unsorted_indices)``.

    Build it with :func:`pack_padded_sequence` or :func:`pack_sequence`, not directly.
    """

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args, **kwargs) -> "PackedSequence":
        """``data`` moved or cast with :meth:`Tensor.to`; the index tensors keep their dtype."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        dev = data.device
        idx = [None if t is None else t.to(dev) for t in (self.sorted_indices, self.unsorted_indices)]
        return PackedSequence(data, self.batch_sizes, *idx)

    @property
    def is_cuda(self) -> bool:
        return self.data.is_cuda

    def is_pinned(self) -> bool:
        return False


def invert_permutation(permutation: Tensor | None) -> Tensor | None:
    """The inverse of a permutation of ``range(n)`` (None stays None)."""
    if permutation is None:
        return None
    from flow._creation import tensor

    p = np.asarray(permutation.tolist(), dtype=np.int64)
    inv = np.empty_like(p)
    inv[p] = np.arange(len(p))
    return tensor(inv, device=permutation.device)


def _check_seqs(op: str, sequences) -> list:
    seqs = list(sequences) if not isinstance(sequences, Tensor) else list(sequences.unbind(0))
    if not seqs:
        raise ValueError(f"{op}: expected a non-empty sequence of tensors")
    for i, s in enumerate(seqs):
        if not isinstance(s, Tensor):
            raise TypeError(f"{op}: sequence {i} must be a Tensor, got {type(s).__name__}")
        if s.ndim < 1:
            raise ValueError(f"{op}: sequence {i} must have at least 1 dim (its length), got a 0-d tensor")
        if tuple(s.shape[1:]) != tuple(seqs[0].shape[1:]):
            raise ValueError(
                f"{op}: all sequences must have the same trailing dims; sequence 0 has shape "
                f"{tuple(seqs[0].shape)}, sequence {i} has shape {tuple(s.shape)}"
            )
    return seqs


def pad_sequence(
    sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"
) -> Tensor:
    """Stack sequences of shape (L_i, *) into (L_max, B, *) (or (B, L_max, *)), padding with ``padding_value``."""
    if padding_side not in ("left", "right"):
        raise ValueError(f"pad_sequence: padding_side must be 'left' or 'right', got {padding_side!r}")
    seqs = _check_seqs("pad_sequence", sequences)
    from flow import stack
    from flow.ops.padding import pad

    T = max(s.shape[0] for s in seqs)
    rest = 2 * (seqs[0].ndim - 1)
    padded = []
    for s in seqs:
        n = T - s.shape[0]
        amounts = (0,) * rest + ((0, n) if padding_side == "right" else (n, 0))
        padded.append(pad(s, amounts, value=padding_value) if n else s)
    return stack(padded, 0 if batch_first else 1)


def unpad_sequence(padded_sequences: Tensor, lengths: Tensor, batch_first: bool = False) -> list:
    """The list of unpadded sequences of a padded batch (the inverse of :func:`pad_sequence`)."""
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    return [x[i, : int(n)] for i, n in enumerate(_lengths("unpad_sequence", lengths, x.shape[0]))]


def _lengths(op: str, lengths, batch: int) -> list:
    if isinstance(lengths, Tensor):
        if lengths.dtype.is_floating_point or lengths.ndim != 1:
            raise TypeError(f"{op}: 'lengths' must be a 1-d integer tensor or a list of ints, got {lengths.dtype}")
        vals = [int(v) for v in lengths.tolist()]
    else:
        vals = [int(v) for v in lengths]
    if len(vals) != batch:
        raise ValueError(f"{op}: expected {batch} lengths (one per sequence in the batch), got {len(vals)}")
    return vals


def pack_padded_sequence(
    input: Tensor, lengths, batch_first: bool = False, enforce_sorted: bool = True
) -> PackedSequence:
    """Pack a padded (T, B, *) (or (B, T, *)) batch whose sequences have the given ``lengths``.

    With ``enforce_sorted`` the lengths must be decreasing; otherwise the batch is sorted here and the
    permutation kept in the result, so that :func:`pad_packed_sequence` restores the order.
    """
    op = "pack_padded_sequence"
    if not isinstance(input, Tensor):
        raise TypeError(f"{op}: 'input' must be a Tensor, got {type(input).__name__}")
    if input.ndim < 2:
        raise ValueError(f"{op}: 'input' must have a time and a batch dim, got shape {tuple(input.shape)}")
    x = input.transpose(0, 1) if batch_first else input
    lens = np.asarray(_lengths(op, lengths, x.shape[1]), dtype=np.int64)
    from flow._creation import tensor

    if enforce_sorted:
        if np.any(lens[1:] > lens[:-1]):
            raise RuntimeError(
                "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
                "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement "
                "if you do not need ONNX exportability."
            )
        sorted_indices = None
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_indices = tensor(order, device=input.device)
        lens = lens[order]
        x = x.index_select(1, sorted_indices)
    if lens.size and lens[-1] <= 0:
        raise RuntimeError(f"{op}: every sequence must have a length > 0, got lengths {lens.tolist()}")
    if lens.size and lens[0] > x.shape[0]:
        raise RuntimeError(f"{op}: a length of {int(lens[0])} exceeds the padded time dim of 'input' ({x.shape[0]})")
    from flow import cat

    T = int(lens[0])
    batch_sizes = [int((lens > t).sum()) for t in range(T)]
    data = cat([x[t, :bs] for t, bs in enumerate(batch_sizes)], 0)
    return PackedSequence(data, tensor(batch_sizes, dtype=np.int64), sorted_indices, invert_permutation(sorted_indices))


def pad_packed_sequence(
    sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0, total_length: int | None = None
) -> tuple:
    """Unpack to a padded (T, B, *) (or (B, T, *)) batch in the original order, and the lengths (int64)."""
    op = "pad_packed_sequence"
    if not isinstance(sequence, PackedSequence):
        raise TypeError(f"{op}: expected a PackedSequence, got {type(sequence).__name__}")
    from flow import cat, stack
    from flow._creation import tensor
    from flow.ops.padding import pad

    sizes = [int(b) for b in sequence.batch_sizes.tolist()]
    T, B = len(sizes), sizes[0]
    if total_length is not None:
        if total_length < T:
            raise ValueError(
                f"Expected total_length to be at least the length of the longest sequence in input, but got "
                f"total_length={total_length} and max sequence length being {T}"
            )
    data = sequence.data
    rest = 2 * (data.ndim - 1)
    steps, start = [], 0
    for bs in sizes:
        step = data[start : start + bs]
        start += bs
        steps.append(pad(step, (0,) * rest + (0, B - bs), value=padding_value) if bs < B else step)
    out = stack(steps, 0)
    if total_length is not None and total_length > T:
        out = cat([out, out.new_full((total_length - T,) + tuple(out.shape[1:]), padding_value)], 0)
    bs_np = np.asarray(sizes)
    lengths = np.array([(bs_np > b).sum() for b in range(B)], dtype=np.int64)
    if sequence.unsorted_indices is not None:
        out = out.index_select(1, sequence.unsorted_indices)
        lengths = lengths[np.asarray(sequence.unsorted_indices.tolist(), dtype=np.int64)]
    if batch_first:
        out = out.transpose(0, 1)
    return out, tensor(lengths)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    """Pack a list of (L_i, *) sequences (decreasing lengths unless ``enforce_sorted=False``)."""
    seqs = _check_seqs("pack_sequence", sequences)
    return pack_padded_sequence(pad_sequence(seqs), [s.shape[0] for s in seqs], enforce_sorted=enforce_sorted)


def unpack_sequence(packed_sequences: PackedSequence) -> list:
    """The list of (L_i, *) sequences of a packed batch, in the original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
