"""``affinity demo --web``: the live page serves the demo's group during the run (the kill shows as
failovers), and stops with the demo; without ``--web`` the demo says how to watch it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

#: Seconds the whole demo may take.
DEMO_TIMEOUT_S = 240.0
_LIVE_PAGE = re.compile(r"live page: (http://\S+/)")


def _snapshot(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "api/snapshot", timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
        return data


def test_the_demo_serves_its_live_page_with_web_and_stops_it_at_the_end(tmp_path: Path) -> None:
    command = [
        *(sys.executable, "-m", "affinity.cli", "demo", "--no-spark", "--no-live", "--web", "127.0.0.1:0"),
        *("--duration", "14", "--rate", "500", "--accounts", "200", "--kill-at", "4", "--join-at", "8"),
        *("--out", str(tmp_path / "out")),
    ]
    demo = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    failovers: list[dict[str, Any]] = []
    try:
        assert demo.stdout is not None
        deadline = time.monotonic() + DEMO_TIMEOUT_S
        url = None
        while url is None:
            line = demo.stdout.readline()
            assert line, f"the demo ended without a live page: {''.join(lines)}"
            lines.append(line)
            match = _LIVE_PAGE.search(line)
            url = match.group(1) if match else None
        while not failovers and time.monotonic() < deadline and demo.poll() is None:
            groups = _snapshot(url)["groups"]
            failovers = [
                m
                for g in groups
                if g["name"].startswith("demo-accounts")
                for m in g["moves"]
                if m["cause"] == "failover"
            ]
            time.sleep(0.2)
        output, _ = demo.communicate(timeout=DEMO_TIMEOUT_S)
        lines.append(output)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        if demo.stdout is not None:
            demo.stdout.close()
    assert demo.returncode == 0, "".join(lines)
    assert failovers, f"the page never showed the kill's failovers: {''.join(lines)}"
    assert all(m["from"] == failovers[0]["from"] and "silent" in m["why"] for m in failovers), failovers
    with pytest.raises(urllib.error.URLError):
        _snapshot(url)


def test_the_demo_without_web_says_how_to_watch_it_live(tmp_path: Path) -> None:
    command = [
        *(sys.executable, "-m", "affinity.cli", "demo", "--no-spark", "--no-live", "--consumers", "2"),
        *("--duration", "3", "--rate", "200", "--accounts", "50", "--out", str(tmp_path / "out")),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S, check=False)
    assert "watch it live: affinity demo --web (serves http://127.0.0.1:8080/)" in result.stdout, result.stdout
    assert re.search(r"affinity web --registry \S+", result.stdout), result.stdout
