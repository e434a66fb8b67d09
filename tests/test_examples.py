"""The README's examples run as written.

Convention (README.md): a code block preceded by ``<!-- example: examples/FILE -->`` is an excerpt
of that file: its non-blank lines appear in the file in the same order (compared without leading
and trailing spaces, so an excerpt may leave out lines or dedent). A block preceded by
``<!-- output: examples/FILE -->`` is exactly what that file prints. Every ``python`` block of the
README is an excerpt, and every runnable file under ``examples/`` is named by the README. Each
example runs on its own, as a subprocess, on a loopback port of its own, and must exit 0 in
bounded time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from affinity.testing import loopback_channel

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLES = ROOT / "examples"
#: Seconds an example may run (each waits at most 10 s for what it needs).
EXAMPLE_TIMEOUT = 60.0
#: Seconds the Spark example may run (Spark alone starts in 10-30 s on 2 busy cores).
SPARK_EXAMPLE_TIMEOUT = 300.0
#: Examples that need pyspark and Java (marked ``spark``: skipped without them, unless CI requires them).
SPARK_EXAMPLES = {"spark.py"}
#: A fenced block and the HTML comment on the line before it, if any.
BLOCK = re.compile(r"(?:<!-- (example|output): (\S+) -->\n)?```(\w*)\n(.*?)```\n", re.S)
#: How each kind of example file is run.
RUNNERS = {".py": [sys.executable], ".sh": ["bash"]}


@dataclass(frozen=True)
class Block:
    """A fenced code block of the README."""

    kind: str | None  # "example", "output" or None
    path: str | None
    language: str
    text: str
    line: int

    @property
    def where(self) -> str:
        return f"README.md line {self.line}"


def readme_blocks() -> list[Block]:
    text = README.read_text()
    return [
        Block(m.group(1), m.group(2), m.group(3), m.group(4), text.count("\n", 0, m.start(3 if m.group(1) else 0)) + 1)
        for m in BLOCK.finditer(text)
    ]


def runnable_examples() -> list[Path]:
    return sorted(path for path in EXAMPLES.iterdir() if path.suffix in RUNNERS)


def example_params() -> list[object]:
    return [
        pytest.param(path, id=path.name, marks=[pytest.mark.spark] if path.name in SPARK_EXAMPLES else [])
        for path in runnable_examples()
    ]


def run(example: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AFFINITY_")}
    env["AFFINITY_EXAMPLE_CHANNEL"] = loopback_channel()
    # The `affinity` command of this interpreter's environment, for the shell examples.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [*RUNNERS[example.suffix], str(example)],
        cwd=ROOT.parent,  # examples locate their files themselves, from anywhere
        env=env,
        capture_output=True,
        text=True,
        timeout=SPARK_EXAMPLE_TIMEOUT if example.name in SPARK_EXAMPLES else EXAMPLE_TIMEOUT,
        check=False,
    )


def test_every_python_block_of_the_readme_is_an_example_excerpt() -> None:
    loose = [block.where for block in readme_blocks() if block.language == "python" and block.kind != "example"]
    assert not loose, f"python blocks without <!-- example: examples/... -->: {loose}"


def test_every_example_file_is_shown_in_the_readme() -> None:
    shown = {block.path for block in readme_blocks() if block.kind == "example"}
    missing = [path.name for path in runnable_examples() if f"examples/{path.name}" not in shown]
    assert not missing, f"examples the README does not show: {missing}"


@pytest.mark.parametrize("block", [b for b in readme_blocks() if b.kind == "example"], ids=lambda b: str(b.path))
def test_readme_excerpt_matches_its_example_file(block: Block) -> None:
    assert block.path is not None
    path = ROOT / block.path
    assert path.is_file(), f"{block.where}: {block.path} does not exist"
    lines = [line.strip() for line in path.read_text().splitlines()]
    position = 0
    for wanted in (line.strip() for line in block.text.splitlines()):
        if not wanted:
            continue
        try:
            position = lines.index(wanted, position) + 1
        except ValueError:
            pytest.fail(f"{block.where}: {wanted!r} is not in {block.path} (in this order)")


@pytest.mark.parametrize("example", example_params())
def test_example_runs_and_prints_what_the_readme_says(example: Path) -> None:
    if example.name in SPARK_EXAMPLES and os.environ.get("AFFINITY_REQUIRE_SPARK") != "1":
        pytest.importorskip("pyspark", reason="pyspark is not installed (set AFFINITY_REQUIRE_SPARK=1 to fail instead)")
        if shutil.which("java") is None:
            pytest.skip("java is not installed: the Spark example needs Java 17")
    result = run(example)
    assert result.returncode == 0, f"{example.name} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
    outputs = [b for b in readme_blocks() if b.kind == "output" and b.path == f"examples/{example.name}"]
    for block in outputs:
        assert result.stdout == block.text, f"{block.where}: {example.name} printed\n{result.stdout}"
    if example.suffix == ".py":
        assert outputs, f"the README does not say what {example.name} prints"


def test_a_wrong_excerpt_is_caught(tmp_path: Path) -> None:
    """The excerpt check fails on a line the file lacks and on lines out of order."""
    example = tmp_path / "example.py"
    example.write_text("a = 1\nb = 2\n")
    for text in ("a = 1\nc = 3\n", "b = 2\na = 1\n"):
        block = Block("example", str(example), "python", text, 1)
        with pytest.raises(pytest.fail.Exception):
            test_readme_excerpt_matches_its_example_file(block)
