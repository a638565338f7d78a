"""The run engine: ``RunSpec`` in, a run directory and its summary out.

    from aidanbench.runner import RunSpec, run_sync

    result = run_sync(RunSpec(models=["gpt-4o-mini"], questions=5, run_dir=Path("runs/a")))

``run`` is the coroutine (``await run(spec)`` in a notebook). A spec on an existing run
directory resumes it and grows it with what the spec adds; operational settings are this
session's, scoring settings fixed per model (``core.setting_kinds``). ``aidanbench run`` is
this API behind a command line.
"""

from aidanbench.runner.engine import RunResult, prepare, run, run_sync
from aidanbench.runner.progress import Progress
from aidanbench.runner.spec import RunSpec
from aidanbench.runner.tasks import Task

__all__ = ["Progress", "RunResult", "RunSpec", "Task", "prepare", "run", "run_sync"]
