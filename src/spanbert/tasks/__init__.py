"""The tasks: one module (or package) per task family — reader, features, head, decoding and its
`TaskSpec`s — behind one registry and one Python API.

    from spanbert import tasks
    run = tasks.finetune("glue", model="runs/spanbert/final", train="glue/SST-2", output_dir="runs/sst2",
                         task="SST-2")
    run.score, tasks.score("glue", run.output_dir, "glue/SST-2", task="SST-2").scores

`TASKS` (task name -> `TaskSpec`) is what the API, the CLI and the study read; `finetune`, `predict`,
`evaluate` and `score` run a task's actions and return `Results` or the `Path` written
(`spanbert.tasks.api`). Importing this package loads no task module and no torch.
"""

from spanbert.tasks.api import evaluate, finetune, predict, run, score
from spanbert.tasks.registry import TASKS, Registry
from spanbert.tasks.spec import Results, TaskSpec

__all__ = ["TASKS", "Registry", "Results", "TaskSpec", "evaluate", "finetune", "predict", "run", "score"]
