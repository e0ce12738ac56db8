"""The docs cannot drift from the code: every knob is in the knobs reference, the README stays
short, and its links to ``docs/`` resolve.

Every key of ``graphfuser/configs/default.yaml`` (nested keys as ``cpu.cxx``) and every
``PYTORCH_NVFUSER_DISABLE`` / ``ENABLE`` / ``DUMP`` option of ``graphfuser/config.py`` must appear,
in backticks, in ``docs/knobs.md`` (the full reference) and in ``README.md`` (one line per knob).
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

# the module (``graphfuser.config`` as an attribute of the package is the Config object)
config_module = importlib.import_module("graphfuser.config")

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
KNOBS = ROOT / "docs" / "knobs.md"
README_MAX_LINES = 200


def default_yaml() -> Path:
    """``default.yaml``: where ``graphfuser.config`` names it, else beside or inside the package."""
    named = [Path(v) for v in vars(config_module).values()
             if isinstance(v, (str, Path)) and str(v).endswith("default.yaml")]
    candidates = named + [ROOT / "graphfuser" / "configs" / "default.yaml", ROOT / "configs" / "default.yaml"]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"default.yaml not found; looked at {[str(p) for p in candidates]}")


def keys(tree: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Every key of a nested mapping, dotted: ``enabled``, ``cpu``, ``cpu.cxx`` ..."""
    for key, value in tree.items():
        yield prefix + key
        if isinstance(value, dict):
            yield from keys(value, f"{prefix}{key}.")


def backticked(text: str) -> set[str]:
    """The names that stand in backticks in ``text``, alone or as a word of a longer span."""
    names: set[str] = set()
    for span in re.findall(r"`([^`\n]+)`", text):
        names.add(span)
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_.]*", span))
    return names


YAML_KEYS = sorted(keys(yaml.safe_load(default_yaml().read_text())))
OPTIONS = sorted(set(config_module.DISABLE_OPTIONS) | set(config_module.ENABLE_OPTIONS)
                 | set(config_module.DUMP_OPTIONS))


def test_yaml_mirrors_the_defaults() -> None:
    assert set(yaml.safe_load(default_yaml().read_text())) == set(config_module.DEFAULTS)


@pytest.mark.parametrize("doc", [KNOBS, README], ids=["knobs.md", "README.md"])
def test_every_yaml_key_is_documented(doc: Path) -> None:
    missing = [k for k in YAML_KEYS if k not in backticked(doc.read_text())]
    assert not missing, f"{doc.name} does not name these keys of {default_yaml().name}: {missing}"


@pytest.mark.parametrize("doc", [KNOBS, README], ids=["knobs.md", "README.md"])
def test_every_option_is_documented(doc: Path) -> None:
    missing = [o for o in OPTIONS if o not in backticked(doc.read_text())]
    assert not missing, f"{doc.name} does not name these DISABLE / ENABLE / DUMP options: {missing}"


def test_readme_reads_in_five_minutes() -> None:
    n = len(README.read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}): move depth to docs/"


def test_readme_links_to_docs_resolve() -> None:
    links = set(re.findall(r"\]\((docs/[^)#\s]+\.md)", README.read_text()))
    assert links, "README.md links to no page of docs/"
    missing = sorted(link for link in links if not (ROOT / link).is_file())
    assert not missing, f"README.md links to missing pages: {missing}"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = set(re.findall(r"\]\((docs/[^)#\s]+\.md)", README.read_text()))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert not pages - linked, f"pages of docs/ the README does not link: {sorted(pages - linked)}"
