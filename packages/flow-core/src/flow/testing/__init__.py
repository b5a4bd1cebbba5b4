"""Testing tools for op authors: ``gradcheck``, ``opcheck``, ``assert_close``.

Plugins reuse these to check their own ops and devices against the core's
reference kernels.
"""

from flow.testing.checks import OpCheckError, SampleInput, assert_close, gradcheck, gradgradcheck, opcheck
from flow.testing.error_inputs import ErrorInput

__all__ = ["SampleInput", "ErrorInput", "gradcheck", "gradgradcheck", "opcheck", "assert_close", "OpCheckError"]
