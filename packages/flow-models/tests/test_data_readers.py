"""Every dataset reader on small files the tests write: right arrays out, and one DataError naming a bad file."""

from __future__ import annotations

import gzip
import struct
import wave
import zlib

import numpy as np
import pytest

from flow.utils.data import DataLoader
from flow_models.data import (
    ByteTokenizer,
    CharTokenizer,
    DataError,
    decode_image,
    fit_length,
    load_cifar10,
    load_criteo,
    load_image_folder,
    load_mnist,
    load_speech_commands,
    load_text_corpus,
    read_cifar10_batch,
    read_criteo_tsv,
    read_idx,
    read_wav,
    write_wav,
)

RNG = np.random.default_rng(0)


# -- IDX (MNIST, Fashion-MNIST) ---------------------------------------------------------------------
def idx_bytes(arr: np.ndarray) -> bytes:
    codes = {
        np.dtype(np.uint8): 0x08,
        np.dtype(np.int8): 0x09,
        np.dtype(">i2"): 0x0B,
        np.dtype(">i4"): 0x0C,
        np.dtype(">f4"): 0x0D,
        np.dtype(">f8"): 0x0E,
    }
    head = bytes([0, 0, codes[arr.dtype], arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return head + arr.tobytes()


def write_mnist(root, n_train=12, n_test=5, size=28, gz=True):
    root.mkdir(parents=True, exist_ok=True)
    data = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        images = RNG.integers(0, 256, (n, size, size), dtype=np.uint8)
        labels = RNG.integers(0, 10, n).astype(np.uint8)
        for kind, arr, suffix in (("images", images, "idx3-ubyte"), ("labels", labels, "idx1-ubyte")):
            raw = idx_bytes(arr)
            name = f"{prefix}-{kind}-{suffix}"
            if gz:
                (root / (name + ".gz")).write_bytes(gzip.compress(raw))
            else:
                (root / name).write_bytes(raw)
        data[prefix] = (images, labels)
    return data


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, ">i2", ">i4", ">f4", ">f8"])
def test_read_idx_every_type_code(tmp_path, dtype):
    arr = (RNG.normal(size=(3, 4, 2)) * 50).astype(dtype)
    (tmp_path / "a.idx").write_bytes(idx_bytes(arr))
    out = read_idx(tmp_path / "a.idx")
    assert out.shape == (3, 4, 2) and out.dtype.isnative
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_gz_or_raw(tmp_path, gz):
    data = write_mnist(tmp_path / "mnist", gz=gz)
    splits = load_mnist(tmp_path / "mnist")
    assert splits.task == "classification" and (len(splits.train), len(splits.test)) == (12, 5)
    x, y = splits.train[3]
    assert x.shape == (1, 28, 28) and x.dtype == np.float32
    np.testing.assert_allclose(x[0], data["train"][0][3] / 255.0, rtol=1e-6)
    assert y == data["train"][1][3]
    assert splits.model_args == {"num_classes": 10, "in_channels": 1, "image_size": 28}
    xb, yb = next(iter(DataLoader(splits.test, batch_size=4)))
    assert tuple(xb.shape) == (4, 1, 28, 28) and tuple(yb.shape) == (4,)


def test_fashion_mnist_uses_the_same_files_and_class_names(tmp_path):
    import flow_models.data as data

    write_mnist(tmp_path / "f", gz=False)
    splits = data.DATASETS["fashion-mnist"][0](tmp_path / "f")
    assert splits.name == "fashion-mnist" and splits.info["classes"][9] == "Ankle boot"


@pytest.mark.parametrize(
    "damage, expect",
    [
        (lambda raw: raw[:-7], "truncated"),
        (lambda raw: b"\x01\x02" + raw[2:], "not an IDX file"),
        (lambda raw: raw[:2] + b"\x42" + raw[3:], "unknown type code"),
        (lambda raw: gzip.compress(raw)[:30], "gzip"),
    ],
)
def test_corrupt_idx_names_the_file(tmp_path, damage, expect):
    write_mnist(tmp_path, gz=False)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(DataError, match=expect) as info:
        load_mnist(tmp_path)
    assert str(path) in str(info.value)


def test_missing_mnist_file_names_it(tmp_path):
    write_mnist(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte.*not found"):
        load_mnist(tmp_path)


# -- CIFAR-10 -------------------------------------------------------------------------------------
def write_cifar(root, per_batch=4):
    root.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        labels = RNG.integers(0, 10, per_batch, dtype=np.uint8)
        pixels = RNG.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        (root / name).write_bytes(np.concatenate([labels[:, None], pixels], axis=1).tobytes())
        out[name] = (labels, pixels)
    (root / "batches.meta.txt").write_text("\n".join(f"c{k}" for k in range(10)) + "\n")
    return out


def test_cifar10_binary_batches(tmp_path):
    data = write_cifar(tmp_path / "cifar-10-batches-bin")
    x, y = read_cifar10_batch(tmp_path / "cifar-10-batches-bin" / "data_batch_2.bin")
    assert x.shape == (4, 3, 32, 32) and x.dtype == np.uint8
    np.testing.assert_array_equal(x.reshape(4, -1), data["data_batch_2.bin"][1])
    np.testing.assert_array_equal(y, data["data_batch_2.bin"][0])
    splits = load_cifar10(tmp_path, normalize=False)  # finds the cifar-10-batches-bin sub-folder
    assert (len(splits.train), len(splits.test)) == (20, 4)
    img, label = splits.test[1]
    np.testing.assert_allclose(img.reshape(-1), data["test_batch.bin"][1][1] / 255.0, rtol=1e-6)
    assert label == data["test_batch.bin"][0][1] and splits.info["classes"][0] == "c0"
    assert splits.model_args["in_channels"] == 3
    normed, _ = load_cifar10(tmp_path).train[0]
    assert abs(float(normed.mean())) < 2.0 and normed.dtype == np.float32


def test_cifar10_corrupt_batch(tmp_path):
    write_cifar(tmp_path)
    bad = tmp_path / "data_batch_3.bin"
    bad.write_bytes(bad.read_bytes()[:-1])
    with pytest.raises(DataError, match="multiple of the 3073-byte record") as info:
        load_cifar10(tmp_path)
    assert "data_batch_3.bin" in str(info.value)
    with pytest.raises(DataError, match="data_batch_1.bin.*not found"):
        load_cifar10(tmp_path / "nowhere")


# -- image folders ----------------------------------------------------------------------------------
def write_images(root, classes=("cat", "dog"), per_class=5, size=(6, 5)):
    from PIL import Image

    for k, c in enumerate(classes):
        (root / c).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            arr = np.full((size[0], size[1], 3), 40 * k + i, np.uint8)
            ext = "png" if i % 2 else "jpg"
            Image.fromarray(arr).save(root / c / f"{i}.{ext}")


def test_image_folder_split_and_decode(tmp_path):
    write_images(tmp_path / "imgs")
    splits = load_image_folder(tmp_path / "imgs", test_fraction=0.2)
    assert splits.info["classes"] == ["cat", "dog"] and (len(splits.train), len(splits.test)) == (8, 2)
    x, y = splits.train[0]
    assert x.shape == (3, 6, 5) and x.dtype == np.float32 and 0 <= x.min() <= x.max() <= 1
    grey = load_image_folder(tmp_path / "imgs", mode="L", size=4)
    assert grey.train[0][0].shape == (1, 4, 4) and grey.model_args["in_channels"] == 1
    batch = next(iter(DataLoader(grey.train, batch_size=8)))
    assert tuple(batch[0].shape) == (8, 1, 4, 4)


def test_image_folder_with_train_and_test_folders(tmp_path):
    write_images(tmp_path / "train", per_class=3)
    write_images(tmp_path / "test", per_class=2)
    splits = load_image_folder(tmp_path)
    assert (len(splits.train), len(splits.test)) == (6, 4)
    assert sorted(int(splits.test[i][1]) for i in range(4)) == [0, 0, 1, 1]


def test_corrupt_image_names_the_file(tmp_path):
    write_images(tmp_path)
    bad = tmp_path / "dog" / "3.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really")
    with pytest.raises(DataError, match="cannot decode image") as info:
        decode_image(bad)
    assert str(bad) in str(info.value)
    with pytest.raises(DataError, match="no files ending in"):
        load_image_folder(tmp_path / "cat")  # a folder of files, no class folders


# -- text -----------------------------------------------------------------------------------------
def test_text_corpus_by_characters(tmp_path):
    text = "hello, world! " * 40 + "ünïcode"
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    splits = load_text_corpus(tmp_path / "t.txt", block_size=16)
    tok = CharTokenizer(splits.info["tokenizer"]["vocab"])
    assert splits.task == "lm" and splits.model_args == {"vocab_size": len(set(text)), "block_size": 16}
    x, y = splits.train[2]
    assert x.shape == (16,) and y.shape == (16,)
    np.testing.assert_array_equal(x[1:], y[:-1])
    assert tok.decode(x) == text[32:48] and tok.decode(tok.encode(text)) == text
    assert splits.info["tokens"] == len(text)


def test_text_corpus_by_bytes_reads_any_file(tmp_path):
    raw = bytes(range(256)) * 3
    (tmp_path / "blob.bin").write_bytes(raw)
    splits = load_text_corpus(tmp_path / "blob.bin", block_size=8, tokenizer="byte")
    assert splits.model_args["vocab_size"] == 256
    x, y = splits.train[1]
    assert list(x) == list(raw[8:16]) and list(y) == list(raw[9:17])
    assert ByteTokenizer().decode(ByteTokenizer().encode("añb")) == "añb"


def test_text_corpus_errors_name_the_file(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 ".encode("latin-1") * 10)
    with pytest.raises(DataError, match="not utf-8 text") as info:
        load_text_corpus(tmp_path / "latin1.txt")
    assert "latin1.txt" in str(info.value)
    with pytest.raises(DataError, match="not found"):
        load_text_corpus(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(DataError, match="empty"):
        load_text_corpus(tmp_path / "empty.txt")
    (tmp_path / "short.txt").write_text("abc")
    with pytest.raises(ValueError, match="block_size"):
        load_text_corpus(tmp_path / "short.txt", block_size=64)


# -- Criteo TSV -------------------------------------------------------------------------------------
def criteo_line(label, dense, cats):
    return "\t".join([str(label)] + ["" if d is None else str(d) for d in dense] + cats)


def test_criteo_tsv_hashing_and_dense_transform(tmp_path):
    cats = [f"{RNG.integers(0, 2**32):08x}" for _ in range(26)]
    cats[5] = ""  # missing categorical
    dense = [3, None, 0, -2] + [7] * 9
    lines = [criteo_line(1, dense, cats), criteo_line(0, [1] * 13, cats[::-1])]
    (tmp_path / "day.tsv").write_text("\n".join(lines) + "\n")
    d, s, y = read_criteo_tsv(tmp_path / "day.tsv", table_sizes=50)
    assert d.shape == (2, 13) and s.shape == (2, 26) and y.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(d[0, :4], np.log1p([3, 0, 0, 0]), rtol=1e-6)
    assert s[0, 5] == 0 and ((s[0] >= 0) & (s[0] < 50)).all() and (s[0, :5] > 0).all()
    expected = zlib.crc32(cats[0].encode(), zlib.crc32(b"0:")) % 49 + 1
    assert s[0, 0] == expected
    (tmp_path / "day.tsv.gz").write_bytes(gzip.compress((tmp_path / "day.tsv").read_bytes()))
    d2, s2, _ = read_criteo_tsv(tmp_path / "day.tsv.gz", table_sizes=[50] * 26)
    np.testing.assert_array_equal(s, s2)
    np.testing.assert_array_equal(d, d2)


def test_criteo_splits(tmp_path):
    cats = ["0a0b0c0d"] * 26
    (tmp_path / "c.tsv").write_text("\n".join(criteo_line(i % 2, [i] * 13, cats) for i in range(40)))
    splits = load_criteo(tmp_path / "c.tsv", table_sizes=100, test_fraction=0.25)
    assert splits.task == "recsys" and (len(splits.train), len(splits.test)) == (30, 10)
    dense, sparse, label = splits.train[0]
    assert dense.shape == (13,) and sparse.shape == (26,) and label.dtype == np.float32
    assert splits.model_args == {"num_dense": 13, "table_sizes": [100] * 26}


@pytest.mark.parametrize(
    "line, expect",
    [
        ("1\t2\t3", "line 2: expected 40 tab-separated columns"),
        ("x" + "\t" * 39, "line 2: label must be 0 or 1"),
        ("1\tabc" + "\t" * 38, "line 2: a dense column is not a number"),
    ],
)
def test_criteo_malformed_line_names_file_and_line(tmp_path, line, expect):
    good = criteo_line(0, [1] * 13, ["00000001"] * 26)
    (tmp_path / "bad.tsv").write_text(good + "\n" + line + "\n")
    with pytest.raises(DataError, match=expect) as info:
        read_criteo_tsv(tmp_path / "bad.tsv")
    assert "bad.tsv" in str(info.value)


def test_criteo_binary_file(tmp_path):
    (tmp_path / "bin.tsv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(DataError, match="bin.tsv.*UTF-8"):
        read_criteo_tsv(tmp_path / "bin.tsv")


# -- WAV folders (Speech Commands) -------------------------------------------------------------------
def tone(freq, rate=8000, n=4000):
    return 0.5 * np.sin(2 * np.pi * freq * np.arange(n) / rate)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_read_wav_sample_widths_and_channels(tmp_path, width):
    x = tone(440, n=800)
    scale = {1: 127, 2: 32767, 3: 2**23 - 1, 4: 2**31 - 1}[width]
    ints = np.round(x * scale).astype(np.int64)
    stereo = np.stack([ints, ints], axis=1).ravel()
    if width == 1:
        raw = (stereo + 128).astype(np.uint8).tobytes()
    elif width == 3:
        raw = b"".join(int(v).to_bytes(3, "little", signed=True) for v in stereo)
    else:
        raw = stereo.astype({2: "<i2", 4: "<i4"}[width]).tobytes()
    with wave.open(str(tmp_path / "a.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(width)
        w.setframerate(8000)
        w.writeframes(raw)
    y, rate = read_wav(tmp_path / "a.wav")
    assert rate == 8000 and y.shape == (800,) and y.dtype == np.float32
    np.testing.assert_allclose(y, x, atol=2.0 / scale + 1e-6)


def test_fit_length_resamples_and_pads():
    x = tone(100, rate=16000, n=16000).astype(np.float32)
    y = fit_length(x, 16000, 8000, 10000)
    assert y.shape == (10000,) and (y[8000:] == 0).all()
    np.testing.assert_allclose(y[:8000], tone(100, rate=8000, n=8000), atol=1e-3)


def write_speech_commands(root, labels=("yes", "no"), speakers=6, with_lists=False):
    for k, label in enumerate(labels):
        (root / label).mkdir(parents=True, exist_ok=True)
        for s in range(speakers):
            for r in range(2):
                write_wav(root / label / f"spk{s:02d}_nohash_{r}.wav", tone(300 + 400 * k, n=3000 + 500 * r), 8000)
    (root / "_background_noise_").mkdir(exist_ok=True)
    write_wav(root / "_background_noise_" / "noise.wav", RNG.normal(0, 0.1, 8000), 8000)
    if with_lists:
        (root / "testing_list.txt").write_text("yes/spk00_nohash_0.wav\nno/spk01_nohash_1.wav\n")


def test_speech_commands_layout_with_testing_list(tmp_path):
    write_speech_commands(tmp_path, with_lists=True)
    splits = load_speech_commands(tmp_path, sample_rate=8000, length=4000)
    assert splits.info["classes"] == ["no", "yes"] and (len(splits.train), len(splits.test)) == (22, 2)
    x, y = splits.test[0]
    assert x.shape == (1, 4000) and x.dtype == np.float32 and int(y) == 0
    assert splits.model_args == {"num_classes": 2, "in_channels": 1, "sample_rate": 8000}


def test_speech_commands_hash_split_keeps_speakers_together(tmp_path):
    write_speech_commands(tmp_path, speakers=20)
    splits = load_speech_commands(tmp_path, sample_rate=16000, test_fraction=0.3)
    speakers = [
        {p.split("/")[-1].split("_nohash_")[0] + p.split("/")[-2] for p, _ in ds.samples}
        for ds in (splits.train, splits.test)
    ]
    assert not speakers[0] & speakers[1] and len(splits.test) > 0
    x, _ = splits.train[0]
    assert x.shape == (1, 16000)  # resampled from 8 kHz and padded to one second
    only = load_speech_commands(tmp_path, classes="yes", test_fraction=0.3)
    assert only.info["classes"] == ["yes"]


def test_corrupt_wav_names_the_file(tmp_path):
    write_speech_commands(tmp_path)
    bad = tmp_path / "yes" / "spk03_nohash_1.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(DataError, match="not a PCM WAV file") as info:
        read_wav(bad)
    assert str(bad) in str(info.value)
    splits = load_speech_commands(tmp_path, sample_rate=8000, test_fraction=0.5)
    ds = splits.train if any(p == str(bad) for p, _ in splits.train.samples) else splits.test
    index = [p for p, _ in ds.samples].index(str(bad))
    with pytest.raises(DataError, match="spk03_nohash_1.wav"):
        ds[index]
    with pytest.raises(DataError, match="no sub-folders for labels"):
        load_speech_commands(tmp_path, classes=["maybe"])
