"""Summary protobufs for the values a :class:`~flow.utils.tensorboard.SummaryWriter` logs.

Every builder returns a ``tensorboard.compat.proto.summary_pb2.Summary`` equal to the one
``torch.utils.tensorboard.summary`` makes for the same input (old-style ``simple_value`` scalars,
``HistogramProto`` histograms with TensorFlow's bucket rule, PNG images, text and hparams plugin
summaries), so TensorBoard shows flow runs and PyTorch runs alike.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

EXTRA_HINT = "pip install 'flow-core[tensorboard]' (or: pip install tensorboard)"


def require_tensorboard():
    """The ``tensorboard`` package, or an ImportError that names the extra providing it."""
    try:
        import tensorboard
    except ImportError as e:
        raise ImportError(f"flow.utils.tensorboard needs the 'tensorboard' package: {EXTRA_HINT}") from e
    return tensorboard


def to_numpy(value: Any, what: str) -> np.ndarray:
    """A flow Tensor, NumPy array, NumPy scalar, Python number or (nested) list as a NumPy array."""
    from flow._tensor import Tensor

    if isinstance(value, Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (bool, int, float, np.generic, list, tuple)):
        return np.asarray(value)
    raise TypeError(f"{what} must be a flow Tensor, a NumPy array or a Python number, got {type(value).__name__}")


def scalar_value(value: Any, what: str = "scalar_value") -> float:
    """The one number a scalar summary holds (a 1-element tensor counts, as in torch)."""
    arr = to_numpy(value, what).squeeze()
    if arr.ndim != 0:
        raise ValueError(f"{what} must hold one element, got shape {tuple(to_numpy(value, what).shape)}")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        raise TypeError(f"{what} must be a number, got dtype {arr.dtype}")
    return float(arr)


def scalar(tag: str, value: Any):
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(value=[Summary.Value(tag=tag, simple_value=scalar_value(value))])


def default_bins() -> list[float]:
    """TensorFlow's histogram bucket edges (torch's ``bins="tensorflow"``): +-1e-12 growing by 1.1 to 1e20."""
    v, pos = 1e-12, []
    while v < 1e20:
        pos.append(v)
        v *= 1.1
    return [-x for x in reversed(pos)] + [0] + pos


def histogram_proto(values: np.ndarray, bins, max_bins: int | None = None):
    """A ``HistogramProto`` of ``values``: np.histogram's counts, trimmed to the bins that hold data
    (TensorBoard keeps only right edges, so one empty bin is kept on the left), as torch does."""
    from tensorboard.compat.proto.summary_pb2 import HistogramProto

    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        raise ValueError("add_histogram: values has no elements")
    if not np.isfinite(values).all():
        raise ValueError("add_histogram: values must be finite (got inf or nan)")
    counts, limits = np.histogram(values, bins=bins)
    if max_bins is not None and len(counts) > max_bins:
        # merge neighbouring bins (zero-padded on the right) until at most about max_bins remain
        sub = len(counts) // max_bins
        rem = len(counts) % sub
        if rem:
            counts = np.pad(counts, (0, sub - rem))
        counts = counts.reshape(-1, sub).sum(axis=-1)
        limits = np.concatenate([limits[:-1:sub], limits[-1:]])
    nonzero = np.cumsum(counts > 0)
    start, end = np.searchsorted(nonzero, [0, nonzero[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1 : end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start : end + 1]
    return HistogramProto(
        min=values.min(),
        max=values.max(),
        num=len(values),
        sum=values.sum(),
        sum_squares=values.dot(values),
        bucket_limit=limits.tolist(),
        bucket=counts.tolist(),
    )


def histogram(tag: str, values: Any, bins, max_bins: int | None = None):
    from tensorboard.compat.proto.summary_pb2 import Summary

    arr = to_numpy(values, "values")
    if isinstance(bins, str):
        if bins == "tensorflow":
            bins = default_bins()
        elif bins not in ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt"):
            raise ValueError(f"add_histogram: bins must be 'tensorflow', a NumPy bin rule or edges, got {bins!r}")
    elif isinstance(bins, (list, tuple, np.ndarray)):
        bins = np.asarray(bins, dtype=np.float64)
    elif not isinstance(bins, int) or isinstance(bins, bool) or bins < 1:
        raise ValueError(
            f"add_histogram: bins must be 'tensorflow', a NumPy bin rule, a count >= 1 or edges, got {bins!r}"
        )
    return Summary(value=[Summary.Value(tag=tag, histo=histogram_proto(arr, bins, max_bins))])


def to_hwc(arr: np.ndarray, dataformats: str) -> np.ndarray:
    """``arr`` laid out as ``dataformats`` (CHW, HWC, HW, NCHW, ...) turned into HWC with 3 or 4
    channels; a batch (N) is tiled into a grid of up to 8 columns, as torchvision's make_grid."""
    fmt = dataformats.upper()
    if sorted(set(fmt)) != sorted(fmt) or not set(fmt) <= set("NCHW") or not {"H", "W"} <= set(fmt):
        raise ValueError(f"add_image: dataformats must be letters of NCHW including H and W, got {dataformats!r}")
    if arr.ndim != len(fmt):
        raise ValueError(f"add_image: dataformats {dataformats!r} needs a {len(fmt)}-d image, got shape {arr.shape}")
    full = "NCHW" if "N" in fmt else "CHW" if "C" in fmt else "HW"
    arr = arr.transpose([fmt.index(c) for c in full])
    if full == "HW":
        return np.stack([arr] * 3, axis=2)
    if full == "NCHW":
        arr = _grid(arr)
    if arr.shape[0] == 1:
        arr = np.concatenate([arr] * 3, axis=0)
    if arr.shape[0] not in (3, 4):
        raise ValueError(f"add_image: an image needs 1, 3 or 4 channels, got {arr.shape[0]}")
    return arr.transpose(1, 2, 0)


def _grid(nchw: np.ndarray, ncols: int = 8) -> np.ndarray:
    # torch's make_grid for its NCHW add_images path: 1-channel images become RGB, no padding
    if nchw.shape[1] == 1:
        nchw = np.concatenate([nchw] * 3, axis=1)
    n, c, h, w = nchw.shape
    cols = min(n, ncols)
    rows = -(-n // cols)
    canvas = np.zeros((c, h * rows, w * cols), dtype=nchw.dtype)
    for i in range(n):
        y, x = divmod(i, cols)
        canvas[:, y * h : (y + 1) * h, x * w : (x + 1) * w] = nchw[i]
    return canvas


def image(tag: str, img: Any, dataformats: str = "CHW"):
    """A PNG image summary: float images are in [0, 1] and scaled by 255, uint8 images as they are."""
    from PIL import Image
    from tensorboard.compat.proto.summary_pb2 import Summary

    arr = to_numpy(img, "img_tensor")
    scale = 1 if arr.dtype == np.uint8 else 255
    hwc = to_hwc(arr, dataformats)
    hwc = (hwc.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    h, w, c = hwc.shape
    buf = io.BytesIO()
    Image.fromarray(hwc).save(buf, format="PNG")
    return Summary(
        value=[
            Summary.Value(
                tag=tag, image=Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=buf.getvalue())
            )
        ]
    )


def text(tag: str, text_string: str):
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

    if not isinstance(text_string, str):
        raise TypeError(f"add_text: text_string must be a str, got {type(text_string).__name__}")
    plugin = SummaryMetadata.PluginData(plugin_name="text", content=TextPluginData(version=0).SerializeToString())
    tensor = TensorProto(
        dtype="DT_STRING",
        string_val=[text_string.encode("utf-8")],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    return Summary(
        value=[Summary.Value(tag=tag + "/text_summary", metadata=SummaryMetadata(plugin_data=plugin), tensor=tensor)]
    )


def hparams(hparam_dict: dict, metric_dict: dict, hparam_domain_discrete: dict | None = None) -> tuple:
    """The hparams plugin's experiment, session-start and session-end summaries, as torch writes them.

    (TensorBoard's own ``tensorboard.plugins.hparams.summary`` needs TensorFlow, so the plugin's
    protobufs are filled here.) As in torch, bools are checked after numbers and so logged as numbers.
    """
    from google.protobuf import struct_pb2
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams import api_pb2, metadata
    from tensorboard.plugins.hparams import plugin_data_pb2 as pd

    from flow._tensor import Tensor

    if type(hparam_dict) is not dict or type(metric_dict) is not dict:
        raise TypeError("add_hparams: hparam_dict and metric_dict must be dicts")
    domains = hparam_domain_discrete or {}
    if not isinstance(domains, dict):
        raise TypeError("add_hparams: hparam_domain_discrete must be a dict")
    for k, d in domains.items():
        if k not in hparam_dict or not isinstance(d, list) or not all(isinstance(x, type(hparam_dict[k])) for x in d):
            raise TypeError(
                f"add_hparams: hparam_domain_discrete[{k!r}] must be a list of values of hparam {k!r}'s type"
            )
    ssi = pd.SessionStartInfo()
    infos = []
    for k, v in hparam_dict.items():
        if v is None:
            continue
        if isinstance(v, (Tensor, np.ndarray, np.generic)):
            v = scalar_value(v, f"hparam {k!r}")
        if isinstance(v, (int, float)):
            ssi.hparams[k].number_value = v
            kind, field = "DATA_TYPE_FLOAT64", "number_value"
        elif isinstance(v, str):
            ssi.hparams[k].string_value = v
            kind, field = "DATA_TYPE_STRING", "string_value"
        else:
            raise TypeError(f"add_hparams: hparam {k!r} must be an int, float, str, bool or 1-element tensor")
        domain = None
        if k in domains:
            domain = struct_pb2.ListValue(values=[struct_pb2.Value(**{field: d}) for d in domains[k]])
        infos.append(api_pb2.HParamInfo(name=k, type=api_pb2.DataType.Value(kind), domain_discrete=domain))

    def plugin_summary(tag: str, **content) -> Summary:
        data = pd.HParamsPluginData(version=metadata.PLUGIN_DATA_VERSION, **content).SerializeToString()
        smd = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME, content=data))
        return Summary(value=[Summary.Value(tag=tag, metadata=smd)])

    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=k)) for k in metric_dict]
    exp = plugin_summary(
        metadata.EXPERIMENT_TAG, experiment=api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)
    )
    start = plugin_summary(metadata.SESSION_START_INFO_TAG, session_start_info=ssi)
    end = plugin_summary(
        metadata.SESSION_END_INFO_TAG, session_end_info=pd.SessionEndInfo(status=api_pb2.Status.Value("STATUS_SUCCESS"))
    )
    return exp, start, end
