"""Why a question thread's state keeps its answers as ``core.state.AnswerRecord`` dicts
and the record as ``record.lines.AnswerLine`` models (ARCHITECTURE.md, "One answer, two
shapes"): what a run's checkpointer gives back of each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from aidanbench.record.lines import AnswerLine
from aidanbench.runner.checkpoints import open_checkpointer

LINE = AnswerLine(index=1, answer="a", raw_reply="<answer>a</answer>", valid=True, coherence=80.0)


async def _round_trip(path: Path, answers: list[Any]) -> Any:
    """``answers`` written in a checkpoint by a run's checkpointer and read back after it
    is reopened, as a resumed run reads them."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"answers": answers}
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    async with open_checkpointer(path) as saver:
        await saver.aput(config, checkpoint, {}, {})
    async with open_checkpointer(path) as saver:
        stored = await saver.aget_tuple(config)
    assert stored is not None
    return stored.checkpoint["channel_values"]["answers"]


async def test_answer_dicts_come_back_as_written(tmp_path: Path) -> None:
    record = LINE.model_dump(exclude_unset=True)
    assert await _round_trip(tmp_path / "checkpoints.sqlite", [record]) == [record]


async def test_an_answer_model_comes_back_a_dict_of_every_field(tmp_path: Path) -> None:
    """The strict serializer (``runner.checkpoints.checkpoint_serde``) does not rebuild a
    type of ours: an ``AnswerLine`` in the state would come back a dict, with the fields
    it was not given as None, beside the models of answers added since."""
    (back,) = await _round_trip(tmp_path / "checkpoints.sqlite", [LINE])
    assert type(back) is dict
    assert back == LINE.model_dump() != LINE.model_dump(exclude_unset=True)
