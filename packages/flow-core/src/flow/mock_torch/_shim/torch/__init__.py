"""The ``torch`` that ``python -m flow.mock_torch`` puts first on PYTHONPATH: it turns flow.mock_torch on.

A Python process started with this directory on its path (a spawned DataLoader worker, a
``subprocess`` child, every python of a shell after ``eval $(python -m flow.mock_torch)``) imports
this package on ``import torch``; it installs flow's finder and hands the import system the
module that stands for ``flow`` in its place, so ``torch.X.Y`` resolves as in the parent.
"""

import sys

from flow.mock_torch import _activate_from_shim, _finder

_activate_from_shim()
# the import system returns whatever sys.modules["torch"] is once this file has run
sys.modules["torch"] = _finder._proxy("torch")
