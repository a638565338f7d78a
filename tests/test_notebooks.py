"""The notebooks run top to bottom against a local stub and the reference run.

They are clients of the package, committed without outputs; each reads its parameters
from ``AIDANBENCH_*`` environment variables, which the kernel inherits from the test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aidanbench.testing import OpenAIStub

from .conftest import REPO
from .test_docs import resolves

nbformat = pytest.importorskip("nbformat", reason="needs the [dev] or [notebooks] extra")
nbclient = pytest.importorskip("nbclient", reason="needs the [dev] or [notebooks] extra")

NOTEBOOKS = REPO / "notebooks"
NAMES = ["quickstart", "analysis", "subgraph"]


def load(name: str) -> Any:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def execute(name: str) -> Any:
    """Run a notebook in a fresh python3 kernel, in the notebooks directory."""
    notebook = load(name)
    client = nbclient.NotebookClient(
        notebook,
        timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    return notebook


def text_of(notebook: Any) -> str:
    """Everything the notebook's cells printed."""
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                parts.append(output["text"])
            elif "data" in output:
                parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def images_of(notebook: Any) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        for output in cell.get("outputs", [])
    )


@pytest.fixture
def stub_env(stub: OpenAIStub, api_key: str, monkeypatch: pytest.MonkeyPatch) -> OpenAIStub:
    """Every role of the notebooks at the local stub, with the test key variable."""
    monkeypatch.setenv("AIDANBENCH_BASE_URL", stub.base_url)
    monkeypatch.setenv("AIDANBENCH_API_KEY_ENV", "AIDANBENCH_TEST_KEY")
    monkeypatch.setenv("AIDANBENCH_MODEL", "model-under-test")
    monkeypatch.setenv("AIDANBENCH_JUDGE_MODEL", "judge-model")
    monkeypatch.setenv("AIDANBENCH_EMBEDDING_MODEL", "embedding-model")
    return stub


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name: str) -> None:
    notebook = load(name)
    nbformat.validate(notebook)
    for cell in notebook.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    assert notebook.metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("name", NAMES)
def test_every_import_resolves(name: str) -> None:
    """What a notebook imports from the package exists, so moving a name breaks the fast
    tier and not only the notebook runs."""
    source = "\n".join(cell.source for cell in load(name).cells if cell.cell_type == "code")
    wanted = [
        f"{module}.{imported.strip()}"
        for module, names in re.findall(r"^from (aidanbench[\w.]*) import ([\w, ]+)$", source, re.M)
        for imported in names.split(",")
    ]
    assert wanted and [dotted for dotted in wanted if not resolves(dotted)] == []


@pytest.mark.e2e
def test_quickstart(stub_env: OpenAIStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "run"
    monkeypatch.setenv("AIDANBENCH_RUN_DIR", str(run_dir))
    monkeypatch.setenv("AIDANBENCH_QUESTIONS", "2")
    text = text_of(execute("quickstart"))
    assert "score 3, stopped by novelty" in text
    assert "answer 4: coherence 80, novelty 0.000 -> stops: novelty" in text
    results = json.loads((run_dir / "results.json").read_text())
    assert len(results["models"]["model-under-test"]["0.7"]) == 2
    assert "AidanBench summary" in text
    assert {r.model for r in stub_env.of_kind("generate")} == {"model-under-test"}
    assert "2 questions, score 6, 0 stopped on an error" in text
    code = "".join(c.source for c in load("quickstart").cells if c.cell_type == "code")
    assert "await run(spec)" in code and "subprocess" not in code, "the Python API, no shell"


@pytest.mark.e2e
def test_analysis(reference_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIDANBENCH_RESULTS", str(reference_run))
    monkeypatch.setenv("AIDANBENCH_CHARTS_DIR", str(tmp_path / "charts"))
    monkeypatch.setenv("AIDANBENCH_MODELS", "gpt-4-turbo,openai/gpt-4o-mini-2024-07-18")
    notebook = execute("analysis")
    text = text_of(notebook)
    assert "question lines, 2 models: gpt-4-turbo, openai/gpt-4o-mini-2024-07-18" in text
    charts = sorted(p.name for p in (tmp_path / "charts").iterdir())
    assert len(charts) == 4 and all(name.endswith(".png") for name in charts)
    assert images_of(notebook) == 4 + 1, "four standard charts and the notebook's own"


@pytest.mark.e2e
def test_subgraph(stub_env: OpenAIStub) -> None:
    text = text_of(execute("subgraph"))
    assert text.count("verdict: creative (3 ideas)") == 2
    assert "creativity_check:" in text
    assert "paused in creativity_check:" in text
