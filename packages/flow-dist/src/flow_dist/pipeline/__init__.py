"""Pipeline parallelism: each rank runs one stage of the model, micro-batches flow between stages
through point-to-point sends and receives (as ``torch.distributed.pipelining``).

- :class:`PipelineStage`: this rank's stage module and its traffic with the neighbouring stages;
  tied parameters (GPT's embedding and LM head) and data-parallel replicas of the stage;
- :class:`ScheduleGPipe`, :class:`Schedule1F1B`: ``schedule.step(*inputs, target=, losses=)``;
- :func:`split_sequential`, :func:`gpt_stages`: this rank's stage of a model;
- :func:`pipeline_mesh`: this rank's stage and groups in ``dp`` x ``num_stages`` ranks.
"""

from flow_dist.pipeline.schedule import Schedule1F1B, ScheduleGPipe
from flow_dist.pipeline.split import GPTStage, gpt_stages, split_sequential, stage_bounds
from flow_dist.pipeline.stage import PipelineError, PipelineMesh, PipelineStage, pipeline_mesh

__all__ = [
    "PipelineStage",
    "PipelineError",
    "PipelineMesh",
    "pipeline_mesh",
    "ScheduleGPipe",
    "Schedule1F1B",
    "split_sequential",
    "gpt_stages",
    "GPTStage",
    "stage_bounds",
]
