"""Recurrent layers: RNN, LSTM, GRU and their single-step cells, with PyTorch's parameter layout.

The time loop runs in Python over flow ops; the input projection of all time steps of a layer is one
matmul done before the loop, so each step only multiplies by the hidden-to-hidden weight.
"""

from __future__ import annotations

import math

import flow.nn.functional as F
from flow import _creation as C
from flow._tensor import Tensor
from flow.nn import init
from flow.nn.modules.module import Module
from flow.nn.parameter import Parameter

__all__ = ["RNNBase", "RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def _stack(tensors: list, dim: int = 0) -> Tensor:
    from flow import stack

    return stack(tensors, dim)


def _cat(tensors: list, dim: int) -> Tensor:
    from flow import cat

    return cat(tensors, dim)


def _lstm_step(xg, h, c, w_hh, b_hh, w_hr):
    gates = xg + F.linear(h, w_hh, b_hh)
    i, f, g, o = gates.chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    if w_hr is not None:
        h = F.linear(h, w_hr)
    return h, c


def _gru_step(xg, h, w_hh, b_hh):
    gh = F.linear(h, w_hh, b_hh)
    x_r, x_z, x_n = xg.chunk(3, -1)
    h_r, h_z, h_n = gh.chunk(3, -1)
    r = (x_r + h_r).sigmoid()
    z = (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return n + z * (h - n)  # = (1 - z) * n + z * h


def _rnn_step(xg, h, w_hh, b_hh, relu: bool):
    pre = xg + F.linear(h, w_hh, b_hh)
    return pre.relu() if relu else pre.tanh()


class RNNBase(Module):
    """Shared parameters and forward of RNN, LSTM and GRU (``weight_ih_l{k}``, ``weight_hh_l{k}``,
    ``bias_ih_l{k}``, ``bias_hh_l{k}``, with ``_reverse`` for the backward direction, as torch)."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        if not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an element being zeroed"
            )
        if hidden_size <= 0 or num_layers <= 0:
            raise ValueError("hidden_size and num_layers must be positive integers")
        if proj_size < 0 or (proj_size and mode != "LSTM"):
            raise ValueError("proj_size must be a non-negative integer, and is only supported by LSTM")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gate = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        dirs = 2 if bidirectional else 1
        self._flat_weights_names = []
        for layer in range(num_layers):
            for d in range(dirs):
                in_size = input_size if layer == 0 else real_hidden * dirs
                sfx = f"_l{layer}" + ("_reverse" if d == 1 else "")
                shapes = [("weight_ih" + sfx, (gate, in_size)), ("weight_hh" + sfx, (gate, real_hidden))]
                if bias:
                    shapes += [("bias_ih" + sfx, (gate,)), ("bias_hh" + sfx, (gate,))]
                if proj_size > 0:
                    shapes.append(("weight_hr" + sfx, (proj_size, hidden_size)))
                for name, shape in shapes:
                    setattr(self, name, Parameter(C.empty(*shape, device=device, dtype=dtype)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """No-op (kept for PyTorch compatibility: flow keeps no fused weight buffer)."""

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, n) for n in self._flat_weights_names]

    @property
    def all_weights(self) -> list:
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional else 1))
        w = self._flat_weights
        return [w[i : i + per] for i in range(0, len(w), per)]

    def _layer_weights(self, layer: int, reverse: bool) -> tuple:
        sfx = f"_l{layer}" + ("_reverse" if reverse else "")
        get = self._parameters.get
        return (
            get("weight_ih" + sfx),
            get("weight_hh" + sfx),
            get("bias_ih" + sfx),
            get("bias_hh" + sfx),
            get("weight_hr" + sfx),
        )

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # -- forward ---------------------------------------------------------------------------
    def _initial_state(self, input: Tensor, hx, batch: int, unbatched: bool) -> tuple:
        dirs = 2 if self.bidirectional else 1
        h_size = self.proj_size if self.proj_size > 0 else self.hidden_size
        shapes = [(self.num_layers * dirs, batch, h_size)]
        if self.mode == "LSTM":
            shapes.append((self.num_layers * dirs, batch, self.hidden_size))
        if hx is None:
            return tuple(C.zeros(*s, dtype=input.dtype, device=input.device) for s in shapes)
        states = tuple(hx) if self.mode == "LSTM" else (hx,)
        if self.mode == "LSTM" and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError("LSTM: hx must be a tuple (h_0, c_0)")
        out = []
        for s, expected in zip(states, shapes):
            if not isinstance(s, Tensor):
                raise TypeError(f"{type(self).__name__}: initial states must be Tensors, got {type(s).__name__}")
            if unbatched:
                if s.ndim != 2:
                    raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {s.ndim}-D tensor")
                s = s.unsqueeze(1)
            elif s.ndim != 3:
                raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {s.ndim}-D tensor")
            if tuple(s.shape) != expected:
                got = tuple(s.shape)[::2] + (s.shape[-1],) if unbatched else tuple(s.shape)
                want = (expected[0], expected[2]) if unbatched else expected
                raise RuntimeError(f"Expected hidden size {want}, got {got}")
            out.append(s)
        return tuple(out)

    def _run_direction(self, x: Tensor, state: tuple, weights: tuple, reverse: bool) -> tuple:
        """One layer in one direction over (T, N, I) input; returns (outputs in time order, final state)."""
        w_ih, w_hh, b_ih, b_hh, w_hr = weights
        xg = F.linear(x, w_ih, b_ih).unbind(0)  # the input projection of every step in one matmul
        steps = range(len(xg) - 1, -1, -1) if reverse else range(len(xg))
        outs = [None] * len(xg)
        if self.mode == "LSTM":
            h, c = state
            for t in steps:
                h, c = _lstm_step(xg[t], h, c, w_hh, b_hh, w_hr)
                outs[t] = h
            return outs, (h, c)
        (h,) = state
        gru, relu = self.mode == "GRU", self.mode == "RNN_RELU"
        for t in steps:
            h = _gru_step(xg[t], h, w_hh, b_hh) if gru else _rnn_step(xg[t], h, w_hh, b_hh, relu)
            outs[t] = h
        return outs, (h,)

    def forward(self, input: Tensor, hx=None):
        from flow.nn.utils.rnn import PackedSequence

        if isinstance(input, PackedSequence):
            from flow.nn.modules.rnn_packed import packed_forward

            return packed_forward(self, input, hx)
        if not isinstance(input, Tensor):
            raise TypeError(
                f"{type(self).__name__}: input must be a Tensor or a PackedSequence, got {type(input).__name__}"
            )
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got {input.shape[-1]}"
            )
        unbatched = input.ndim == 2
        if unbatched:
            input = input.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        if input.shape[0] == 0:
            raise RuntimeError(f"{type(self).__name__}: the input sequence is empty")
        states = self._initial_state(input, hx, input.shape[1], unbatched)
        dirs = 2 if self.bidirectional else 1
        finals: list[list] = [[] for _ in states]
        per_layer = [s.unbind(0) for s in states]  # (layers * dirs) initial states of (N, H)
        x = input
        for layer in range(self.num_layers):
            if layer > 0 and self.dropout > 0 and self.training:
                x = F.dropout(x, self.dropout, True)
            outs = []
            for d in range(dirs):
                idx = layer * dirs + d
                init_state = tuple(s[idx] for s in per_layer)
                o, final = self._run_direction(x, init_state, self._layer_weights(layer, d == 1), d == 1)
                outs.append(_stack(o, 0))
                for acc, f in zip(finals, final):
                    acc.append(f)
            x = outs[0] if dirs == 1 else _cat(outs, 2)
        out_states = tuple(_stack(f, 0) for f in finals)
        if unbatched:
            x = x.squeeze(1)
            out_states = tuple(s.squeeze(1) for s in out_states)
        elif self.batch_first:
            x = x.transpose(0, 1)
        return x, (out_states if self.mode == "LSTM" else out_states[0])


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (``nonlinearity='relu'`` too).

    >>> out, h = flow.nn.RNN(4, 8, num_layers=2)(flow.randn(5, 3, 4))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.nonlinearity = nonlinearity
        super().__init__(
            "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s + (", nonlinearity='relu'" if self.nonlinearity != "tanh" else "")


class LSTM(RNNBase):
    """Long short-term memory with gates in torch's order (input, forget, cell, output).

    Returns ``output, (h_n, c_n)``; ``proj_size > 0`` projects the hidden state (weight_hr_l{k}).

    >>> lstm = flow.nn.LSTM(10, 20, num_layers=2, batch_first=True, bidirectional=True)
    >>> out, (h, c) = lstm(flow.randn(3, 5, 10))
    >>> out.shape, h.shape
    (flow.Size([3, 5, 40]), flow.Size([4, 3, 20]))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            "LSTM",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            proj_size,
            device=device,
            dtype=dtype,
        )


class GRU(RNNBase):
    """Gated recurrent unit with gates in torch's order (reset, update, new).

    >>> out, h = flow.nn.GRU(4, 8)(flow.randn(5, 3, 4))
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__(
            "GRU",
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            device=device,
            dtype=dtype,
        )


# -- cells -------------------------------------------------------------------------------------
class RNNCellBase(Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int, device=None, dtype=None) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.weight_ih = Parameter(C.empty(num_chunks * hidden_size, input_size, device=device, dtype=dtype))
        self.weight_hh = Parameter(C.empty(num_chunks * hidden_size, hidden_size, device=device, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(C.empty(num_chunks * hidden_size, device=device, dtype=dtype))
            self.bias_hh = Parameter(C.empty(num_chunks * hidden_size, device=device, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        return s

    def _prepare(self, input: Tensor, states: tuple) -> tuple:
        if input.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[-1]} expected {self.input_size}")
        unbatched = input.ndim == 1
        if unbatched:
            input = input.unsqueeze(0)
        out = []
        for s in states:
            if s is None:
                s = C.zeros(input.shape[0], self.hidden_size, dtype=input.dtype, device=input.device)
            elif unbatched:
                s = s.unsqueeze(0)
            out.append(s)
        return input, tuple(out), unbatched


class RNNCell(RNNCellBase):
    """One step of an Elman RNN: ``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)``."""

    def __init__(
        self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh", device=None, dtype=None
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, (h,), unbatched = self._prepare(input, (hx,))
        h = _rnn_step(
            F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh, self.nonlinearity == "relu"
        )
        return h.squeeze(0) if unbatched else h


class LSTMCell(RNNCellBase):
    """One LSTM step: returns ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input: Tensor, hx: tuple | None = None) -> tuple:
        x, (h, c), unbatched = self._prepare(input, (None, None) if hx is None else tuple(hx))
        h, c = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh, None)
        return (h.squeeze(0), c.squeeze(0)) if unbatched else (h, c)


class GRUCell(RNNCellBase):
    """One GRU step."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:
        x, (h,), unbatched = self._prepare(input, (hx,))
        h = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh, self.bias_hh)
        return h.squeeze(0) if unbatched else h
