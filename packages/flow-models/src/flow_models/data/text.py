"""Text corpora for language modelling: tokenised by characters or bytes, cut into sequence windows.

``cpython-docs`` is the English text of the Python documentation's topic pages that every CPython
ships in ``pydoc_data.topics`` (what ``help("if")`` prints): about 465,000 characters, no download.
"""

from __future__ import annotations

import os

import numpy as np

from flow.utils.data import Dataset
from flow_models.data.base import DataError, DatasetSplits

__all__ = [
    "CharTokenizer",
    "ByteTokenizer",
    "tokenizer_from_info",
    "TextWindows",
    "read_text",
    "load_text_corpus",
    "load_cpython_docs",
    "cpython_docs_text",
    "text_splits",
    "token_splits",
]


class CharTokenizer:
    """One token per character of a fixed vocabulary (the corpus's distinct characters, sorted).

    A character outside the vocabulary encodes as ``unk`` (the first vocabulary entry by default).
    """

    kind = "char"

    def __init__(self, vocab: str) -> None:
        if not vocab:
            raise ValueError("CharTokenizer: empty vocabulary")
        self.vocab = vocab
        self._index = {c: i for i, c in enumerate(vocab)}
        self.unk = 0

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str) -> np.ndarray:
        get = self._index.get
        return np.fromiter((get(c, self.unk) for c in text), dtype=np.int64, count=len(text))

    def decode(self, ids) -> str:
        v = self.vocab
        return "".join(v[int(i)] if 0 <= int(i) < len(v) else "\ufffd" for i in ids)

    def to_info(self) -> dict:
        return {"kind": self.kind, "vocab": self.vocab}


class ByteTokenizer:
    """One token per byte of the UTF-8 encoding: a fixed vocabulary of 256."""

    kind = "byte"
    vocab_size = 256

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int64)

    def decode(self, ids) -> str:
        return bytes(int(i) & 0xFF for i in ids).decode("utf-8", errors="replace")

    def to_info(self) -> dict:
        return {"kind": self.kind}


def tokenizer_from_info(info: dict) -> CharTokenizer | ByteTokenizer:
    """Rebuild a tokenizer from its ``to_info()`` (as stored in a checkpoint)."""
    if info.get("kind") == "byte":
        return ByteTokenizer()
    if info.get("kind") == "char" and info.get("vocab"):
        return CharTokenizer(info["vocab"])
    raise ValueError(f"not a tokenizer description: {info!r}")


class TextWindows(Dataset):
    """Windows of ``block_size`` tokens and the same window shifted by one (the next-token targets).

    Window ``i`` starts at token ``i * stride``; ``stride`` defaults to ``block_size`` (no overlap).
    """

    def __init__(self, ids: np.ndarray, block_size: int, stride: int | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.ids = np.ascontiguousarray(ids, dtype=np.int64)
        self.block_size = block_size
        self.stride = stride or block_size
        if len(self.ids) < block_size + 1:
            raise ValueError(
                f"TextWindows: {len(self.ids)} tokens are too few for one window of {block_size} tokens and its target"
            )

    def __len__(self) -> int:
        return (len(self.ids) - self.block_size - 1) // self.stride + 1

    def __getitem__(self, i):
        if not 0 <= i < len(self):
            raise IndexError(f"window {i} out of range for {len(self)} windows")
        s = i * self.stride
        chunk = self.ids[s : s + self.block_size + 1]
        return chunk[:-1], chunk[1:]


def read_text(path: str | os.PathLike, encoding: str = "utf-8") -> str:
    """A text file's contents; a missing, unreadable or wrongly encoded file raises DataError naming it."""
    try:
        with open(path, encoding=encoding) as f:
            return f.read()
    except FileNotFoundError:
        raise DataError(path, "file not found") from None
    except UnicodeDecodeError as e:
        raise DataError(
            path, f"not {encoding} text: byte {e.start}: {e.reason} (tokenizer='byte' reads any file)"
        ) from None
    except OSError as e:
        raise DataError(path, f"cannot read: {e.strerror or e}") from None


def _make_tokenizer(text: str, tokenizer: str):
    if tokenizer == "char":
        return CharTokenizer.from_text(text)
    if tokenizer == "byte":
        return ByteTokenizer()
    raise ValueError(f"tokenizer must be 'char' or 'byte', got {tokenizer!r}")


def token_splits(
    name: str, ids: np.ndarray, tok, *, block_size: int = 128, test_fraction: float = 0.1, stride: int | None = None
) -> DatasetSplits:
    """The first ``1 - test_fraction`` of the tokens is the train split, the rest the test split."""
    cut = int(len(ids) * (1 - test_fraction))
    try:
        train = TextWindows(ids[:cut], block_size, stride)
        test = TextWindows(ids[cut:], block_size, block_size)
    except ValueError as e:
        raise ValueError(f"dataset '{name}': {e}; use a smaller block_size") from None
    return DatasetSplits(
        name,
        "lm",
        train,
        test,
        model_args={"vocab_size": tok.vocab_size, "block_size": block_size},
        info={"tokenizer": tok.to_info(), "tokens": int(len(ids))},
    )


def text_splits(name: str, text: str, *, tokenizer: str = "char", **kw) -> DatasetSplits:
    """Tokenise ``text`` and split it (see :func:`token_splits`)."""
    if not text:
        raise ValueError(f"dataset '{name}': the text is empty")
    tok = _make_tokenizer(text, tokenizer)
    return token_splits(name, tok.encode(text), tok, **kw)


def load_text_corpus(
    path: str | os.PathLike,
    *,
    block_size: int = 128,
    tokenizer: str = "char",
    encoding: str = "utf-8",
    test_fraction: float = 0.1,
) -> DatasetSplits:
    """A text file for language modelling, tokenised by characters (``tokenizer="char"``) or raw bytes.

    With ``tokenizer="byte"`` the file is not decoded at all (any file is a corpus of bytes).
    """
    name = os.path.basename(os.fspath(path)) or "text"
    if tokenizer == "byte":
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise DataError(path, "file not found") from None
        except OSError as e:
            raise DataError(path, f"cannot read: {e.strerror or e}") from None
        if not raw:
            raise DataError(path, "the file is empty")
        ids = np.frombuffer(raw, np.uint8).astype(np.int64)
        return token_splits(name, ids, ByteTokenizer(), block_size=block_size, test_fraction=test_fraction)
    text = read_text(path, encoding)
    if not text:
        raise DataError(path, "the file is empty")
    return text_splits(name, text, tokenizer=tokenizer, block_size=block_size, test_fraction=test_fraction)


def cpython_docs_text() -> str:
    """The topic pages of the Python documentation shipped with this Python (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k].strip() for k in sorted(topics))


def load_cpython_docs(
    *, block_size: int = 128, tokenizer: str = "char", test_fraction: float = 0.1, max_chars: int | None = None
) -> DatasetSplits:
    """The English text of CPython's ``pydoc_data.topics`` for a character-level language model."""
    text = cpython_docs_text()
    if max_chars:
        text = text[:max_chars]
    return text_splits("cpython-docs", text, block_size=block_size, tokenizer=tokenizer, test_fraction=test_fraction)
