"""Weight converters: foreign checkpoints (local safetensors files) into zoo models.

- torchvision ResNet: :func:`load_torchvision_resnet`, :func:`resnet_from_torchvision`;
- Hugging Face GPT-2: :func:`load_hf_gpt2`, :func:`gpt2_from_hf` (``Conv1D`` weights transposed);
- Hugging Face BERT: :func:`load_hf_bert`, :func:`bert_from_hf`.

Each ``load_*`` maps the checkpoint's names onto the model's, checks every shape and raises
:class:`ConversionError` naming the checkpoint key, the model key and both shapes when they
differ; it returns a :class:`LoadResult`. Nothing is downloaded: point them at a file you have.
"""

from flow_models.convert.common import ConversionError, LoadResult, read_state_dict
from flow_models.convert.hf_bert import bert_config_from_state_dict, bert_from_hf, hf_bert_state_dict, load_hf_bert
from flow_models.convert.hf_gpt2 import gpt2_config_from_state_dict, gpt2_from_hf, hf_gpt2_state_dict, load_hf_gpt2
from flow_models.convert.torchvision import (
    load_torchvision_resnet,
    resnet_config_from_state_dict,
    resnet_from_torchvision,
    torchvision_resnet_state_dict,
)

__all__ = [
    "ConversionError",
    "LoadResult",
    "read_state_dict",
    "load_torchvision_resnet",
    "resnet_config_from_state_dict",
    "resnet_from_torchvision",
    "torchvision_resnet_state_dict",
    "load_hf_gpt2",
    "gpt2_config_from_state_dict",
    "gpt2_from_hf",
    "hf_gpt2_state_dict",
    "load_hf_bert",
    "bert_config_from_state_dict",
    "bert_from_hf",
    "hf_bert_state_dict",
]
