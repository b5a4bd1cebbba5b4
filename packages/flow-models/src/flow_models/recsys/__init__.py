"""Recommendation models: Wide & Deep and DLRM."""

from flow_models.recsys.dlrm import DLRM, DLRMConfig
from flow_models.recsys.wide_deep import WideDeep, WideDeepConfig

__all__ = ["DLRM", "DLRMConfig", "WideDeep", "WideDeepConfig"]
