"""The packages' import direction, checked by import-linter on the installed package and on
a copy with one upward import added (which must fail), ``lint-imports`` as a contributor
runs it after ``pip install -e .`` or a wheel install, and the promise that the error
vocabulary loads no graph and no HTTP client."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _lint(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy_package(dest: Path) -> Path:
    """The installed layout (``aidanbench/<sub>``) rebuilt from pyproject's package-dir."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package_dir: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    for name, source in sorted(package_dir.items()):
        target = dest / Path(*name.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for module in (ROOT / source).glob("*.py"):
            shutil.copy(module, target / module.name)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_package_keeps_its_layers(tmp_path: Path) -> None:
    """On the package's layout rebuilt from pyproject, so the check holds whatever this
    environment installed."""
    copy = _copy_package(tmp_path)
    result = _lint(copy, pythonpath=copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "upward"),
    [
        ("core/vocabulary.py", "from aidanbench.graph import questions"),
        ("services/errors.py", "import aidanbench.nodes.parsing"),
        ("nodes/decide.py", "from aidanbench.graph import question"),
        ("graph/question.py", "from aidanbench.cli import options"),
        ("analysis/summary.py", "import aidanbench.testing"),
    ],
)
def test_an_upward_import_breaks_the_check(tmp_path: Path, module: str, upward: str) -> None:
    copy = _copy_package(tmp_path)
    target = copy / "aidanbench" / module
    target.write_text(target.read_text() + f"\n{upward}  # an upward import\n")
    result = _lint(copy, pythonpath=copy)
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout


def _source_copy(dest: Path) -> Path:
    """The files a build reads: pyproject, README and every mapped folder."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for folder in {f.split("/")[0] for f in config["tool"]["setuptools"]["package-dir"].values()}:
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    return dest


@pytest.mark.parametrize("editable", [True, False], ids=["pip-install-e", "wheel"])
def test_lint_imports_passes_where_a_contributor_installs(tmp_path: Path, editable: bool) -> None:
    """``pip install -e .`` (or a wheel install) into a fresh virtual environment, then
    ``lint-imports`` in the checkout, reads every module of every mapped folder.

    Editable installs are strict (pyproject): a lenient one maps each folder through an
    import hook, and import-linter, which walks only the directory of ``aidanbench``
    (``package/``), then fails with ``Missing layer``. The environment borrows this one's
    dependencies (a ``.pth`` line), so only the package's own install is made here,
    offline, as pip and setuptools make it."""
    source = _source_copy(tmp_path / "checkout")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "borrowed.pth").write_text(sysconfig.get_path("purelib") + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    install += ["--no-deps", "--no-index", "--no-build-isolation"]
    subprocess.run(
        [*install, *(["-e"] if editable else []), str(source)], capture_output=True, check=True
    )
    lint = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    result = subprocess.run(
        [str(python), "-c", lint, "--no-cache"],
        cwd=source,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    modules = sum(
        len(list((ROOT / folder).glob("*.py")))
        for folder in config["tool"]["setuptools"]["package-dir"].values()
    )
    assert f"Analyzed {modules} files" in result.stdout


def test_error_vocabulary_loads_no_graph_and_no_http_client() -> None:
    heavy = ["langgraph", "langchain_core", "openai", "httpx", "httpx2", "aiohttp"]
    probe = (
        "import sys\n"
        "import aidanbench.services.errors, aidanbench.core.vocabulary\n"
        "import aidanbench.core.errors, aidanbench.core.settings\n"
        f"print([name for name in {heavy!r} if name in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
