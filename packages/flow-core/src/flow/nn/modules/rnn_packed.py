"""The forward of RNN, LSTM and GRU over a :class:`~flow.nn.utils.rnn.PackedSequence`.

Sequences are sorted by decreasing length, so at step ``t`` the running ones are the first
``batch_sizes[t]`` rows: each step updates that prefix of the state and leaves the other rows as they
are. A finished sequence therefore keeps the state of its own last step (what ``h_n`` reports), and in
the reverse direction a sequence starts from the initial state at its own last step, as in PyTorch.
"""

from __future__ import annotations

import flow.nn.functional as F
from flow._tensor import Tensor


def _cat(tensors: list, dim: int) -> Tensor:
    from flow import cat

    return cat(tensors, dim)


def _run_direction(mode: str, xg: list, state: tuple, weights: tuple, reverse: bool, sizes: list) -> tuple:
    """One layer, one direction; ``xg[t]`` is step t's input projection (sizes[t] rows)."""
    from flow.nn.modules.rnn import _gru_step, _lstm_step, _rnn_step

    _, w_hh, _, b_hh, w_hr = weights
    outs = [None] * len(xg)
    for t in range(len(xg) - 1, -1, -1) if reverse else range(len(xg)):
        bs = sizes[t]
        cur = tuple(s[:bs] for s in state)
        if mode == "LSTM":
            new = _lstm_step(xg[t], cur[0], cur[1], w_hh, b_hh, w_hr)
        elif mode == "GRU":
            new = (_gru_step(xg[t], cur[0], w_hh, b_hh),)
        else:
            new = (_rnn_step(xg[t], cur[0], w_hh, b_hh, mode == "RNN_RELU"),)
        state = tuple(n if bs == s.shape[0] else _cat([n, s[bs:]], 0) for n, s in zip(new, state))
        outs[t] = new[0]
    return outs, state


def packed_forward(rnn, packed, hx):
    """``rnn(packed, hx)`` for a PackedSequence input: returns (PackedSequence output, h_n or (h_n, c_n))."""
    from flow.nn.utils.rnn import PackedSequence

    data, batch_sizes, sorted_indices, unsorted_indices = packed
    if data.ndim != 2 or data.shape[-1] != rnn.input_size:
        raise RuntimeError(
            f"{type(rnn).__name__}: the packed data must be (total_steps, input_size={rnn.input_size}), "
            f"got shape {tuple(data.shape)}"
        )
    sizes = [int(b) for b in batch_sizes.tolist()]
    batch = sizes[0]
    states = rnn._initial_state(data, hx, batch, False)
    if hx is not None and sorted_indices is not None:
        # the caller's states are in the caller's batch order; the packed batch is sorted
        states = tuple(s.index_select(1, sorted_indices) for s in states)
    per_layer = [s.unbind(0) for s in states]
    dirs = 2 if rnn.bidirectional else 1
    finals: list[list] = [[] for _ in states]
    x = data
    for layer in range(rnn.num_layers):
        if layer > 0 and rnn.dropout > 0 and rnn.training:
            x = F.dropout(x, rnn.dropout, True)
        outs = []
        for d in range(dirs):
            weights = rnn._layer_weights(layer, d == 1)
            xg = F.linear(x, weights[0], weights[2]).split(sizes, 0)
            init_state = tuple(s[layer * dirs + d] for s in per_layer)
            o, final = _run_direction(rnn.mode, list(xg), init_state, weights, d == 1, sizes)
            outs.append(o)
            for acc, f in zip(finals, final):
                acc.append(f)
        steps = outs[0] if dirs == 1 else [_cat([a, b], 1) for a, b in zip(outs[0], outs[1])]
        x = _cat(steps, 0)
    from flow import stack

    out_states = tuple(stack(f, 0) for f in finals)
    if unsorted_indices is not None:
        out_states = tuple(s.index_select(1, unsorted_indices) for s in out_states)
    out = PackedSequence(x, batch_sizes, sorted_indices, unsorted_indices)
    return out, (out_states if rnn.mode == "LSTM" else out_states[0])
