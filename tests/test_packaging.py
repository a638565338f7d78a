"""The user's layout installs under one import name, in every install mode."""

from __future__ import annotations

import ast
import json
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

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


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[\\[<>=!~ ;]", requirement)[0]).lower()


def test_every_imported_package_is_declared() -> None:
    """Each third-party module the package imports comes from a distribution that
    ``pyproject.toml`` names, in the base dependencies or an extra: one that arrives only
    as another package's dependency can vanish with that package's next release."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = config["project"]
    declared = {_name(r) for r in project["dependencies"]}
    declared |= {_name(r) for extra in project["optional-dependencies"].values() for r in extra}
    distributions = packages_distributions()
    undeclared = set()
    for folder in config["tool"]["setuptools"]["package-dir"].values():
        for path in (REPO / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top == "aidanbench":
                        continue
                    # a distribution not installed here (verifiers) is named as imported
                    found = {_name(d) for d in distributions.get(top, [top])}
                    if not found & declared:
                        undeclared.add(f"{top} ({folder}/{path.name})")
    assert not undeclared, sorted(undeclared)
