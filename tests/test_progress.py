"""The live progress table keeps time between events."""

from __future__ import annotations

import io
import time

from aidanbench.runner.progress import Progress


class Terminal(io.StringIO):
    """A file that says it is a terminal, so rich draws live."""

    def isatty(self) -> bool:
        return True


def test_elapsed_moves_on_while_no_answer_arrives() -> None:
    out = Terminal()
    progress = Progress(out=out)
    progress.queued("m (T=0.7)", 2)
    progress.started = time.monotonic() - 10.2
    with progress:
        time.sleep(0.9)  # no events at all
        drawn = out.getvalue()
    assert "10s elapsed" in drawn, "drawn at once"
    assert "11s elapsed" in drawn, "and redrawn with the time, before anything happened"
    assert "m (T=0.7)" in drawn
