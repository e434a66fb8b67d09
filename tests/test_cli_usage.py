"""The ``affinity`` command's manners: ``--version``, help text without reStructuredText markup,
and a wrong option reported with the usage of the subcommand it was given to."""

from __future__ import annotations

import argparse
import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import affinity
import pytest
from affinity.cli import build_parser

CLI = [sys.executable, "-m", "affinity.cli"]


def affinity_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, check=False)


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand parser under it, at any depth."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


def test_version_prints_the_package_version() -> None:
    result = affinity_cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"affinity {affinity.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", affinity.__version__)


@pytest.mark.parametrize("parser", list(every_parser(build_parser())), ids=lambda p: p.prog)
def test_help_text_carries_no_restructuredtext_markup(parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    assert "``" not in text, text
    assert not re.search(r":(class|mod|func|meth|data|attr):`", text), text
    assert not re.search(r"::$", text, re.MULTILINE), text


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (("stat", "--no-such-option"), "usage: affinity stat "),
        (("group", "status", "g", "--no-such-option"), "usage: affinity group status "),
        (("demo", "transport", "--no-such-option"), "usage: affinity demo transport "),
    ],
)
def test_a_wrong_option_prints_the_usage_of_its_subcommand(args: tuple[str, ...], usage: str) -> None:
    result = affinity_cli(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(usage), result.stderr
    assert "unrecognized arguments: --no-such-option" in result.stderr


def test_stat_without_a_driver_says_none_runs_there_and_how_to_start_one(tmp_path: Path) -> None:
    result = affinity_cli("stat", "--dir", str(tmp_path))
    assert result.returncode == 1
    assert f"no driver runs in {tmp_path} (no cnc.dat there); start one with: affinity driver --dir {tmp_path}" in (
        result.stderr
    )
    assert "os error" not in result.stderr


@pytest.mark.parametrize("user", [None, "", "someone-else"])
def test_the_default_driver_directory_follows_the_login_name_not_user(user: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "AFFINITY_DIR")}
    if user is not None:
        env["USER"] = user
    result = subprocess.run(
        [sys.executable, "-c", "import affinity; print(affinity.default_driver_dir())"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    login = pwd.getpwuid(os.getuid()).pw_name
    assert Path(result.stdout.strip()).name == f"affinity-{login}"
