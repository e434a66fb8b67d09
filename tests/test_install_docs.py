"""The install instructions name the distribution this project builds (pyproject.toml), not a
name taken on the package index by another project."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Where install instructions are written for users.
DOCUMENTS = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted((ROOT / "docs").glob("*.md"))]
#: ``pip install NAME[extras]``: an install from the index of a package with extras.
INSTALL_WITH_EXTRAS = re.compile(r"pip install\s+'?([A-Za-z0-9_.-]+)\[")
#: The distribution name on PyPI that belongs to an unrelated project (a dataset-annotation library).
TAKEN_NAME = "affinity"


def distribution_name() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["name"])


def test_the_distribution_name_is_not_the_one_taken_on_pypi() -> None:
    assert distribution_name() != TAKEN_NAME


def test_install_instructions_use_the_distribution_name_or_the_checkout() -> None:
    name = distribution_name()
    wrong = [
        f"{path.relative_to(ROOT)}: pip install {match.group(1)}[...]"
        for path in DOCUMENTS
        for match in INSTALL_WITH_EXTRAS.finditer(path.read_text())
        if match.group(1) not in (name, ".")
    ]
    assert not wrong, f"install instructions naming another distribution than {name!r}: {wrong}"


def test_the_readme_says_how_to_install_from_a_checkout_and_from_the_index() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "pip install ." in readme
    assert f"pip install {distribution_name()}" in readme


def test_the_command_line_names_the_same_distribution_in_its_install_hints() -> None:
    from affinity.cli.demo import DISTRIBUTION, install_hint

    assert distribution_name() == DISTRIBUTION
    assert f"pip install '{distribution_name()}[spark]'" in install_hint("spark")
