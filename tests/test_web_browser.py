"""The page of ``affinity web`` in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, installed by ``.ci/run``) driven by selenium, over a driver, a group of two
consumers and a router as real processes. One consumer is SIGKILLed and the page must show its
queues on the survivor within 5 s, with the moves as failovers; the browser's console must stay
free of errors. Screenshots are kept under ``target/test-artifacts/web/``."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web_support import CLI, GROUP, QUEUE_COUNT, running_system, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
#: Where the screenshots are kept.
ARTIFACTS = ROOT / "target" / "test-artifacts" / "web"
#: Debian's browser and its WebDriver.
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
#: Seconds the page has to show the kill's consequence (the issue's bound).
MOVE_DEADLINE_S = 5.0
#: The page's queue table of the test group, read as [queue, owner] rows.
QUEUE_ROWS_JS = """
return [...document.querySelectorAll('table.queues[data-group="orders"] tbody tr')]
    .map((row) => [Number(row.cells[0].textContent), row.cells[1].textContent]);
"""
#: Whether the group's chart draws a published and a delivered rate above zero.
CHARTED_JS = """
const chart = Chart.getChart(document.querySelector('#card-group-orders canvas'));
return !!chart && chart.data.datasets.every((set) => set.data.some((rate) => rate > 0));
"""
MOVE_ROWS_JS = """
return [...document.querySelectorAll('table.moves[data-group="orders"] tbody tr')]
    .map((row) => [...row.cells].map((cell) => cell.textContent));
"""


@pytest.fixture
def browser() -> Iterator[Any]:
    """Headless Chromium under selenium, with the console log kept."""
    if shutil.which(CHROMIUM) is None or shutil.which(CHROMEDRIVER) is None:
        pytest.skip(f"needs Debian's chromium and chromium-driver ({CHROMIUM}, {CHROMEDRIVER}): .ci/run installs them")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,3200",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _owners(browser: Any) -> dict[int, str]:
    return {queue: owner for queue, owner in browser.execute_script(QUEUE_ROWS_JS)}


def _console_errors(browser: Any) -> list[dict[str, Any]]:
    return [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "ERROR")]


def test_the_page_shows_a_killed_consumers_queues_moving_to_the_survivor(browser: Any, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with running_system(tmp_path) as system:
        with (system.logs / "publisher.log").open("w") as log:
            command = [*CLI, "group", "publish", GROUP, "--keys", "50", "--rate", "200", "--duration", "120"]
            system.extra.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=system.env))
        browser.get(system.url)
        primaries = {q: f"consumer-{q % 2}" for q in range(QUEUE_COUNT)}
        wait_for("the owners table with each queue on its primary", lambda: _owners(browser) == primaries)
        wait_for("the publish and delivery rates charted", lambda: browser.execute_script(CHARTED_JS))
        wait_for(
            "the router's report and the driver's counters on the page",
            lambda: browser.execute_script(
                "return document.querySelectorAll('table.peers tbody tr').length === 2"
                " && document.querySelectorAll('table.system tbody tr').length > 30"
            ),
        )
        browser.save_screenshot(str(ARTIFACTS / "before-kill.png"))
        victim = system.consumers["consumer-1"]
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        survivor = {q: "consumer-0" for q in range(QUEUE_COUNT)}
        while _owners(browser) != survivor:
            elapsed = time.monotonic() - killed
            assert elapsed <= MOVE_DEADLINE_S, f"{elapsed:.1f} s after the kill the page still shows {_owners(browser)}"
            time.sleep(0.05)
        shown_after = time.monotonic() - killed
        moves = wait_for(
            "the failovers in the moves table",
            lambda: [m for m in browser.execute_script(MOVE_ROWS_JS) if m[5] == "failover"],
            timeout=MOVE_DEADLINE_S,
        )
        browser.save_screenshot(str(ARTIFACTS / "after-kill.png"))
        errors = _console_errors(browser)
    moved = {int(row[1]) for row in moves}
    assert moved == {q for q in range(QUEUE_COUNT) if q % 2 == 1}, moves
    assert all(row[2] == "consumer-1" and row[3] == "consumer-0" and "consumer-1" in row[6] for row in moves), moves
    assert errors == [], errors
    print(f"the page showed every queue on the survivor {shown_after:.2f} s after the SIGKILL")


def test_the_page_shows_problems_in_place_and_keeps_serving_the_rest(browser: Any, tmp_path: Path) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    corrupt = tmp_path / "corrupt-driver"
    corrupt.mkdir()
    (corrupt / "cnc.dat").write_bytes(b"\x00" * 4096)
    with running_system(tmp_path, "--dir", str(corrupt), with_router=False) as system:
        (system.registry / "groups" / "junk.json").write_text("[not json")
        browser.get(system.url)
        primaries = {q: f"consumer-{q % 2}" for q in range(QUEUE_COUNT)}
        wait_for("the group's owners", lambda: _owners(browser) == primaries)
        texts = wait_for(
            "the three problems on the page",
            lambda: (
                (
                    found := browser.execute_script(
                        "return [...document.querySelectorAll('.problem, .problems li')].map((e) => e.textContent)"
                    )
                )
                and any("junk.json" in t for t in found)
                and any("invalid cnc file" in t for t in found)
                and any("no router report" in t for t in found)
                and found
            ),
        )
        browser.save_screenshot(str(ARTIFACTS / "problems.png"))
        errors = _console_errors(browser)
    assert any(str(corrupt / "cnc.dat") in t for t in texts), texts
    assert errors == [], errors


def test_a_group_of_4096_queues_is_paginated_on_the_page(browser: Any, tmp_path: Path) -> None:
    import subprocess
    import sys

    from affinity.groups import create_group
    from web_support import SERVING

    registry = tmp_path / "registry"
    create_group("wide", "wide", 4096, 4096, 1 << 20, registry)
    command = [sys.executable, "-m", "affinity.cli", "web", "--listen", "127.0.0.1:0", "--registry", str(registry)]
    command += ["--dir", str(tmp_path / "no-driver")]
    web = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert web.stdout is not None
        match = SERVING.search(web.stdout.readline())
        assert match is not None
        browser.get(match.group(1))
        rows_js = (
            "return [...document.querySelectorAll('table.queues[data-group=\"wide\"] tbody tr')]"
            ".map((r) => Number(r.cells[0].textContent))"
        )
        first = wait_for("the first page of queues", lambda: browser.execute_script(rows_js))
        assert first == list(range(256))
        pager = browser.execute_script("return document.querySelector('#card-group-wide .pager').textContent")
        assert "page 1 of 16 (4,096 rows)" in pager
        browser.execute_script("document.querySelectorAll('#card-group-wide .pager button')[1].click()")
        wait_for("the second page of queues", lambda: browser.execute_script(rows_js) == list(range(256, 512)))
        browser.save_screenshot(str(ARTIFACTS / "paginated.png"))
        assert _console_errors(browser) == []
    finally:
        web.terminate()
        web.communicate(timeout=30)
