"""The docs a reader starts from: the README stays a door (not a manual), every link in the docs
leads somewhere, every module docs/architecture.md names exists, and the operator guide's config
is one the controller accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from iris.core.config import parse_config

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 220, f"README.md has {lines} lines; move reference material into docs/"


@pytest.mark.parametrize("page", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page):
    broken = [
        target
        for target in LINK.findall(page.read_text())
        if "://" not in target and not (page.parent / target).exists()
    ]
    assert not broken, f"{page.name} links to missing files: {broken}"


def test_every_module_the_architecture_names_exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_0-9]+\.(?:py|proto))`", text))
    assert len(named) > 40, "the architecture page names the modules of each step"
    missing = sorted(p for p in named if not (ROOT / "src" / "iris" / p).exists() and not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_the_operator_guides_config_is_accepted():
    text = (ROOT / "docs" / "operator-guide.md").read_text()
    block = re.search(r"```yaml\n(# cluster.yaml\n.*?)```", text, re.S)
    assert block, "docs/operator-guide.md starts from a cluster.yaml"
    config = parse_config(yaml.safe_load(block.group(1)))
    assert [b.kind for b in config.backends] == ["local", "workers", "slurm"]
