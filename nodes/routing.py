"""What runs next: one rule used after ``prepare``, ``generate`` and ``decide``.

The next steps follow from state alone: with no candidate, generate one; with a
candidate, run every scoring branch that has no outcome for it yet, plus the look-ahead
generation when pipelining; with nothing left to do, decide. A stop reason ends the
graph. Because the rule reads only state, resuming after an error re-runs exactly the
missing work.
"""

from __future__ import annotations

from langgraph.graph import END

from aidanbench.graph.settings import Settings
from aidanbench.graph.state import QuestionState
from aidanbench.nodes.decide import scoring_keys

BRANCH_OF = {
    "coherence_result": "judge",
    "novelty_result": "embed_novelty",
    "similarity_result": "llm_novelty",
}
"""The node that fills each outcome key."""

DESTINATIONS = ["generate", "judge", "embed_novelty", "llm_novelty", "generate_next", "decide", END]


def next_steps(state: QuestionState, settings: Settings) -> list[str]:
    """Nodes to run next (run in parallel), or ``[END]``."""
    if state.get("stop_reason") is not None:
        return [END]
    candidate = state.get("candidate")
    if candidate is None:
        return ["generate"]
    if "error" in candidate:
        return ["decide"]
    index = candidate["index"]
    steps = []
    for key in scoring_keys(settings.llm_novelty):
        outcome = state.get(key)
        if not isinstance(outcome, dict) or outcome.get("index") != index:
            steps.append(BRANCH_OF[key])
    if settings.pipeline and (settings.max_answers is None or index < settings.max_answers):
        lookahead = state.get("lookahead")
        if lookahead is None or lookahead.get("index") != index + 1:
            steps.append("generate_next")
    return steps or ["decide"]
