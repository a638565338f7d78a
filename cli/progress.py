"""The run's live progress display; it lives with the run engine (``aidanbench.runner``)."""

from aidanbench.runner.progress import ModelProgress, Progress

__all__ = ["ModelProgress", "Progress"]
