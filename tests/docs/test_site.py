"""The built documentation site in a real browser: Debian's headless Chromium loads the main pages from
a local HTTP server and none of them logs to the console (no script error, no failed asset); the search
index Material's search reads holds every page of the navigation.

The site is built here as CI builds it (``mkdocs build --strict``), into the test's temporary folder.
Chromium's console lines are read from its own log (``--enable-logging=stderr``); a page with a
deliberate script error shows that they are seen.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

PROJECT = Path(__file__).resolve().parents[2]
#: The pages a reader reaches in one click from the front page, and what each must show.
MAIN_PAGES = {
    "": "hoodied",
    "getting-started/": "Getting started",
    "concepts/locks/": "Coordination lock",
    "concepts/outcomes/": "Job outcomes",
    "writers/": "Running beside live Hudi writers",
    "object-storage/": "Object storage",
    "operations/table-controls/": "Per-table controls",
    "operations/metrics/": "Metrics, dashboard and alerts",
    "operations/runbook/": "Alerts runbook",
    "troubleshooting/": "Troubleshooting",
    "reference/configuration/": "Configuration",
    "reference/cli/": "CLI",
}


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir",
                            str(out)], cwd=PROJECT, capture_output=True, text=True, env=env, timeout=300)
    assert build.returncode == 0, build.stdout + build.stderr
    # a page with a script error: the check below must see what it logs
    (out / "control.html").write_text('<html><body><script>console.error("control");nosuch();</script>'
                                      "</body></html>")
    return out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _load(url: str, profile: Path) -> tuple[str, list[str]]:
    """The page's DOM after its scripts ran, and the console lines Chromium logged for it."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.fail("chromium is not installed (tests/run.sh installs Debian's chromium with apt-get)")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000",
         "--dump-dom", url],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]


def test_console_lines_are_seen(served: str, tmp_path: Path) -> None:
    _, console = _load(served + "control.html", tmp_path / "profile")
    assert any('"control"' in line for line in console), console
    assert any("nosuch is not defined" in line for line in console), console


@pytest.mark.parametrize("page", sorted(MAIN_PAGES))
def test_main_page_loads_without_console_errors(page: str, served: str, tmp_path: Path) -> None:
    dom, console = _load(served + page, tmp_path / "profile")
    assert console == []
    assert f"<title>{MAIN_PAGES[page]}" in dom or (page == "" and "<title>hoodied</title>" in dom)
    assert 'class="md-content"' in dom and 'data-md-component="search"' in dom  # Material's page


def _nav_pages(nav: list[object]) -> Iterator[str]:
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            if isinstance(value, list):
                yield from _nav_pages(value)
            else:
                yield str(value)


def test_search_index_holds_every_page(site: Path) -> None:
    nav = yaml.safe_load((PROJECT / "mkdocs.yml").read_text())["nav"]
    pages = list(_nav_pages(nav))
    assert len(pages) == len(list((PROJECT / "docs").rglob("*.md")))  # every page is in the navigation
    index = json.loads((site / "search" / "search_index.json").read_text())
    locations = {doc["location"] for doc in index["docs"]}
    expected = {"" if p == "index.md" else p.removesuffix(".md") + "/" for p in pages}
    assert expected <= locations
    # what a reader searches for is found on the page that answers it
    text: dict[str, str] = {}
    for doc in index["docs"]:  # a page's sections are documents of their own (page/#anchor)
        page = doc["location"].partition("#")[0]
        text[page] = text.get(page, "") + " " + doc["text"]
    assert "hoodied table pause" in text["operations/table-controls/"]
    assert "hoodie.write.lock.provider" in text["writers/"]
    assert "AWS_ACCESS_KEY_ID" in text["object-storage/"]
