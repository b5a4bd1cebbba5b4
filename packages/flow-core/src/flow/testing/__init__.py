"""Testing tools for op authors: ``gradcheck``, ``opcheck``, ``assert_close``.

Plugins reuse these to check their own ops and devices against the core's
reference kernels.
"""

from flow.testing.checks import OpCheckError, SampleInput, assert_close, gradcheck, gradgradcheck, opcheck

__all__ = ["SampleInput", "gradcheck", "gradgradcheck", "opcheck", "assert_close", "OpCheckError"]
