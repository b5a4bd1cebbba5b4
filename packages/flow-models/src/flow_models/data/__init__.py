"""Dataset readers of flow-models: offline, each returning a :class:`DatasetSplits`.

Readers of published formats (MNIST IDX, CIFAR-10 binary, image folders, text files, Criteo TSV,
Speech Commands WAV folders) take a path and never download; embedded sets (``digits``,
``cpython-docs``, ``synthetic-recsys``, ``synthetic-speech``, ``synthetic-speech-ctc``) need no files.
All are registered in the model zoo by :func:`register_datasets`, so ``flow_models.get_dataset(name,
**kwargs)`` and ``flow-train MODEL --dataset NAME`` find them.
"""

from flow_models.data import specs
from flow_models.data.audio import (
    KEYWORDS,
    WavFolder,
    fit_length,
    load_speech_commands,
    load_synthetic_speech,
    load_synthetic_speech_ctc,
    log_spectrogram,
    read_wav,
    write_wav,
)
from flow_models.data.base import TASKS, ArrayDataset, DataError, DatasetSplits, split_indices
from flow_models.data.recsys import load_criteo, load_synthetic_recsys, read_criteo_tsv
from flow_models.data.text import (
    ByteTokenizer,
    CharTokenizer,
    TextWindows,
    cpython_docs_text,
    load_cpython_docs,
    load_text_corpus,
    tokenizer_from_info,
)
from flow_models.data.vision import (
    ImageFolder,
    decode_image,
    load_cifar10,
    load_digits,
    load_image_folder,
    load_mnist,
    read_cifar10_batch,
    read_idx,
)


def _fashion_mnist(root=None, **kw) -> DatasetSplits:
    """Fashion-MNIST (Zalando's clothing images) from its four IDX files in ``root``: 10 classes of 28x28 grey."""
    return load_mnist(root, name="fashion-mnist", **kw)


def _mnist(root=None, **kw) -> DatasetSplits:
    """MNIST handwritten digits from the four IDX files (gz or raw) in ``root``: 10 classes of 28x28 grey."""
    return load_mnist(root, name="mnist", **kw)


# name -> (factory, family, what it produces); the doc is the factory's first docstring line
DATASETS = {
    "digits": (load_digits, "vision", specs.digits),
    "mnist": (_mnist, "vision", specs.mnist),
    "fashion-mnist": (_fashion_mnist, "vision", specs.mnist),
    "cifar10": (load_cifar10, "vision", specs.cifar10),
    "image-folder": (load_image_folder, "vision", specs.image_folder),
    "cpython-docs": (load_cpython_docs, "nlp", specs.text),
    "text-file": (load_text_corpus, "nlp", specs.text),
    "synthetic-recsys": (load_synthetic_recsys, "recsys", specs.synthetic_recsys),
    "criteo": (load_criteo, "recsys", specs.criteo),
    "synthetic-speech": (load_synthetic_speech, "speech", specs.synthetic_speech),
    "synthetic-speech-ctc": (load_synthetic_speech_ctc, "speech", specs.synthetic_speech_ctc),
    "speech-commands": (load_speech_commands, "speech", specs.speech_commands),
}


def register_datasets(registry) -> None:
    """Register every dataset of this package in the zoo ``registry`` (called from flow-models' plugin)."""
    for name, (factory, family, produces) in DATASETS.items():
        doc = (factory.__doc__ or name).strip().splitlines()[0]
        registry.register_dataset(name, factory, family, doc, produces=produces)
