"""TensorBoard logging (``flow.utils.tensorboard``), as ``torch.utils.tensorboard``.

>>> from flow.utils.tensorboard import SummaryWriter
>>> with SummaryWriter("runs/exp1") as w:
...     for step in range(100):
...         w.add_scalar("loss", loss_at(step), step)
...     w.add_histogram("fc.weight", model.fc.weight, 100)
...     w.add_graph(model, flow.randn(1, 8))

Event files are written with TensorBoard's own writer and protobufs (``pip install
'flow-core[tensorboard]'``); importing this module does not import ``tensorboard``, creating a
:class:`SummaryWriter` does (and says which extra to install when it is missing).
"""

from flow.utils.tensorboard.writer import SummaryWriter

__all__ = ["SummaryWriter"]
