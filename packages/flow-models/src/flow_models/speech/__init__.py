"""Speech models: M5 keyword spotting on raw waveforms and a CNN + BiGRU acoustic model trained with CTC."""

from flow_models.speech.crnn import CRNNCTC, CRNNConfig
from flow_models.speech.m5 import M5, M5Config

__all__ = ["M5", "M5Config", "CRNNCTC", "CRNNConfig"]
