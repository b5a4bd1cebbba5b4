"""Find the op where mixed precision loses accuracy: ``flow_amp.debug.compare`` on a mis-coloured op.

Readings around 300 are centred (``x - x.mean(dim=0)``) before a two-layer MLP. PyTorch's autocast
and flow-amp leave ``sub`` in float32 (colour *clear*: it runs in the dtype it gets). This script
colours ``sub`` *allow* (run in bfloat16) the way an op package would, in its ``flow_register_rules``
hook, and ``compare`` names the centring line: bfloat16 keeps 8 bits of mantissa, so 300.7 - 300.2
is 0 or 2, and the relative error of the centred features is about 0.6.

    python examples/amp_divergence.py          # needs flow-amp: pip install ./packages/flow-amp
"""

from __future__ import annotations

import types

import flow
import flow.nn as nn
import flow.nn.functional as F
from flow.plugins import hookimpl


class Centred(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = x - x.mean(dim=0)
        h = F.relu(self.fc1(x))
        return self.fc2(h)


def miscolour(op: str, colour: str) -> str:
    """Give ``op`` another autocast colour through a plugin; returns the plugin's name."""
    from flow_amp.colors import TABLE

    mod = types.ModuleType("miscoloured_ops")

    def flow_register_rules(registry):
        registry.register_rule(TABLE, op, colour, override=True)

    mod.flow_register_rules = hookimpl(flow_register_rules)
    return flow.plugins.register(mod, "miscoloured_ops")


def main() -> None:
    from flow_amp import debug

    flow.manual_seed(0)
    model = Centred()
    x = flow.randn(64, 16) + 300.0
    y = flow.randint(0, 4, (64,))

    def step(x, y):
        return F.cross_entropy(model(x), y)

    print("default colours:")
    report = debug.compare(step, x, y, module=model)
    print(report)
    assert report.first_divergence() is None

    name = miscolour("sub", "allow")
    try:
        report = debug.compare(step, x, y, module=model)
    finally:
        flow.plugins.unregister(name)
    print("\n'sub' coloured allow:")
    print(report)
    first = report.first_divergence()
    print(f"\nfound: {first.op} at {first.site} (relative error {first.err:.3g}, inputs {first.in_err:.3g})")


if __name__ == "__main__":
    main()
