"""A CNN + bidirectional GRU acoustic model trained with CTC (in the spirit of Deep Speech 2).

A 1-D convolutional front-end over log-mel (or other) feature frames subsamples time by
``2 ** len(conv_channels)``; a stack of bidirectional GRUs models the sequence and a linear layer
gives per-frame log-probabilities over ``vocab_size`` symbols, of which ``blank`` is CTC's
blank. Trained with ``nn.CTCLoss``; :meth:`CRNNCTC.greedy_decode` gives best-path transcripts.
"""

from __future__ import annotations

from dataclasses import dataclass

import flow
import flow.nn.functional as F
from flow import nn
from flow_models.dataspec import DataSpec
from flow_models.registry import ZooModel

__all__ = ["CRNNConfig", "CRNNCTC", "crnn_input"]


@dataclass
class CRNNConfig:
    """CNN + BiGRU hyper-parameters. The default vocabulary is blank + space + apostrophe + a-z (29)."""

    n_features: int = 80
    vocab_size: int = 29
    blank: int = 0
    conv_channels: tuple = (256, 256)
    kernel_size: int = 5
    rnn_hidden: int = 256
    rnn_layers: int = 3
    dropout: float = 0.1


class CRNNCTC(ZooModel):
    """Acoustic model: features ``(B, n_features, T)`` -> per-frame log-probabilities ``(B, T', vocab_size)``.

    ``T' = output_lengths(T)``; ``loss(log_probs, targets, input_lengths, target_lengths)`` is
    ``nn.CTCLoss`` (input lengths default to the full ``T'``; targets ``(B, S)`` padded or 1-D
    concatenated, as CTCLoss takes them).
    """

    def __init__(self, config: CRNNConfig | None = None) -> None:
        super().__init__()
        cfg = self.config = config or CRNNConfig()
        layers: list[nn.Module] = []
        cin = cfg.n_features
        for c in cfg.conv_channels:
            layers += [
                nn.Conv1d(cin, c, cfg.kernel_size, stride=2, padding=cfg.kernel_size // 2),
                nn.BatchNorm1d(c),
                nn.ReLU(),
                nn.Dropout(cfg.dropout),
            ]
            cin = c
        self.frontend = nn.Sequential(*layers)
        self.rnn = nn.GRU(
            cin,
            cfg.rnn_hidden,
            num_layers=cfg.rnn_layers,
            batch_first=True,
            bidirectional=True,
            dropout=cfg.dropout if cfg.rnn_layers > 1 else 0.0,
        )
        self.classifier = nn.Linear(2 * cfg.rnn_hidden, cfg.vocab_size)
        self.ctc = nn.CTCLoss(blank=cfg.blank, zero_infinity=True)

    def output_lengths(self, lengths):
        """Frame counts after the front-end's strided convolutions (an int or an int64 tensor)."""
        k = self.config.kernel_size
        for _ in self.config.conv_channels:
            lengths = (lengths + 2 * (k // 2) - k) // 2 + 1
        return lengths

    def forward(self, x: flow.Tensor) -> flow.Tensor:
        h = self.frontend(x).transpose(1, 2)  # (B, T', C)
        h, _ = self.rnn(h)
        return F.log_softmax(self.classifier(h), dim=-1)

    def loss(self, log_probs, targets, input_lengths=None, target_lengths=None):
        """CTC loss of batch-first ``log_probs`` ``(B, T', V)``; lengths default to the full sequences."""
        B, T = log_probs.shape[0], log_probs.shape[1]
        if input_lengths is None:
            input_lengths = flow.full((B,), T, dtype=flow.int64, device=log_probs.device)
        if target_lengths is None:
            if targets.ndim != 2:
                raise ValueError("CRNNCTC.loss: give target_lengths for 1-D concatenated targets")
            target_lengths = flow.full((B,), targets.shape[1], dtype=flow.int64, device=log_probs.device)
        return self.ctc(log_probs.transpose(0, 1), targets, input_lengths, target_lengths)

    def greedy_decode(self, log_probs: flow.Tensor, lengths=None) -> list[list[int]]:
        """Best-path decoding: the most likely symbol per frame, repeats merged and blanks dropped."""
        best = log_probs.argmax(dim=-1).numpy()
        lens = [best.shape[1]] * best.shape[0] if lengths is None else [int(n) for n in lengths]
        out = []
        for row, n in zip(best, lens):
            seq, prev = [], None
            for s in row[:n]:
                if s != prev and s != self.config.blank:
                    seq.append(int(s))
                prev = s
            out.append(seq)
        return out


def crnn_input(config: CRNNConfig) -> DataSpec:
    """What the CTC acoustic model takes: ``n_features`` x T frames (a spectrogram, or a 1 x samples
    waveform with ``n_features=1``), labelled with token sequences."""
    return DataSpec("ctc", ("features", "waveform"), (config.n_features, None))
