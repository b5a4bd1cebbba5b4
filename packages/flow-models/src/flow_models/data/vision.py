"""Image datasets: MNIST / Fashion-MNIST (IDX files), CIFAR-10 (binary batches), class folders, digits.

Nothing is downloaded: each reader takes a folder that holds the files in their published layout
and raises :class:`DataError` naming the file that is missing or corrupt. ``digits`` (scikit-learn's
1,797 8x8 handwritten digits) ships with scikit-learn and needs no files at all.
"""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from flow.utils.data import Dataset
from flow_models.data.base import ArrayDataset, DataError, DatasetSplits, data_root, split_indices

__all__ = [
    "read_idx",
    "load_mnist",
    "read_cifar10_batch",
    "load_cifar10",
    "ImageFolder",
    "load_image_folder",
    "load_digits",
    "IMAGE_EXTENSIONS",
]

# IDX type codes -> big-endian NumPy dtypes (http://yann.lecun.com/exdb/mnist/, "THE IDX FILE FORMAT")
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


def _read_bytes(path: str | os.PathLike) -> bytes:
    """The file's bytes, gunzipped when it starts with gzip's magic number."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise DataError(path, "file not found (flow-models never downloads data; put the file there)") from None
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, gzip.BadGzipFile) as e:
            raise DataError(path, f"corrupt gzip data: {e}") from None
    return raw


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an IDX file (raw or gzipped), as MNIST and Fashion-MNIST ship, into a NumPy array."""
    raw = _read_bytes(path)
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(path, "not an IDX file (the first two bytes must be zero)")
    code, ndim = raw[2], raw[3]
    if code not in _IDX_DTYPES:
        raise DataError(path, f"not an IDX file (unknown type code 0x{code:02x})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(path, f"truncated IDX header ({len(raw)} bytes for {ndim} dimensions)")
    shape = tuple(int(d) for d in np.frombuffer(raw, ">u4", ndim, 4))
    dtype = np.dtype(_IDX_DTYPES[code])
    expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if len(raw) != expected:
        raise DataError(
            path,
            f"truncated or oversized IDX file: shape {shape} of {dtype.name} needs "
            f"{expected} bytes, the file has {len(raw)}",
        )
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find(root: Path, stem: str) -> Path:
    """``root/stem`` or ``root/stem.gz`` (also the ``stem`` spelled with a dot, ``train-images.idx3-ubyte``)."""
    names = [stem, stem + ".gz"]
    alt = stem.replace("-idx", ".idx")
    names += [alt, alt + ".gz"]
    for name in names:
        if (root / name).is_file():
            return root / name
    raise DataError(
        root / (stem + ".gz"),
        f"file not found (looked for {' or '.join(names)} in {root}; flow-models never downloads data)",
    )


def load_mnist(
    root: str | os.PathLike | None = None, *, name: str = "mnist", normalize: bool = True, limit: int | None = None
) -> DatasetSplits:
    """MNIST or Fashion-MNIST from the four IDX files in ``root`` (gzipped or not): 1x28x28 images in [0, 1]."""
    root = data_root(root, name)
    parts = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = read_idx(_find(root, f"{prefix}-images-idx3-ubyte"))
        labels = read_idx(_find(root, f"{prefix}-labels-idx1-ubyte"))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise DataError(root, f"{prefix} images {images.shape} and labels {labels.shape} do not match")
        x = images.astype(np.float32)[:, None]
        if normalize:
            x /= 255.0
        y = labels.astype(np.int64)
        if limit:
            x, y = x[:limit], y[:limit]
        parts[split] = ArrayDataset(x, y)
    size = parts["train"].arrays[0].shape[-1]
    classes = _FASHION_CLASSES if "fashion" in name else [str(i) for i in range(10)]
    return DatasetSplits(
        name,
        "classification",
        parts["train"],
        parts["test"],
        model_args={"num_classes": 10, "in_channels": 1, "image_size": size},
        info={"classes": classes, "root": str(root)},
    )


_FASHION_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
_CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
_CIFAR_RECORD = 1 + 3 * 32 * 32
_CIFAR_MEAN = np.array([0.4914, 0.4822, 0.4465], np.float32)[:, None, None]
_CIFAR_STD = np.array([0.2470, 0.2435, 0.2616], np.float32)[:, None, None]


def read_cifar10_batch(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 binary batch: records of 1 label byte and 3x32x32 pixel bytes -> (uint8 NCHW, int64 labels)."""
    raw = _read_bytes(path)
    if not raw or len(raw) % _CIFAR_RECORD:
        raise DataError(
            path, f"not a CIFAR-10 binary batch: {len(raw)} bytes is not a multiple of the {_CIFAR_RECORD}-byte record"
        )
    rec = np.frombuffer(raw, np.uint8).reshape(-1, _CIFAR_RECORD)
    labels = rec[:, 0].astype(np.int64)
    if labels.max() > 9:
        raise DataError(path, f"not a CIFAR-10 binary batch: label {int(labels.max())} outside 0..9")
    return rec[:, 1:].reshape(-1, 3, 32, 32), labels


def load_cifar10(
    root: str | os.PathLike | None = None, *, normalize: bool = True, limit: int | None = None
) -> DatasetSplits:
    """CIFAR-10 from its binary version (``data_batch_1.bin`` ... ``data_batch_5.bin``, ``test_batch.bin``)."""
    root = data_root(root, "cifar-10-batches-bin")
    if not (root / "test_batch.bin").is_file() and (root / "cifar-10-batches-bin").is_dir():
        root = root / "cifar-10-batches-bin"
    train_files = sorted(root.glob("data_batch_*.bin"))
    if not train_files:
        raise DataError(
            root / "data_batch_1.bin",
            "file not found (no data_batch_*.bin in the folder; flow-models never downloads data)",
        )
    parts = {}
    for split, files in (("train", train_files), ("test", [root / "test_batch.bin"])):
        xs, ys = zip(*(read_cifar10_batch(f) for f in files))
        x, y = np.concatenate(xs).astype(np.float32) / 255.0, np.concatenate(ys)
        if normalize:
            x = (x - _CIFAR_MEAN) / _CIFAR_STD
        if limit:
            x, y = x[:limit], y[:limit]
        parts[split] = ArrayDataset(x.astype(np.float32), y)
    classes = _CIFAR10_CLASSES
    meta = root / "batches.meta.txt"
    if meta.is_file():
        names = [s.strip() for s in meta.read_text(errors="replace").splitlines() if s.strip()]
        classes = names[:10] if len(names) >= 10 else classes
    return DatasetSplits(
        "cifar10",
        "classification",
        parts["train"],
        parts["test"],
        model_args={"num_classes": 10, "in_channels": 3, "image_size": 32},
        info={"classes": classes, "root": str(root)},
    )


class ImageFolder(Dataset):
    """Images in ``root/<class>/*.png|jpg...``, decoded with Pillow on access to float32 CxHxW in [0, 1].

    Classes are the sorted sub-folder names. ``mode`` is Pillow's (``"L"`` grey, ``"RGB"``); ``size``
    (an int or (H, W)) resizes every image, so that images of different sizes batch together.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        mode: str = "RGB",
        size: int | tuple[int, int] | None = None,
        classes: list[str] | None = None,
        samples: list[tuple[str, int]] | None = None,
    ) -> None:
        self.root = Path(root)
        self.mode = mode
        self.size = (size, size) if isinstance(size, int) else (tuple(size) if size else None)
        if samples is None:
            classes, samples = _scan_class_folders(self.root, IMAGE_EXTENSIONS)
        self.classes = list(classes or [])
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        return decode_image(path, self.mode, self.size), np.int64(label)


def decode_image(path: str | os.PathLike, mode: str = "RGB", size: tuple[int, int] | None = None) -> np.ndarray:
    """One image file -> float32 CxHxW in [0, 1]; a file Pillow cannot read raises DataError naming it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            img = img.convert(mode)
            if size is not None and img.size != (size[1], size[0]):
                img = img.resize((size[1], size[0]), Image.BILINEAR)
            arr = np.asarray(img, dtype=np.float32) / 255.0
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise DataError(path, f"cannot decode image: {e}") from None
    return arr[None] if arr.ndim == 2 else np.ascontiguousarray(arr.transpose(2, 0, 1))


def _scan_class_folders(root: Path, extensions: tuple[str, ...]) -> tuple[list[str], list[tuple[str, int]]]:
    if not root.is_dir():
        raise DataError(root, "folder not found (expected one sub-folder of files per class)")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith((".", "_")))
    samples = [
        (str(f), k)
        for k, c in enumerate(classes)
        for f in sorted((root / c).rglob("*"))
        if f.is_file() and f.suffix.lower() in extensions
    ]
    if not samples:
        raise DataError(root, f"no files ending in {', '.join(extensions)} in class sub-folders")
    return classes, samples


def load_image_folder(
    root: str | os.PathLike, *, mode: str = "RGB", size: int | None = None, test_fraction: float = 0.2, seed: int = 0
) -> DatasetSplits:
    """Images by class folder; ``root/train`` and ``root/test`` if both exist, else a deterministic split.

    Without ``size``, the first image's size is used for all (resizing the others to it).
    """
    root = Path(root)
    if (root / "train").is_dir() and (root / "test").is_dir():
        classes, train_s = _scan_class_folders(root / "train", IMAGE_EXTENSIONS)
        test_classes, test_s = _scan_class_folders(root / "test", IMAGE_EXTENSIONS)
        index = {c: k for k, c in enumerate(classes)}
        missing = sorted(set(test_classes) - set(classes))
        if missing:
            raise DataError(root / "test", f"classes {missing} are not in {root / 'train'}")
        test_s = [(p, index[test_classes[k]]) for p, k in test_s]
    else:
        classes, samples = _scan_class_folders(root, IMAGE_EXTENSIONS)
        tr, te = split_indices(len(samples), test_fraction, seed)
        train_s, test_s = [samples[i] for i in tr], [samples[i] for i in te]
    if size is None:
        first = decode_image(train_s[0][0], mode)
        hw = first.shape[1:]
    else:
        hw = (size, size) if isinstance(size, int) else tuple(size)
    train = ImageFolder(root, mode, hw, classes, train_s)
    test = ImageFolder(root, mode, hw, classes, test_s)
    channels = 1 if mode in ("L", "1", "I", "F") else len(mode)
    return DatasetSplits(
        root.name or "images",
        "classification",
        train,
        test,
        model_args={"num_classes": len(classes), "in_channels": channels, "image_size": hw[0]},
        info={"classes": classes, "root": str(root)},
    )


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (1,797 x 64 pixel values 0..16, labels), read from the file scikit-learn ships.

    Reading ``sklearn/datasets/data/digits.csv.gz`` directly spares importing scikit-learn (seconds).
    """
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise DataError(None, "the digits data set comes with scikit-learn; pip install scikit-learn")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    if path.is_file():
        data = np.loadtxt(path, delimiter=",", dtype=np.float32)
        return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits as sk_digits  # another layout of scikit-learn's files

    d = sk_digits()
    return d.images.astype(np.float32), d.target.astype(np.int64)


def load_digits(*, test_fraction: float = 0.2, seed: int = 0) -> DatasetSplits:
    """scikit-learn's 1,797 8x8 handwritten digits (values 0..16 scaled to [0, 1]), a fixed 80/20 split."""
    images, y = _digits_arrays()
    x = (images / 16.0)[:, None].astype(np.float32)
    tr, te = split_indices(len(y), test_fraction, seed)
    return DatasetSplits(
        "digits",
        "classification",
        ArrayDataset(x[tr], y[tr]),
        ArrayDataset(x[te], y[te]),
        model_args={"num_classes": 10, "in_channels": 1, "image_size": 8},
        info={"classes": [str(i) for i in range(10)]},
    )
