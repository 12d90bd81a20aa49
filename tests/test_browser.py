"""The search page in a real browser: Debian's Chromium driven by Playwright against a real server.

Skips (with the reason) where no Chromium is installed; `.ci/run` installs it.
Never downloads a browser. HYBRIDKB_UPDATE_SCREENSHOT=1 refreshes docs/img/search-page.png.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import running_server

import hybridkb
from hybridkb import HashingEmbedder

CHROMIUM = Path(os.environ.get("HYBRIDKB_CHROMIUM", "/usr/bin/chromium"))
if not CHROMIUM.exists():
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (CI's .ci/run does)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")

TOKEN = "browser-token"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "search-page.png"

NOTES = [
    ("Use SQLite for local storage: one file, WAL mode, no server to run.", "decision", "memory", None),
    ("Local storage lives in SQLite; PostgreSQL is for teams that outgrow one file.", "wiki_page",
     "wiki", "Storage"),
    ("Lesson: rebuild the FTS index after bulk imports into local storage, or queries miss rows.",
     "lesson", "memory", None),
    ("The deploy checklist: run migrations, warm the cache, then switch traffic.", "wiki_page",
     "wiki", "Deploying"),
]
CODE = ("def open_store(path):\n    \"\"\"Open the local storage file (SQLite, WAL).\"\"\"\n"
        "    return sqlite3.connect(path)")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    db = tmp_path / "kb.db"
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        ids = {"code": kb.add(CODE, title="src/store.py", kind="code", corpus="code",
                              metadata={"path": "src/store.py", "start_line": 42})}
        for i, (text, kind, corpus, title) in enumerate(NOTES):
            ids[f"note{i}"] = kb.add(text, kind=kind, corpus=corpus, title=title)
    env = {**os.environ, "HYBRIDKB_TOKEN": TOKEN}
    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "hybridkb.cli", "--db", str(db), "--embedder", "hashing-64",
                "serve", "--http", "--port", str(port)]

    with running_server(command, env, start_timeout=30) as port:
        yield f"http://127.0.0.1:{port}", ids


def test_search_page_in_chromium(server: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    base, ids = server
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 820})
            page.set_default_timeout(15_000)

            # without the token: the page says how to get in
            page.goto(base + "/")
            assert "token" in page.inner_text("body")

            # the token once: it becomes a cookie and leaves the address bar
            page.goto(f"{base}/?token={TOKEN}")
            assert page.url == base + "/"
            page.wait_for_selector("#corpus option[value=code]", state="attached")

            page.fill("#q", "local storage sqlite")
            page.press("#q", "Enter")
            page.wait_for_selector("li.hit")
            hits = page.locator("li.hit")
            assert hits.count() >= 4  # vector search also brings the unrelated deploy note, last
            assert hits.nth(hits.count() - 1).get_attribute("data-id") == ids["note3"]
            assert "answered by hybrid" in page.inner_text("#status")
            assert page.get_attribute("#as-json", "href") == "/api/search?q=local+storage+sqlite&mode=hybrid"
            assert page.url.startswith(base + "/?q=local+storage+sqlite")
            first_marks = [m.lower() for m in hits.nth(0).locator("mark").all_inner_texts()]
            assert "storage" in first_marks or "sqlite" in first_marks
            sources = page.locator("li.hit .source").all_inner_texts()
            assert "[code: src/store.py]" in sources and "[memory: decision]" in sources
            code_hit = page.locator(f"li.hit[data-id='{ids['code']}']")
            assert code_hit.locator(".loc").inner_text() == "src/store.py:42"

            # explain: each retriever's rank and score, the fusion, the boosts
            decision = page.locator(f"li.hit[data-id='{ids['note0']}']")
            decision.locator("button.explain-toggle").click()
            table = decision.locator("table.explain")
            assert table.is_visible()
            retrievers = table.locator("tr.retriever").all_inner_texts()
            assert any(r.startswith("fts") for r in retrievers)
            assert any(r.startswith("vector") for r in retrievers)
            assert "fusion (dbsf)" in table.locator("tr.fusion").inner_text()
            boosts = table.locator("tr.boost").all_inner_texts()
            assert any("type" in b and "×2.000" in b for b in boosts), boosts

            shot = SCREENSHOT if os.environ.get("HYBRIDKB_UPDATE_SCREENSHOT") == "1" \
                else tmp_path / "search-page.png"
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
            assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

            # a filter: only the code corpus
            page.select_option("#corpus", "code")
            page.press("#q", "Enter")
            page.wait_for_function("document.querySelectorAll('li.hit').length === 1")
            assert page.locator("li.hit").get_attribute("data-id") == ids["code"]

            # the item page
            page.locator("li.hit a.title").click()
            page.wait_for_selector("#item-text")
            assert page.url == f"{base}/items/{ids['code']}"
            assert "return sqlite3.connect(path)" in page.inner_text("#item-text")
            assert "src/store.py:42" in page.inner_text("main")
        finally:
            browser.close()
