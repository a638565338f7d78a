"""The published AidanBench reference data, bundled byte for byte (see ``README.md`` here).

The questions and prompt texts define what is measured (scores are comparable with
published ones only when both are used exactly), and the published 2024 run is what a
faithful implementation must reproduce; their sha256 are recorded, so a changed byte fails
the tests. The original repository carries no licence file.
"""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

QUESTIONS = "questions.json"
PROMPTS = "prompts.json"
PUBLISHED_RUN = "reference-runs/aidanbench-2024-not-cot.json"

SHA256 = {
    QUESTIONS: "654b5de1a21d6aac23298c69f3c927e885be6effd4822c2d962aa9b63145a16b",
    PROMPTS: "563ebb2d2a2fa8bbaceef144b50c26a58d1dadddf30555475b29023cb135422f",
    PUBLISHED_RUN: "08bcac384a5a4e0755ff75a927fedc4a0cad3f89d4da94c95c22a319070a6834",
}
"""sha256 of each file as published (the provenance note gives the commit)."""

PUBLISHED_TOTALS = {
    "anthropic/claude-3.5-sonnet": 421,
    "google/gemini-flash-1.5-8b": 45,
    "gpt-4-turbo": 224,
    "meta-llama/llama-3.1-70b-instruct": 147,
    "openai/gpt-4o-mini-2024-07-18": 275,
}
"""Valid answers per model in the published run, as the benchmark's authors report them."""


def resource(name: str) -> Traversable:
    """One bundled file, readable from any install (``read_text``, ``read_bytes``)."""
    if name not in SHA256:
        raise ValueError(f"no bundled reference file {name!r}; known: {', '.join(SHA256)}")
    node: Traversable = resources.files(__name__)
    for part in name.split("/"):
        node = node.joinpath(part)
    return node


def path(name: str) -> Path:
    """A bundled file as a filesystem path. The package is installed as files, never zipped,
    so anything else is refused rather than copied."""
    file = Path(str(resource(name)))
    if not file.is_file():
        raise FileNotFoundError(f"bundled reference file {name} is not on disk at {file}")
    return file


def published_run() -> Path:
    """The published 2024 run (5 models, 49 questions) in the original results schema."""
    return path(PUBLISHED_RUN)


def read_text(name: str) -> str:
    """A bundled file's text (UTF-8)."""
    return resource(name).read_text("utf-8")
