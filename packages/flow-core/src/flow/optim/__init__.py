"""Optimizers (``flow.optim``): fused multi-tensor updates of parameters in their own memory, flat states; LR
schedulers; the errors both raise for bad hyper-parameters, parameter groups and state dicts."""

from flow.optim import lr_scheduler
from flow.optim._flat import StateLayout, set_state_layout, state_layout
from flow.optim.adadelta import Adadelta
from flow.optim.adagrad import Adagrad
from flow.optim.adam import Adam, AdamW
from flow.optim.adamax import Adamax
from flow.optim.asgd import ASGD
from flow.optim.errors import OptimizerError, OptimizerTypeError
from flow.optim.lamb import LAMB
from flow.optim.lbfgs import LBFGS
from flow.optim.nadam import NAdam
from flow.optim.optimizer import Optimizer
from flow.optim.radam import RAdam
from flow.optim.rmsprop import RMSprop
from flow.optim.rprop import Rprop
from flow.optim.sgd import SGD
from flow.optim.sparse_adam import SparseAdam

Lamb = LAMB

__all__ = [
    "Optimizer",
    "StateLayout",
    "set_state_layout",
    "state_layout",
    "OptimizerError",
    "OptimizerTypeError",
    "SGD",
    "Adam",
    "AdamW",
    "Adagrad",
    "RMSprop",
    "Adadelta",
    "Adamax",
    "NAdam",
    "RAdam",
    "Rprop",
    "ASGD",
    "LAMB",
    "Lamb",
    "LBFGS",
    "SparseAdam",
    "lr_scheduler",
]
