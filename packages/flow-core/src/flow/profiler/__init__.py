"""The profiler, with PyTorch's API (``torch.profiler``).

>>> from flow.profiler import ProfilerActivity, profile, record_function
>>> with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
...     with record_function("model_inference"):
...         y = model(x)
>>> print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))
>>> prof.export_chrome_trace("trace.json")

What is measured: wall-clock time of each op call on the host (``time.perf_counter_ns``), from
the dispatcher handing it to the profiler to the result coming back (meta checks, kernel,
wrapping and autograd recording included); a range's self time excludes the ranges inside it.
``profile_memory`` counts the bytes of each op's new output arrays (``nbytes``; outputs that
share memory with an input, such as views and in-place results, count 0); memory freed is not
tracked. In graph mode, each node of a compiled plan is a row (``plan/index:op``), timed around
its kernel; steps writing into the memory plan's arena (``out=``) count 0 bytes.

When no profile records, nothing of this runs: no interceptor is active, the graph executor's
hook is ``None`` and ``record_function`` costs one test.
"""

from flow.profiler._events import EventList, FunctionEvent, FunctionEventAvg, Interval
from flow.profiler._record import record_function
from flow.profiler.profile import ProfilerAction, ProfilerActivity, profile, schedule, tensorboard_trace_handler

__all__ = [
    "profile",
    "record_function",
    "ProfilerActivity",
    "ProfilerAction",
    "schedule",
    "tensorboard_trace_handler",
    "EventList",
    "FunctionEvent",
    "FunctionEventAvg",
    "Interval",
]
