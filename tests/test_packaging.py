"""The user's layout installs under one import name, in every install mode."""

from __future__ import annotations

import json
import tomllib

from .conftest import REPO


def test_every_mapped_folder_is_a_regular_package() -> None:
    """A folder without ``__init__.py`` becomes a namespace package under a plain
    ``pip install -e .``, and ``importlib.resources`` then cannot read its data files
    (seen: prompts.json unreadable after the README's install command)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    assert set(mapping) == set(config["tool"]["setuptools"]["packages"])
    for package, folder in mapping.items():
        assert (REPO / folder / "__init__.py").exists(), f"{package}: {folder}/__init__.py"
        assert (REPO / folder / "py.typed").exists(), f"{package}: {folder}/py.typed"


def test_package_data_is_installed() -> None:
    from importlib import resources

    reference = resources.files("aidanbench.reference")
    questions = reference.joinpath("questions.json").read_text()
    prompts = reference.joinpath("prompts.json").read_text()
    run = reference.joinpath("reference-runs").joinpath("aidanbench-2024-not-cot.json")
    assert len(json.loads(questions)) == 63
    assert set(json.loads(prompts)) >= {"generate_first", "judge_coherence"}
    assert len(json.loads(run.read_text())["models"]) == 5
    assert "no licence file" in " ".join(reference.joinpath("README.md").read_text().split())


def test_langgraph_json_points_at_installed_graphs() -> None:
    import importlib

    spec = json.loads((REPO / "langgraph.json").read_text())
    for target in spec["graphs"].values():
        module, name = target.split(":")
        assert getattr(importlib.import_module(module), name) is not None
