"""The repository carries the published reference data itself, unchanged.

A clone with nothing beside it must test itself: no test or document may reach for a
folder outside the repository, and the bundled files must be the published ones (their
sha256 as recorded in ``reference/README.md``) and must be installed with the package.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from aidanbench import reference

from .conftest import REPO

OUTSIDE = ("../" + "shared", "shared" + "/aidanbench")
"""The sibling folder CI happens to have; written in parts so this file is not a hit."""


def tracked_files(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True, text=True
    )
    return [name for name in out.stdout.split("\0") if name]


def test_bundled_files_are_the_published_bytes() -> None:
    note = (REPO / "reference" / "README.md").read_text("utf-8")
    for name, digest in reference.SHA256.items():
        data = reference.resource(name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name
        assert digest in note, f"{name}: sha256 not recorded in reference/README.md"


def test_published_run_has_the_published_totals() -> None:
    data = json.loads(reference.published_run().read_text("utf-8"))
    totals = {
        model: sum(len(chain) - 1 for chain in temps["0.7"].values())
        for model, temps in data["models"].items()
    }
    assert totals == reference.PUBLISHED_TOTALS
    assert sum(len(temps["0.7"]) for temps in data["models"].values()) == 49


def test_unknown_name_is_refused() -> None:
    with pytest.raises(ValueError, match="no bundled reference file"):
        reference.resource("other.json")


@pytest.mark.e2e
def test_nothing_tracked_reads_outside_the_repository() -> None:
    hits = []
    for name in tracked_files(REPO):
        path = REPO / name
        if path.suffix in {".png", ".sqlite"} or name.startswith("reference/"):
            continue
        text = path.read_text("utf-8", errors="replace")
        if any(word in text for word in OUTSIDE):
            hits.append(name)
    assert hits == []


@pytest.mark.e2e
def test_a_lone_copy_builds_a_package_with_the_data(tmp_path: Path) -> None:
    """The tracked files alone, with no sibling folder, make a wheel carrying the data."""
    lone = tmp_path / "lone" / "repo"
    for name in tracked_files(REPO):
        target = lone / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    assert not (lone.parent / "shared").exists()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(lone),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("aidanbench-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        for name, digest in reference.SHA256.items():
            data = archive.read(f"aidanbench/reference/{name}")
            assert hashlib.sha256(data).hexdigest() == digest, name
        assert "aidanbench/reference/README.md" in archive.namelist()
        names = set(archive.namelist())
    assert "aidanbench/graph/questions.json" not in names, "one copy of the questions"
    assert "aidanbench/nodes/prompts.json" not in names, "one copy of the prompts"
