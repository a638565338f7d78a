"""README and docs/ work as written, and every name they point at exists.

Each fenced ``python`` block of README.md and docs/*.md runs in its own interpreter
against the local stub server, reached through the base-URL variables the snippets
document (``OPENAI_BASE_URL``, ``OPENROUTER_BASE_URL``). Any other destination goes to a
proxy that does not exist, so a snippet that ignored them fails instead of leaving the
machine. The ``aidanbench report``/``rescore``/``plot`` lines of the pages' ``bash``
blocks run as printed, from a folder laid out like the repository's root. Other
commands need a key, a network, a dataset or another environment, so they are read, not
run; a block of such lines that would otherwise match is fenced ``sh``.

The pages also name things that move when code is reorganised: repository paths, test
files and test functions, modules run with ``python -m``, Python names under
``aidanbench.``, and the pages and headings they link to. Each is checked here, so a
moved module or a renamed test fails a test naming the page, instead of leaving the page
quietly wrong.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aidanbench import reference
from aidanbench.testing import OpenAIStub, ScriptedBrain

from .conftest import REPO, TEST_KEY

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
ARCHITECTURE = REPO / "ARCHITECTURE.md"
PAGES = [README, ARCHITECTURE, *DOCS]
FRONT_PAGE_LINES = 400
COMMAND = Path(sys.executable).with_name("aidanbench")
KEYLESS = ("report", "rescore", "plot")
TOP_FOLDERS = (
    ".ci",
    "analysis",
    "bench",
    "cli",
    "core",
    "docs",
    "environments",
    "graph",
    "nodes",
    "notebooks",
    "package",
    "reference",
    "runner",
    "scripts",
    "services",
    "testing",
    "tests",
    "verifiers_env",
    "verifiers_seed",
)
"""The repository's folders: a backticked path starting with one of them must exist
(paths like ``RUN_DIR/usage.jsonl`` or ``runs/demo`` name what a run makes)."""


def name_of(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def fenced(language: str, text: str) -> list[str]:
    """The bodies of the fenced blocks of one language, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def prose(text: str) -> str:
    """The page without its fenced blocks (whose ``#`` lines are not headings)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def spans(text: str) -> list[str]:
    """The inline code spans of the page's prose."""
    return re.findall(r"`([^`\n]+)`", prose(text))


PYTHON_BLOCKS = [
    pytest.param(code, id=f"{name_of(page)}:{index}")
    for page in PAGES
    for index, code in enumerate(fenced("python", page.read_text("utf-8")), 1)
]
SHELL_LINES = [
    pytest.param(line.strip(), id=f"{name_of(page)}:{line.split(' ')[1]}")
    for page in PAGES
    for block in fenced("bash", page.read_text("utf-8"))
    for line in block.splitlines()
    if line.strip().split(" ")[:2] in (["aidanbench", name] for name in KEYLESS)
]


def snippet_environment(stub: OpenAIStub) -> dict[str, str]:
    env = {
        **os.environ,
        "OPENAI_BASE_URL": stub.base_url,
        "OPENROUTER_BASE_URL": stub.base_url,
        "OPENAI_API_KEY": TEST_KEY,
        "OPENROUTER_API_KEY": TEST_KEY,
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("PYTHONPATH", None)
    return env


def test_the_pages_have_the_blocks_they_should() -> None:
    readme = [p for p in PYTHON_BLOCKS if str(p.id).startswith("README.md:")]
    assert len(readme) >= 2, "README has one question and a run from Python"
    assert len(PYTHON_BLOCKS) >= 4
    assert {str(p.values[0]).split(" ")[1] for p in SHELL_LINES} == set(KEYLESS)


@pytest.mark.e2e
@pytest.mark.parametrize("code", PYTHON_BLOCKS)
def test_python_block_runs_as_written(code: str, tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(code, "utf-8")
    with OpenAIStub(ScriptedBrain()) as stub:
        done = subprocess.run(
            [sys.executable, "snippet.py"],
            cwd=tmp_path,
            env=snippet_environment(stub),
            capture_output=True,
            text=True,
            timeout=120,
        )
        asked = stub.count("generate")
    assert done.returncode == 0, f"python block:\n{code}\n{done.stderr}"
    assert asked > 0, "the snippet reached the local server"
    assert done.stdout.strip(), "the snippet printed its result"


@pytest.mark.e2e
@pytest.mark.parametrize("line", SHELL_LINES)
def test_keyless_command_runs_as_written(line: str, tmp_path: Path) -> None:
    (tmp_path / "reference").symlink_to(REPO / "reference", target_is_directory=True)
    argv = shlex.split(line)
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    done = subprocess.run(
        [str(COMMAND), *argv[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    if argv[1] == "report":
        for model, total in reference.PUBLISHED_TOTALS.items():
            assert re.search(rf"{re.escape(model)}\s.*\b{total}\b", done.stdout), model
    if argv[1] == "plot":
        assert sorted(p.name for p in (tmp_path / argv[argv.index("-o") + 1]).iterdir())


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6} (.+)$", prose(page.read_text("utf-8")), re.MULTILINE):
        base = slug(heading)
        anchor, n = base, 0
        while anchor in found:
            n += 1
            anchor = f"{base}-{n}"
        found.add(anchor)
    return found


def links(page: Path) -> list[str]:
    """Targets of the page's links that stay in this repository."""
    targets = re.findall(r"\]\(([^)\s]+)\)", prose(page.read_text("utf-8")))
    return [t for t in targets if not re.match(r"[a-z]+:", t)]


def test_readme_is_a_front_page() -> None:
    assert len(README.read_text("utf-8").splitlines()) <= FRONT_PAGE_LINES
    assert len(DOCS) >= 4
    linked = {(REPO / t.split("#")[0]).resolve() for t in links(README)}
    assert [name_of(p) for p in DOCS if p.resolve() not in linked] == [], "pages README omits"


@pytest.mark.parametrize("page", PAGES, ids=name_of)
def test_links_reach_a_page_and_its_heading(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        if not goal.exists() or (anchor and goal.suffix == ".md" and anchor not in anchors(goal)):
            broken.append(target)
    assert broken == []


def defined_tests() -> dict[str, Path]:
    """Every test function of the suite, by name."""
    names: dict[str, Path] = {}
    for path in (REPO / "tests").rglob("*.py"):
        for name in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text("utf-8"), re.M):
            names[name] = path
    return names


def resolves(dotted: str) -> bool:
    """Whether ``aidanbench.a.b`` names a module or an attribute of one.

    A module that needs an extra not installed here (verifiers) cannot be checked and
    counts as found; a misspelt module under ``aidanbench`` does not."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("aidanbench"):
                continue
            return True
        except ImportError:
            return True  # the module is there and names the extra it needs
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def missing_names(text: str) -> list[str]:
    """The paths, tests, modules and ``aidanbench`` names of a page that do not exist."""
    functions = defined_tests()
    missing = []
    for span in spans(text):
        path = span.rstrip("/")
        if re.fullmatch(r"[\w.-]+(/[\w.-]+)+", path) and path.split("/")[0] in TOP_FOLDERS:
            found = (REPO / path).exists()
        elif re.fullmatch(r"test_\w+", span):
            found = span in functions or bool(list((REPO / "tests").rglob(f"{span}.py")))
        elif dotted := re.match(r"aidanbench(\.\w+)+", span):
            found = resolves(dotted.group(0))
        else:
            continue
        if not found:
            missing.append(span)
    for module in re.findall(r"python -m\s+([\w.]+)", text):
        file = REPO / module.replace(".", "/")
        if module.split(".")[0] in TOP_FOLDERS:
            found = file.with_suffix(".py").exists() or (file / "__main__.py").exists()
        else:
            found = resolves(module)
        if not found:
            missing.append(f"python -m {module}")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=name_of)
def test_every_named_file_module_and_test_exists(page: Path) -> None:
    assert missing_names(page.read_text("utf-8")) == []
