"""``flow.fft``: PyTorch's ``torch.fft`` names.

flow has no complex dtype: ``fftfreq``, ``rfftfreq``, ``fftshift`` and ``ifftshift`` work (values and
gradients as PyTorch); the transforms (``fft``, ``rfft``, ``irfft``, ``fft2``, ``fftn`` ... whose input
or output is complex) check their arguments and raise :class:`flow.errors.OpTypeError`. See
:mod:`flow.ops.fft`.
"""

from __future__ import annotations

from flow.ops import fft as _F

fftfreq = _F.fftfreq
rfftfreq = _F.rfftfreq
fftshift = _F.fftshift
ifftshift = _F.ifftshift

__all__ = ["fftfreq", "rfftfreq", "fftshift", "ifftshift", *_F._ONE_D, *_F._N_D]
globals().update({n: getattr(_F, n) for n in _F._ONE_D + _F._N_D})
