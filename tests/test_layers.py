"""The import contracts (``.importlinter``) hold on this tree, and an upward import breaks them.

``make test`` runs ``lint-imports`` before pytest; these tests show that the run would catch a
regression: a copy of the package with one upward import (``ir`` -> ``passes``, and a lazy one
inside a function) fails the contract, while the real tree passes.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter")

ROOT = Path(__file__).resolve().parents[1]
CONFIG_FILES = (".importlinter", "setup.cfg", "pyproject.toml")
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the tree at ``root`` (its package first on the path, no cache)."""
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", LINT, "--no-cache", "--no-logo"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def copy_tree(dest: Path) -> Path:
    """The package and the import-linter configuration, copied under ``dest``."""
    shutil.copytree(ROOT / "graphfuser", dest / "graphfuser",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    for name in CONFIG_FILES:
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, dest / name)
    return dest


def test_the_tree_keeps_the_contracts() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" in result.stdout and " 0 broken" in result.stdout


@pytest.mark.parametrize("source", [
    "from graphfuser.passes import dce\n",
    "def later():\n    from graphfuser.executor import executor\n    return executor\n",
], ids=["module-level", "lazy"])
def test_an_upward_import_breaks_the_contract(tmp_path: Path, source: str) -> None:
    tree = copy_tree(tmp_path)
    (tree / "graphfuser" / "ir" / "trial_upward.py").write_text(source)
    result = lint_imports(tree)
    assert result.returncode != 0, result.stdout
    assert "graphfuser.ir.trial_upward" in result.stdout, result.stdout
