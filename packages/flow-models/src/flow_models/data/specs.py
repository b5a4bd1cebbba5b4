"""What each dataset of flow-models produces (:class:`~flow_models.dataspec.DataSpec`), from its options alone.

Each function takes the reader's keyword arguments (and ignores those that do not change the
samples' shape), so that flow-train can check a model against a dataset before reading a file.
The tests check every declaration against the samples the reader returns.
"""

from __future__ import annotations

from flow_models.data.base import as_int_list
from flow_models.data.recsys import NUM_DENSE, NUM_SPARSE, synthetic_table_sizes
from flow_models.dataspec import DataSpec

__all__ = [
    "digits",
    "mnist",
    "cifar10",
    "image_folder",
    "text",
    "synthetic_recsys",
    "criteo",
    "synthetic_speech",
    "speech_commands",
    "synthetic_speech_ctc",
]

_GREY_MODES = ("L", "1", "I", "F")  # PIL modes with one channel


def digits(**_) -> DataSpec:
    return DataSpec("classification", "image", (1, 8, 8))


def mnist(**_) -> DataSpec:
    return DataSpec("classification", "image", (1, 28, 28))


def cifar10(**_) -> DataSpec:
    return DataSpec("classification", "image", (3, 32, 32))


def image_folder(*, mode: str = "RGB", size: int | tuple | list | None = None, **_) -> DataSpec:
    channels = 1 if mode in _GREY_MODES else len(mode)
    if size is None:  # the first image's size, known once it is read
        return DataSpec("classification", "image", (channels, None, None))
    h, w = (size, size) if isinstance(size, int) else tuple(size)
    return DataSpec("classification", "image", (channels, int(h), int(w)))


def text(*, block_size: int = 128, **_) -> DataSpec:
    return DataSpec("lm", "tokens", (block_size,))


def synthetic_recsys(*, table_size: int = 100, **_) -> DataSpec:
    return DataSpec(
        "recsys", "tabular", (NUM_DENSE, NUM_SPARSE), model_args={"table_sizes": synthetic_table_sizes(table_size)}
    )


def criteo(*, table_sizes: int | list[int] = 10_000, **_) -> DataSpec:
    return DataSpec(
        "recsys",
        "tabular",
        (NUM_DENSE, NUM_SPARSE),
        model_args={"table_sizes": as_int_list(table_sizes, NUM_SPARSE, "table_sizes")},
    )


def synthetic_speech(*, sample_rate: int = 8000, duration: float = 0.5, **_) -> DataSpec:
    return DataSpec("classification", "waveform", (1, int(sample_rate * duration)))


def speech_commands(*, sample_rate: int = 16_000, length: int | None = None, **_) -> DataSpec:
    return DataSpec("classification", "waveform", (1, length or sample_rate))


def synthetic_speech_ctc(*, n_fft: int = 256, features: str = "spectrogram", **_) -> DataSpec:
    if features == "wave":
        return DataSpec("ctc", "waveform", (1, None), model_args={"n_features": 1})
    if features != "spectrogram":
        raise ValueError(f"features must be 'spectrogram' or 'wave', got {features!r}")
    return DataSpec("ctc", "features", (int(n_fft) // 2 + 1, None))
