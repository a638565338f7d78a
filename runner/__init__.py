"""The run engine: ``RunSpec`` in, a run directory and its summary out.

    from aidanbench.runner import RunSpec, run_sync

    result = run_sync(RunSpec(models=["gpt-4o-mini"], questions=5, run_dir=Path("runs/a")))

``run`` is the same as a coroutine (``await run(spec)`` in a notebook). Running a spec on
an existing run directory resumes it, and grows it with whatever models, temperatures,
questions or repeats the spec adds; operational settings (endpoints, limits, timeouts,
server) are this session's, scoring settings are fixed per model (``graph.setting_kinds``).
``aidanbench run`` is this API behind a command line.
"""

from aidanbench.runner.engine import RunResult, prepare, run, run_sync
from aidanbench.runner.progress import Progress
from aidanbench.runner.spec import RunSpec
from aidanbench.runner.tasks import Task

__all__ = ["Progress", "RunResult", "RunSpec", "Task", "prepare", "run", "run_sync"]
