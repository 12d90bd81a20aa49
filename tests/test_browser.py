"""The search page in a real browser: Debian's Chromium driven by Playwright against a real server.

Skips (with the reason) where no Chromium is installed; `.ci/run` installs it.
Never downloads a browser. HYBRIDKB_UPDATE_SCREENSHOT=1 refreshes docs/img/search-page.png.
"""

from __future__ import annotations

import http.server
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
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

            # the token once: it moves into the page's storage and leaves the address bar
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
            # (the pages' CSP forbids eval, so waits are selectors, not wait_for_function)
            sync_api.expect(page.locator("li.hit")).to_have_count(1)
            assert page.locator("li.hit").get_attribute("data-id") == ids["code"]

            # the item page
            page.locator("li.hit a.title").click()
            page.wait_for_selector("#item-text:not(:empty)")
            assert page.url == f"{base}/items/{ids['code']}"
            assert "return sqlite3.connect(path)" in page.inner_text("#item-text")
            assert "src/store.py:42" in page.inner_text("main")
        finally:
            browser.close()


class _Capture(http.server.BaseHTTPRequestHandler):
    """Another local server: records what a browser sends it (it redirects itself once, as
    a page would to pass SameSite rules)."""

    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()} | {":path": self.path})
        if self.path == "/bounce":
            self.send_response(302)
            self.send_header("location", "/landed")
            self.end_headers()
            return
        body = b"<!doctype html><title>elsewhere</title><p>another local server</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_nothing_another_local_port_receives_opens_this_server(
        server: tuple[str, dict[str, str]]) -> None:
    """Cookies are scoped by host, not port: whatever a logged-in browser sends to another
    port on 127.0.0.1, replayed here, must not read or write anything."""
    base, ids = server
    _Capture.seen = []
    listener = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    elsewhere = f"http://127.0.0.1:{listener.server_address[1]}"
    try:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
            try:
                page = browser.new_page()
                page.set_default_timeout(15_000)
                page.goto(f"{base}/?token={TOKEN}")
                page.wait_for_selector("#corpus option[value=code]", state="attached")
                assert TOKEN not in page.url
                page.goto(elsewhere + "/")
                page.goto(elsewhere + "/bounce")
                page.wait_for_selector("p")
                # the user comes back: still logged in, search and item pages work
                page.goto(f"{base}/?q=sqlite")
                page.wait_for_selector("li.hit")
                page.goto(f"{base}/items/{ids['code']}")
                page.wait_for_selector("#item-text:not(:empty)")
                assert "return sqlite3.connect(path)" in page.inner_text("#item-text")
            finally:
                browser.close()
    finally:
        listener.shutdown()
        listener.server_close()
    assert len(_Capture.seen) >= 3, _Capture.seen
    host = base.removeprefix("http://")
    for sent in _Capture.seen:
        headers = {k: v for k, v in sent.items() if not k.startswith(":")} | {"host": host}
        headers.pop("origin", None)
        headers.pop("referer", None)
        for path in ("/api/stats", f"/api/items/{ids['code']}", "/api/search?q=sqlite"):
            replay = httpx.get(base + path, headers=headers)
            assert replay.status_code == 401, (sent, path, replay.text)
        replay = httpx.post(base + "/api/items", headers=headers, json={"text": "planted"})
        assert replay.status_code in (401, 403), (sent, replay.text)
        page_html = httpx.get(f"{base}/items/{ids['code']}", headers=headers).text
        assert "sqlite3.connect" not in page_html  # pages are shells: no stored text in them


PWN = "document.body.dataset.pwned"
XSS = [f"<script>{PWN} = 1</script>", f"<img src=x onerror=\"{PWN} = 2\">",
       f"\"><svg onload=\"{PWN} = 3\">", f"javascript:{PWN} = 4"]


def test_stored_markup_stays_text_in_the_browser(tmp_path: Path) -> None:
    """Markup in every stored field the pages show is shown as text and never runs."""
    db = tmp_path / "xss.db"
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        item_id = kb.add(" ".join(XSS) + " needle", id="x<b>1</b>", title=XSS[1], kind=XSS[2],
                         corpus="wiki", scope=XSS[0], repo=XSS[3], namespace=XSS[1],
                         source_url=XSS[3], metadata={"path": XSS[1], "start_line": 3,
                                                      "team": XSS[2]})
        kb.set_label_template("wiki", "[team {team}: {title}]")
    env = {**os.environ, "HYBRIDKB_TOKEN": TOKEN}

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "hybridkb.cli", "--db", str(db), "--embedder", "hashing-64",
                "serve", "--http", "--port", str(port)]

    with running_server(command, env, start_timeout=30) as port, \
            sync_api.sync_playwright() as pw:
        base = f"http://127.0.0.1:{port}"
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(15_000)
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(f"{base}/?token={TOKEN}&q=needle")
            page.wait_for_selector("li.hit")
            hit = page.locator("li.hit")
            assert XSS[0] in hit.inner_text() and XSS[1] in hit.locator(".title").inner_text()
            hit.locator("button.explain-toggle").click()
            hit.locator("a.title").click()
            page.wait_for_selector("#item-text:not(:empty)")
            assert page.inner_text("#item-title") == XSS[1]
            fields = page.inner_text("#item-fields")
            for payload in XSS:
                assert payload in page.inner_text("#item-text")
            assert XSS[0] in fields and XSS[2] in fields and XSS[3] in fields
            assert page.inner_text("#item-source") == f"[team {XSS[2]}: {XSS[1]}]"
            assert page.inner_text("#item-loc") == f"{XSS[1]}:3"
            assert dialogs == [] and page.get_attribute("body", "data-pwned") is None
            assert page.locator("img, svg, script:not([src])").count() == 0
            assert item_id in page.url or "x%3Cb%3E1%3C%2Fb%3E" in page.url
        finally:
            browser.close()
