"""Tasks: what a model learns to do. A task is a component like any other, registered through a hook.

A plugin declares a task with ``register_tasks`` (core's own tasks are registered the same way):

```python
@hookimpl
def register_tasks(register):
    register("text_classification", kind="classification",
             description="predict a class from a text", batch="(token ids int64 [B, L], class int64 [B])")
```

The task's ``kind`` gives an ``Algorithm`` its defaults (loss, metrics, the monitored
metric); ``monitor`` and ``mode`` override the monitored metric. Nothing here imports torch.

This module is the public face of tasks for plugins: ``Task`` is plain data kept beside the other registered
records (``twinkle_core.components``), and the queries over the registered tasks are lookups like the others
(``twinkle_core.lookup``).
"""

from __future__ import annotations

from twinkle_core.components import TASK_KINDS, Task
from twinkle_core.lookup import check_task, get_task, list_tasks

__all__ = ["TASK_KINDS", "Task", "check_task", "get_task", "list_tasks"]
