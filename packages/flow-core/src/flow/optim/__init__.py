"""Optimizers (``flow.optim``) with fused updates over flat parameter buffers, and LR schedulers."""

from flow.optim import lr_scheduler
from flow.optim.adagrad import Adagrad
from flow.optim.adam import Adam, AdamW
from flow.optim.lamb import LAMB
from flow.optim.optimizer import Optimizer
from flow.optim.rmsprop import RMSprop
from flow.optim.sgd import SGD

Lamb = LAMB

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "LAMB", "Lamb", "lr_scheduler"]
