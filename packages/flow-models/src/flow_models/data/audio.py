"""Audio datasets: WAV files by label (the Speech Commands layout) and synthetic keyword / CTC sets.

WAV files are read with the standard library's :mod:`wave` (integer PCM, 8 to 32 bits, any number
of channels, averaged to mono) and resampled by linear interpolation when their rate differs.
The synthetic sets need no files: keywords are short sequences of tones, each class with its own
planted spectral signature (which tones, in which order), under pitch, timing, loudness and noise
jitter; the CTC variant strings tone "phones" into utterances labelled with their phone sequence.
"""

from __future__ import annotations

import os
import wave
from pathlib import Path

import numpy as np

from flow.utils.data import Dataset
from flow_models.data.base import ArrayDataset, DataError, DatasetSplits, stable_fraction

__all__ = [
    "read_wav",
    "write_wav",
    "fit_length",
    "WavFolder",
    "load_speech_commands",
    "load_synthetic_speech",
    "load_synthetic_speech_ctc",
    "log_spectrogram",
    "KEYWORDS",
]

KEYWORDS = ("yes", "no", "up", "down", "left", "right")


def read_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """A PCM WAV file -> (float32 mono samples in [-1, 1], sample rate)."""
    try:
        with wave.open(os.fspath(path), "rb") as w:
            channels, width, rate, n = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(n)
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except (wave.Error, EOFError) as e:
        raise DataError(path, f"not a PCM WAV file: {e}") from None
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None
    frame = channels * width
    if channels < 1 or frame == 0 or len(raw) % frame:
        raise DataError(path, f"truncated WAV data ({len(raw)} bytes, {channels} channels of {width} bytes)")
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = np.frombuffer(raw, "<i4").astype(np.float32) / float(1 << 31)
    else:
        raise DataError(path, f"unsupported sample width of {width} bytes")
    if len(x) == 0:
        raise DataError(path, "no audio frames")
    return x.reshape(-1, channels).mean(axis=1).astype(np.float32), rate


def write_wav(path: str | os.PathLike, samples: np.ndarray, sample_rate: int) -> None:
    """Write float samples in [-1, 1] as a 16-bit mono PCM WAV file."""
    pcm = (np.clip(np.asarray(samples, np.float64), -1, 1) * 32767).astype("<i2")
    with wave.open(os.fspath(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())


def fit_length(x: np.ndarray, rate: int, target_rate: int, length: int) -> np.ndarray:
    """Resample ``x`` from ``rate`` to ``target_rate`` (linear interpolation), then zero-pad or cut to ``length``."""
    if rate != target_rate:
        n = max(1, int(round(len(x) * target_rate / rate)))
        x = np.interp(np.arange(n) * (rate / target_rate), np.arange(len(x)), x).astype(np.float32)
    if len(x) >= length:
        return x[:length]
    return np.pad(x, (0, length - len(x)))


class WavFolder(Dataset):
    """``(1 x length float32 waveform, label)`` samples from a list of ``(wav path, label)``, read on access."""

    def __init__(self, samples: list[tuple[str, int]], classes: list[str], sample_rate: int, length: int) -> None:
        self.samples = samples
        self.classes = classes
        self.sample_rate = sample_rate
        self.length = length

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        x, rate = read_wav(path)
        return fit_length(x, rate, self.sample_rate, self.length)[None], np.int64(label)


def _read_list(path: Path) -> set[str]:
    if not path.is_file():
        return set()
    return {line.strip().replace("\\", "/") for line in path.read_text().splitlines() if line.strip()}


def load_speech_commands(
    root: str | os.PathLike,
    *,
    sample_rate: int = 16_000,
    length: int | None = None,
    classes: list[str] | str | None = None,
    test_fraction: float = 0.1,
) -> DatasetSplits:
    """WAV files in ``root/<label>/*.wav``, as Google's Speech Commands lays them out.

    ``testing_list.txt`` (paths relative to ``root``) names the test split when present; otherwise a
    file is in the test split when a hash of its speaker (the name before ``_nohash_``) says so, so
    one speaker's recordings never straddle the splits. Folders starting with ``_`` (background noise)
    are skipped. ``classes`` keeps only some labels; ``length`` defaults to one second.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataError(root, "folder not found (expected one sub-folder of .wav files per label)")
    labels = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith((".", "_")))
    if classes:
        wanted = classes.split(",") if isinstance(classes, str) else list(classes)
        missing = sorted(set(wanted) - set(labels))
        if missing:
            raise DataError(root, f"no sub-folders for labels {missing}")
        labels = wanted
    testing = _read_list(root / "testing_list.txt")
    train, test = [], []
    for k, label in enumerate(labels):
        for f in sorted((root / label).glob("*.wav")):
            rel = f"{label}/{f.name}"
            if testing:
                is_test = rel in testing
            else:
                is_test = stable_fraction(f"{label}/{f.name.split('_nohash_')[0]}") < test_fraction
            (test if is_test else train).append((str(f), k))
    if not train or not test:
        raise DataError(root, f"need .wav files in both splits, found {len(train)} train and {len(test)} test")
    length = length or sample_rate
    return DatasetSplits(
        root.name or "speech",
        "classification",
        WavFolder(train, labels, sample_rate, length),
        WavFolder(test, labels, sample_rate, length),
        model_args={"num_classes": len(labels), "in_channels": 1, "sample_rate": sample_rate},
        info={"classes": labels, "sample_rate": sample_rate, "length": length},
    )


def _tone(rng, n: int, rate: int, freq: float) -> np.ndarray:
    """A tone with two harmonics and a smooth (Hann) envelope."""
    t = np.arange(n) / rate
    phase = rng.uniform(0, 2 * np.pi)
    wave_ = np.sin(2 * np.pi * freq * t + phase) + 0.4 * np.sin(4 * np.pi * freq * t + phase)
    return (wave_ * np.hanning(n)).astype(np.float32)


def _keyword_signatures(n_classes: int, seed: int) -> list[tuple[float, float]]:
    """Each keyword is two tones in order; no two keywords share the pair (nor its reverse order)."""
    grid = np.geomspace(300.0, 3000.0, 12)
    rng = np.random.Generator(np.random.Philox(seed + 7919))
    pairs = [(i, j) for i in range(len(grid)) for j in range(len(grid)) if abs(i - j) >= 2]
    order = rng.permutation(len(pairs))
    chosen: list[tuple[int, int]] = []
    for k in order:
        i, j = pairs[k]
        if all({i, j} != {a, b} for a, b in chosen):
            chosen.append((i, j))
        if len(chosen) == n_classes:
            break
    return [(float(grid[i]), float(grid[j])) for i, j in chosen]


def load_synthetic_speech(
    *,
    classes: int = len(KEYWORDS),
    per_class: int = 250,
    sample_rate: int = 8000,
    duration: float = 0.5,
    noise: float = 0.3,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> DatasetSplits:
    """Waveforms of a few keyword classes, each a planted two-tone signature, for keyword spotting.

    Every utterance has its class's two tones in order at a random onset, with +-4% pitch, +-20%
    timing and 0.3..1 loudness jitter, plus white noise (``noise`` is its standard deviation
    relative to the tones') and a random distractor tone.
    """
    if not 2 <= classes <= 20:
        raise ValueError(f"classes must be in 2..20, got {classes}")
    rng = np.random.Generator(np.random.Philox(seed))
    sigs = _keyword_signatures(classes, seed)
    length = int(sample_rate * duration)
    n = classes * per_class
    y = np.repeat(np.arange(classes), per_class)
    x = np.zeros((n, length), np.float32)
    for i in range(n):
        f1, f2 = sigs[y[i]]
        pitch = rng.uniform(0.96, 1.04)
        seg = int(length * 0.3 * rng.uniform(0.8, 1.2))
        start = rng.integers(0, max(1, length - 2 * seg))
        x[i, start : start + seg] += _tone(rng, seg, sample_rate, f1 * pitch)
        x[i, start + seg : start + 2 * seg] += _tone(rng, seg, sample_rate, f2 * pitch)
        x[i] *= rng.uniform(0.3, 1.0)
        d = int(length * 0.15)
        ds = rng.integers(0, length - d)
        x[i, ds : ds + d] += 0.3 * _tone(rng, d, sample_rate, rng.uniform(200, 3500))
    x += rng.normal(0, noise * 0.5, x.shape).astype(np.float32)
    perm = rng.permutation(n)
    n_test = int(round(n * test_fraction))
    te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    x, y = x[:, None], y.astype(np.int64)
    names = list(KEYWORDS[:classes]) + [f"kw{k}" for k in range(len(KEYWORDS), classes)]
    return DatasetSplits(
        "synthetic-speech",
        "classification",
        ArrayDataset(x[tr], y[tr]),
        ArrayDataset(x[te], y[te]),
        model_args={"num_classes": classes, "in_channels": 1, "sample_rate": sample_rate},
        info={"classes": names, "sample_rate": sample_rate, "length": length, "signatures_hz": [list(s) for s in sigs]},
    )


def log_spectrogram(x: np.ndarray, n_fft: int = 256, hop: int = 128) -> np.ndarray:
    """Log-magnitude STFT frames of a 1-D signal: (frames, n_fft // 2 + 1) float32."""
    if len(x) < n_fft:
        x = np.pad(x, (0, n_fft - len(x)))
    frames = 1 + (len(x) - n_fft) // hop
    idx = np.arange(n_fft)[None] + hop * np.arange(frames)[:, None]
    spec = np.abs(np.fft.rfft(x[idx] * np.hanning(n_fft), axis=1))
    return np.log1p(spec).astype(np.float32)


def load_synthetic_speech_ctc(
    *,
    phones: int = 8,
    utterances: int = 1200,
    min_len: int = 2,
    max_len: int = 5,
    sample_rate: int = 8000,
    n_fft: int = 256,
    hop: int = 128,
    noise: float = 0.2,
    features: str = "spectrogram",
    test_fraction: float = 0.2,
    seed: int = 0,
) -> DatasetSplits:
    """Utterances of ``min_len``..``max_len`` tone "phones" labelled with their phone sequence, for CTC.

    A sample is ``(features, feature_length, targets, target_length)``: log-spectrogram frames,
    channels first (``(n_fft/2+1) x T``, zero-padded to the longest utterance, as a Conv1d front-end
    takes them) or, with ``features="wave"``, the padded ``1 x samples`` waveform; targets are phone
    ids ``1..phones`` padded with 0, id 0 being CTC's blank.
    """
    if features not in ("spectrogram", "wave"):
        raise ValueError(f"features must be 'spectrogram' or 'wave', got {features!r}")
    rng = np.random.Generator(np.random.Philox(seed))
    freqs = np.geomspace(300.0, 3000.0, phones)
    seg_lo, seg_hi = int(0.06 * sample_rate), int(0.10 * sample_rate)
    max_samples = max_len * (seg_hi + int(0.03 * sample_rate)) + n_fft
    waves, lengths, targets = [], [], np.zeros((utterances, max_len), np.int64)
    for i in range(utterances):
        k = int(rng.integers(min_len, max_len + 1))
        seq = rng.integers(0, phones, k)
        parts = [np.zeros(int(rng.integers(0, int(0.02 * sample_rate))), np.float32)]
        for p in seq:
            seg = int(rng.integers(seg_lo, seg_hi + 1))
            parts.append(_tone(rng, seg, sample_rate, freqs[p] * rng.uniform(0.97, 1.03)))
            parts.append(np.zeros(int(rng.integers(int(0.01 * sample_rate), int(0.03 * sample_rate))), np.float32))
        w = np.concatenate(parts) * rng.uniform(0.4, 1.0)
        w = w + rng.normal(0, noise * 0.5, len(w)).astype(np.float32)
        waves.append(w)
        targets[i, :k] = seq + 1
        lengths.append(k)
    target_len = np.asarray(lengths, np.int64)
    if features == "wave":
        feats = np.zeros((utterances, 1, max_samples), np.float32)
        feat_len = np.zeros(utterances, np.int64)
        for i, w in enumerate(waves):
            feats[i, 0, : len(w)] = w
            feat_len[i] = len(w)
    else:
        specs = [log_spectrogram(w, n_fft, hop) for w in waves]
        t_max = 1 + (max_samples - n_fft) // hop
        feats = np.zeros((utterances, n_fft // 2 + 1, t_max), np.float32)
        feat_len = np.asarray([len(s) for s in specs], np.int64)
        for i, s in enumerate(specs):
            feats[i, :, : len(s)] = s.T
    perm = rng.permutation(utterances)
    n_test = int(round(utterances * test_fraction))
    te, tr = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    data = ArrayDataset(feats, feat_len, targets, target_len)
    return DatasetSplits(
        "synthetic-speech-ctc",
        "ctc",
        data.subset(tr),
        data.subset(te),
        model_args={"vocab_size": phones + 1, "n_features": int(feats.shape[1])},
        info={
            "classes": ["<blank>"] + [f"p{k}" for k in range(phones)],
            "blank": 0,
            "sample_rate": sample_rate,
            "features": features,
            "phone_hz": [float(f) for f in freqs],
        },
    )
