"""What a dataset produces and what a model consumes, so that a pair is checked before anything is built.

A :class:`DataSpec` names the task (which loss and metric: ``classification``, ``lm``, ``recsys``,
``ctc``, or one only some models have, such as ``masked-lm``), the kind of input and its
per-sample shape. A dataset declares one (``register_dataset(..., produces=...)``, a spec or a
function of the dataset's options), a model declares one from its config
(``register_model(..., consumes=fn(config) -> DataSpec)``); :func:`mismatch` says why a model cannot
take what a dataset gives, before any file is read or any weight allocated.

Input kinds and their dimensions (per sample; a batch adds the first dimension):

======== ================ ==================================================================
kind     dimensions       what a sample holds
======== ================ ==================================================================
image    (C, H, W)        float pixels, channels first
tokens   (T,)             int64 token ids (a language model's window)
waveform (C, L)           float audio samples
features (F, T)           float frames (a spectrogram), features first, T frames
tabular  (dense, sparse)  float dense features and int64 categorical ids (two inputs)
======== ================ ==================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DataSpec", "INPUT_KINDS", "mismatch", "fitted_model_args", "sample_mismatch"]

INPUT_KINDS: dict[str, tuple[str, ...]] = {
    "image": ("C", "H", "W"),
    "tokens": ("T",),
    "waveform": ("C", "L"),
    "features": ("F", "T"),
    "tabular": ("dense", "sparse"),
}

# Which model config field (under the data's model_args names, see flow_models.train.build.MODEL_ARG_SYNONYMS)
# each dimension of a kind sets when a model is fitted to the data.
_FITTED_BY: dict[str, tuple[str | None, ...]] = {
    "image": ("in_channels", "image_size", None),
    "tokens": (None,),
    "waveform": ("in_channels", None),
    "features": ("n_features", None),
    "tabular": ("num_dense", None),
}


@dataclass(frozen=True)
class DataSpec:
    """A task, an input kind (or, for a model, the kinds it accepts) and a per-sample shape.

    ``shape`` has one entry per dimension of the kind: an int is that size exactly, ``None`` any
    size. ``min_shape`` (models) gives the smallest size a dimension may have; ``model_args``
    (datasets) is what the data tells the model before it is read (``table_sizes`` of a
    recommendation set), beyond what the shape says.

    >>> DataSpec("classification", "image", (1, 8, 8))
    DataSpec(task='classification', input='image', shape=(1, 8, 8), ...)
    """

    task: str
    input: str | tuple[str, ...]
    shape: tuple[int | None, ...] = ()
    min_shape: tuple[int | None, ...] | None = None
    model_args: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        kinds = (self.input,) if isinstance(self.input, str) else tuple(self.input)
        for kind in kinds:
            if kind not in INPUT_KINDS:
                raise ValueError(f"DataSpec: input kind must be one of {', '.join(INPUT_KINDS)}, got {kind!r}")
        dims = {len(INPUT_KINDS[k]) for k in kinds}
        shape = tuple(self.shape) or (None,) * max(dims)
        object.__setattr__(self, "shape", shape)
        if len(shape) not in dims:
            raise ValueError(
                f"DataSpec: a {'/'.join(kinds)} sample has dimensions {INPUT_KINDS[kinds[0]]}, got shape {shape}"
            )
        if self.min_shape is not None and len(self.min_shape) != len(shape):
            raise ValueError(f"DataSpec: min_shape {self.min_shape} does not match shape {shape}")

    @property
    def kinds(self) -> tuple[str, ...]:
        return (self.input,) if isinstance(self.input, str) else tuple(self.input)

    def describe(self) -> str:
        """``classification of image (1, 8, 8)``; ``None`` dimensions by name, minimums as ``H>=32``."""
        names = INPUT_KINDS[self.kinds[0]]
        dims = []
        for k, size in enumerate(self.shape):
            low = self.min_shape[k] if self.min_shape else None
            dims.append(str(size) if size is not None else f"{names[k]}>={low}" if low else names[k])
        inner = ", ".join(dims) + ("," if len(dims) == 1 else "")
        return f"{self.task} of {' or '.join(self.kinds)} ({inner})"


def fitted_model_args(spec: DataSpec) -> dict[str, Any]:
    """What a model is fitted with from this data, as far as the declaration tells (``in_channels``, ...)."""
    out = dict(spec.model_args)
    fitted = _FITTED_BY[spec.kinds[0]]
    for k, name in enumerate(fitted):
        if name is not None and spec.shape[k] is not None:
            out.setdefault(name, spec.shape[k])
    return out


def mismatch(data: DataSpec, model: DataSpec) -> str | None:
    """Why a model declaring ``model`` cannot train on data declaring ``data``; ``None`` when it can."""
    if data.task != model.task:
        return f"the dataset is for {data.task}, the model for {model.task}"
    kind = data.kinds[0]
    if kind not in model.kinds:
        return f"the dataset gives {kind}, the model takes {' or '.join(model.kinds)}"
    if len(data.shape) != len(model.shape):
        return f"a sample has {len(data.shape)} dimensions, not {len(model.shape)}"
    names = INPUT_KINDS[kind]
    for k, (have, want) in enumerate(zip(data.shape, model.shape)):
        if have is not None and want is not None and have != want:
            return f"{names[k]} is {have}, not {want}"
        low = model.min_shape[k] if model.min_shape else None
        if have is not None and low is not None and have < low:
            return f"{names[k]} is {have}, below the model's minimum of {low}"
    return None


def sample_mismatch(spec: DataSpec, sample) -> str | None:
    """Whether a loaded sample agrees with its dataset's declaration (a declaration is checked against the data)."""
    first = sample[0] if isinstance(sample, (tuple, list)) else sample
    kind = spec.kinds[0]
    if kind == "tabular":
        if not isinstance(sample, (tuple, list)) or len(sample) < 2:
            return "a tabular sample is (dense, sparse, ...)"
        shape = (_len(sample[0]), _len(sample[1]))
    else:
        shape = tuple(getattr(first, "shape", ()))
    if len(shape) != len(spec.shape):
        return f"a sample's input has shape {shape}, not {len(spec.shape)} dimensions"
    for have, want in zip(shape, spec.shape):
        if want is not None and have != want:
            return f"a sample's input has shape {shape}, not {spec.shape}"
    return None


def _len(a) -> int | None:
    shape = getattr(a, "shape", None)
    return int(shape[-1]) if shape else None
