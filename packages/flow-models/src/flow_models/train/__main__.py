"""``python -m flow_models.train``: the same as the ``flow-train`` command."""

import sys

from flow_models.train.cli import main

sys.exit(main())
