"""The search page and the item page in a real browser: Debian's Chromium driven by Playwright
against a real `hybridkb serve --http`. The pages' CSP forbids eval, so the tests wait with
selectors and `expect`, never `wait_for_function`.

Skips (with the reason) where no Chromium is installed; `.ci/run` installs it.
Never downloads a browser. HYBRIDKB_UPDATE_SCREENSHOT=1 refreshes docs/img/search-page.png
and docs/img/item-page.png.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

import httpx
import pytest
from serving import running_server

import hybridkb
from hybridkb import HashingEmbedder
from hybridkb.scoring import boosted_by

CHROMIUM = Path(os.environ.get("HYBRIDKB_CHROMIUM", "/usr/bin/chromium"))
if not CHROMIUM.exists():
    pytest.skip(f"no Chromium at {CHROMIUM}: apt-get install chromium (CI's .ci/run does)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")

TOKEN = "browser-token"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
UPDATE = os.environ.get("HYBRIDKB_UPDATE_SCREENSHOT") == "1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PWN = "document.body.dataset.pwned"
XSS = [f"<script>{PWN} = 1</script>", f"<img src=x onerror=\"{PWN} = 2\">",
       f"\"><svg onload=\"{PWN} = 3\">", f"javascript:{PWN} = 4"]

STORE_PY = '''"""Where the application keeps its data."""

import sqlite3
from pathlib import Path


def open_store(path: Path) -> sqlite3.Connection:
    """Open the local storage file (SQLite, WAL mode)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def close_store(conn: sqlite3.Connection) -> None:
    """Checkpoint the write-ahead log and close."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
'''
STORAGE_MD = """# Storage

How the application keeps its data.

## Local storage

#### One file

Local storage lives in **SQLite**: one file, `WAL` mode, no server to run.
See [the SQLite docs](https://sqlite.org/wal.html) and [this](javascript:alert(1)).

- backups: copy the file after a checkpoint
- teams that outgrow one file move to PostgreSQL

| backend | when |
|---|---|
| SQLite | one machine |
| PostgreSQL | a team |
"""
NOTES = [
    ("Use SQLite for local storage: one file, WAL mode, no server to run.", "decision", "memory", None,
     None),
    ("Lesson: rebuild the FTS index after bulk imports into local storage, or queries miss rows.",
     "lesson", "memory", None, None),
    ("The deploy checklist: run migrations, warm the cache, then switch traffic.", "wiki_page",
     "wiki", "Deploying", "https://wiki.example.com/deploying"),
]
HOSTILE = {"text": "Hostile notes " + " ".join(XSS[:2]) + " **bold** [x](" + XSS[3] + ")",
           "title": "Hostile <b>notes</b> page", "corpus": "wiki", "kind": "wiki_page"}


def _project(root: Path) -> Path:
    (root / "src" / "app").mkdir(parents=True)
    (root / "docs").mkdir()
    (root / "src" / "app" / "store.py").write_text(STORE_PY)
    (root / "docs" / "storage.md").write_text(STORAGE_MD)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("browser")
    db = tmp / "kb.db"
    with hybridkb.open(db, embedder=HashingEmbedder(64)) as kb:
        hybridkb.index_folder(kb, _project(tmp / "proj"), "code",
                              base_url="https://git.example.com/app/blob/main")
        ids = {"open_store": "code:src/app/store.py#open_store"}
        for i, (text, kind, corpus, title, url) in enumerate(NOTES):
            ids[f"note{i}"] = kb.add(text, kind=kind, corpus=corpus, title=title, source_url=url)
        assert kb.get(ids["open_store"]).metadata["symbol"] == "open_store"
    env = {**os.environ, "HYBRIDKB_TOKEN": TOKEN}

    def command(port: int) -> list[str]:
        return [sys.executable, "-m", "hybridkb.cli", "--db", str(db), "--embedder", "hashing-64",
                "serve", "--http", "--port", str(port)]

    with running_server(command, env, start_timeout=30) as port:
        yield f"http://127.0.0.1:{port}", ids


@pytest.fixture
def page(server: tuple[str, dict[str, str]]) -> Iterator[Any]:
    """A logged-in page; fails the test on a script error or a 4xx/5xx response."""
    base, _ = server
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        try:
            tab = browser.new_page(viewport={"width": 1200, "height": 900})
            tab.set_default_timeout(15_000)
            problems: list[str] = []
            tab.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
            tab.on("response", lambda r: problems.append(f"{r.status} {r.url}")
                   if r.status >= 400 and "token" not in r.url else None)
            tab.goto(base + "/")
            sync_api.expect(tab.locator("#login")).to_be_visible()  # without the token: how to get in
            assert "token" in tab.inner_text("#login")
            problems.clear()
            tab.goto(f"{base}/?token={TOKEN}")
            assert tab.url == base + "/"  # the token went to the page's storage, out of the address
            tab.wait_for_selector("#corpus option[value=code]", state="attached")
            tab.problems = problems
            yield tab
            assert problems == []
        finally:
            browser.close()


def _search(page: Any, query: str) -> Any:
    """Type `query`, press Enter, wait for its answer (the page counts the searches it shows)."""
    done = int(page.get_attribute("#hits", "data-searches") or 0)
    page.fill("#q", query)
    page.press("#q", "Enter")
    page.wait_for_selector(f"#hits[data-searches='{done + 1}']", state="attached")
    return page.locator("li.hit")


def _place(hit: Any) -> str:
    """A hit's `path:line`: beside its title, or its title when it has no other name."""
    loc = hit.locator(".head .loc")
    return str((loc if loc.count() else hit.locator("a.title")).inner_text())


def _settled(page: Any, done: int) -> None:
    page.wait_for_selector(f"#hits[data-searches='{done}']", state="attached")


def _searches(page: Any) -> int:
    return int(page.get_attribute("#hits", "data-searches") or 0)


def _shot(page: Any, name: str, tmp_path: Path) -> None:
    path = IMG / name if UPDATE else tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_each_hit_is_one_line_of_title_label_and_place_then_its_lines(
        page: Any, server: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    base, ids = server
    hits = _search(page, "local storage sqlite")
    assert hits.count() >= 5
    assert "answered by hybrid · confidence " in page.inner_text("#status")
    assert page.url.startswith(base + "/?q=local+storage+sqlite")
    assert page.get_attribute("#as-json", "href").startswith("/api/search?q=local+storage+sqlite&mode=hybrid")

    code = page.locator(f"li.hit[data-id='{ids['open_store']}']")
    head = code.locator(".head")
    assert head.locator("a.title").inner_text() == "open_store"
    assert head.locator(".tag").inner_text() == "code"  # not "code · code", not the path again
    assert head.locator(".loc").inner_text() == "src/app/store.py:7"
    assert head.inner_text().count("src/app/store.py") == 1
    box = head.bounding_box()
    assert box is not None and box["height"] < 40  # one line
    # the snippet keeps its lines, numbered from the file's
    numbers = code.locator(".snippet .line .ln").all_inner_texts()
    assert numbers[:3] == ["7", "8", "9"]
    assert code.locator(".snippet .line .lc").nth(0).inner_text() == \
        "def open_store(path: Path) -> sqlite3.Connection:"
    assert "sqlite" in [m.lower() for m in code.locator("mark").all_inner_texts()]

    for score in page.locator("li.hit .score").all_inner_texts():
        assert re.fullmatch(r"[01]\.\d\d", score), score

    memory = page.locator(f"li.hit[data-id='{ids['note0']}'] .head")
    assert memory.locator(".tag").inner_text() == "memory · decision"
    assert memory.locator(".loc").count() == 0

    # Markdown renders: the heading and bold are elements, no raw "####"; unsafe links are text
    doc = page.locator("li.hit", has=page.locator(".loc", has_text="docs/storage.md:7"))
    assert doc.locator(".head a.title").inner_text() == "Storage › Local storage › One file"
    assert doc.locator(".head .tag").inner_text() == "code · doc"
    snippet = doc.locator(".snippet")
    assert "####" not in snippet.inner_text() and "**" not in snippet.inner_text()
    assert snippet.locator(".md-h").inner_text() == "One file"
    assert snippet.locator("strong").inner_text() == "SQLite"
    assert snippet.locator("a").get_attribute("href") == "https://sqlite.org/wal.html"
    assert snippet.locator("a").count() == 1 and snippet.locator(".md-link").inner_text() == "this"
    assert snippet.locator(".md-link").get_attribute("title") == "javascript:alert(1)"
    assert snippet.locator("li").count() == 2

    _shot_with_explanation(page, ids, tmp_path)


def _shot_with_explanation(page: Any, ids: dict[str, str], tmp_path: Path) -> None:
    decision = page.locator(f"li.hit[data-id='{ids['note0']}']")
    decision.locator("button.explain-toggle").click()
    table = decision.locator("table.explain")
    assert table.is_visible()
    _shot(page, "search-page.png", tmp_path)


def test_stored_markup_is_never_markup(page: Any, server: tuple[str, dict[str, str]]) -> None:
    base, _ = server
    made = page.request.post(base + "/api/items", data=HOSTILE, headers=AUTH)
    assert made.status == 201, made.text()
    hostile_id = made.json()["id"]
    try:
        _search(page, "hostile notes page")
        hostile = page.locator(f"li.hit[data-id='{hostile_id}']")
        assert hostile.locator(".head a.title").inner_text() == "Hostile <b>notes</b> page"
        snippet = hostile.locator(".snippet").inner_text()
        assert XSS[0] in snippet and XSS[1] in snippet
        assert hostile.locator(".snippet strong").inner_text() == "bold"  # Markdown, not HTML
        assert hostile.locator("img, script, b, a[href^=javascript]").count() == 0
        hostile.locator("a.title").click()
        page.wait_for_selector("#item:not([hidden])")
        assert XSS[0] in page.inner_text("#item-text") and XSS[1] in page.inner_text("#item-text")
        assert page.locator("#item img, #item script, #item a[href^=javascript]").count() == 0
        assert page.get_attribute("body", "data-pwned") is None
    finally:
        page.request.delete(f"{base}/api/items/{quote(hostile_id, safe='')}", headers=AUTH)


def test_the_explanation_adds_up(page: Any, server: tuple[str, dict[str, str]]) -> None:
    _, ids = server
    _search(page, "local storage sqlite")
    decision = page.locator(f"li.hit[data-id='{ids['note0']}']")
    decision.locator("button.explain-toggle").click()
    table = decision.locator("table.explain")
    steps = [row.split("\t")[0] for row in table.locator("tr").all_inner_texts()[1:]]
    assert steps[:2] == ["fts", "vector"]
    assert steps[2].startswith("fusion (") and "relevance" in steps
    assert steps.index("relevance") < steps.index("boost: type") < steps.index("final score")
    value = {s: table.locator("tr").nth(i + 1).locator("td.num").inner_text() for i, s in enumerate(steps)}
    relevance, final = float(value["relevance"]), float(value["final score"])
    product = 1.0
    for step, text in value.items():
        if step.startswith("boost: "):
            product *= float(text.lstrip("×"))
    assert value["boost: type"] == "×2.000"
    assert abs(boosted_by(relevance, product) - final) < 2e-4  # the numbers add up
    how = table.locator("tr.final td.how").inner_text()
    odds = abs(boosted_by(0.5, 2.0) - 2 / 3) < 1e-9  # the rule the code applies: odds or power
    rule = "relevance's odds" if odds else "relevance ^ (1 /"
    assert rule in how and f"{product:.3f}" in how, how
    assert decision.locator(".head .score").inner_text() == f"{final:.2f}"


def test_facets_count_and_filter_on_click(page: Any, server: tuple[str, dict[str, str]]) -> None:
    _search(page, "local storage sqlite")
    total = page.locator("li.hit").count()
    facet = page.locator("#facets section.facet[data-facet='corpus']")
    counts = {b.get_attribute("data-value"): int(b.locator(".count").inner_text())
              for b in facet.locator("button.facet-value").all()}
    assert counts["code"] >= 3 and counts["memory"] == 2 and sum(counts.values()) == total
    languages = page.locator("#facets [data-facet='language'] button").all_inner_texts()
    assert any(t.startswith("python") for t in languages)
    folders = page.locator("#facets [data-facet='folder'] button.facet-value")
    assert {b.get_attribute("data-value") for b in folders.all()} == {"src/app/", "docs/"}

    expect = sync_api.expect
    done = _searches(page)
    page.locator("#facets button[data-facet='corpus'][data-value='memory']").click()
    _settled(page, done + 1)
    expect(page.locator("li.hit")).to_have_count(2)
    assert page.input_value("#corpus") == "memory" and "corpus=memory" in page.url
    active = page.locator("#facets button.facet-value.active")
    assert active.get_attribute("data-value") == "memory"
    active.click()  # again: the filter goes
    _settled(page, done + 2)
    expect(page.locator("li.hit")).to_have_count(total)
    assert page.input_value("#corpus") == ""

    page.locator("#facets button[data-facet='folder'][data-value='src/app/']").click()
    _settled(page, done + 3)
    assert page.input_value("#path") == "src/app/"
    places = [_place(h) for h in page.locator("li.hit").all()]
    assert len(places) >= 2 and all(p.startswith("src/app/") for p in places), places

    page.locator("#facets button.facet-value.active[data-facet='folder']").click()
    _settled(page, done + 4)
    expect(page.locator("li.hit")).to_have_count(total)
    page.locator("#facets button[data-facet='language'][data-value='markdown']").click()
    _settled(page, done + 5)
    assert page.input_value("#language") == "markdown"
    places = [_place(h) for h in page.locator("li.hit").all()]
    assert places and all(p.startswith("docs/storage.md") for p in places), places


def test_more_hits_extends_the_page(page: Any, server: tuple[str, dict[str, str]]) -> None:
    base, _ = server
    page.goto(base + "/?q=local+storage+sqlite&limit=3")
    _settled(page, 1)
    sync_api.expect(page.locator("li.hit")).to_have_count(3)
    pool = page.locator("#facets section.facet[data-facet='corpus'] .count").all_inner_texts()
    assert page.inner_text("#status").startswith(f"3 of {sum(map(int, pool))} hits")
    page.click("#more")
    _settled(page, 2)
    sync_api.expect(page.locator("li.hit")).to_have_count(sum(map(int, pool)))
    assert "limit=13" in page.url and page.locator("#more").count() == 0


@pytest.mark.parametrize("confidence, banner", [
    ("none", "No confident match"), ("low", "Weak matches only"), ("high", None), (None, None)])
def test_the_confidence_of_a_result_shows_as_a_banner(page: Any, confidence: str | None,
                                                      banner: str | None) -> None:
    def answer(route: Any) -> None:
        # the real answer, with the confidence under test (None: an answer without the field)
        response = route.fetch()
        data = response.json()
        data.pop("confidence", None)
        if confidence is not None:
            data["confidence"] = confidence
        route.fulfill(response=response, body=json.dumps(data))

    page.route(re.compile(r".*/api/search\?.*"), answer)
    assert _search(page, "local storage sqlite").count() > 0
    if banner is None:
        assert page.locator("#confidence").count() == 0
    else:
        assert page.locator("#confidence").is_visible() and banner in page.inner_text("#confidence")


def test_keyboard_moves_between_hits_and_opens_one(page: Any, server: tuple[str, dict[str, str]]) -> None:
    base, _ = server
    page.goto(base + "/?q=local+storage+sqlite")
    _settled(page, 1)
    page.locator("body").click(position={"x": 5, "y": 300})  # focus away from the search box
    page.keyboard.press("/")
    sync_api.expect(page.locator("#q")).to_be_focused()
    page.keyboard.press("ArrowDown")  # from the box into the list
    assert page.locator("li.hit.selected").count() == 1
    first = page.locator("li.hit").nth(0).get_attribute("data-id")
    assert page.locator("li.hit.selected").get_attribute("data-id") == first
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    second = page.locator("li.hit").nth(1).get_attribute("data-id")
    assert page.locator("li.hit.selected").get_attribute("data-id") == second
    page.keyboard.press("ArrowDown")
    third = page.locator("li.hit").nth(2).get_attribute("data-id")
    assert page.locator("li.hit.selected").get_attribute("data-id") == third
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base}/items/{quote(third, safe='')}")
    page.wait_for_selector("#item:not([hidden])")


def test_item_page_shows_its_file_a_link_dates_and_fields(
        page: Any, server: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    base, ids = server
    _search(page, "open_store sqlite connect")
    page.locator(f"li.hit[data-id='{ids['open_store']}'] a.title").click()
    page.wait_for_selector("#item:not([hidden])")
    assert page.url == f"{base}/items/{quote(ids['open_store'], safe='')}"
    assert page.inner_text("#item-title") == "open_store"
    assert page.inner_text("#item-head .loc") == "src/app/store.py:7-11"
    # the lines around it, from the indexed file, its own set apart
    lines = page.locator("#item-body .line")
    assert lines.nth(0).locator(".ln").inner_text() == "1"
    own = page.locator("#item-body .line.own .lc").all_inner_texts()
    assert own[0] == "def open_store(path: Path) -> sqlite3.Connection:" and own[-1] == "    return conn"
    assert "def close_store" in page.inner_text("#item-body")
    assert "read from the file" in page.inner_text("#item-context-note")
    # readable dates, a table of fields, the indexer's own keys behind a toggle
    created = page.inner_text("#item-fields tr[data-key='created_at'] td")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d \((\d+ seconds?|\d+ minutes?) ago\)", created), created
    assert page.inner_text("#item-fields tr[data-key='language'] td") == "python"
    assert page.locator("#item-fields tr[data-key='file_hash']").count() == 0
    assert not page.locator("#item-internal-fields").is_visible()
    assert page.get_attribute("a#item-url", "href") == \
        "https://git.example.com/app/blob/main/src/app/store.py#L7-L11"
    _shot(page, "item-page.png", tmp_path)
    page.locator("#item-internal summary").click()
    assert page.locator("#item-internal-fields tr[data-key='file_hash']").is_visible()
    assert page.locator("#item-internal-fields tr[data-key='chunker']").is_visible()
    assert "{" not in page.inner_text("#item-fields")  # no raw JSON
    json_link = page.get_attribute("#as-json", "href")
    assert json_link.startswith("/api/items/") and "context=" in json_link
    # the favicon is served
    for icon in ("/favicon.ico", page.get_attribute("link[rel=icon]", "href")):
        answer = page.request.get(base + icon)
        assert answer.status == 200 and answer.headers["content-type"].startswith("image/svg+xml")

    # a page's source_url is a link; a Markdown item renders with its file behind a toggle
    page.goto(f"{base}/items/{quote(ids['note2'], safe='')}")
    page.wait_for_selector("#item:not([hidden])")
    assert page.get_attribute("a#item-url", "href") == "https://wiki.example.com/deploying"
    assert page.locator("#item-context-box").is_hidden()
    doc = "code:docs/storage.md#storage/local-storage/one-file"
    page.goto(f"{base}/items/{quote(doc, safe='')}")
    page.wait_for_selector("#item:not([hidden])")
    assert page.locator("#item-text .md-h").inner_text() == "One file"
    assert page.locator("#item-text table.md-table tr").count() == 3
    assert "####" not in page.inner_text("#item-text")
    assert page.locator("#item-context-box").is_visible()
    assert "read from the file" in page.inner_text("#item-context-summary")

    # an unknown id: the page says so
    page.problems.clear()
    page.goto(f"{base}/items/no-such-id")
    page.wait_for_selector("#status.error")
    assert "no item with id" in page.inner_text("#status")
    page.problems[:] = [p for p in page.problems if not p.startswith("404 ")]


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
                page.goto(f"{base}/items/{quote(ids['open_store'], safe='')}")
                page.wait_for_selector("#item-text:not(:empty)")
                assert "sqlite3.connect(path)" in page.inner_text("#item-text")
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
        item = quote(ids["open_store"], safe="")
        for path in ("/api/stats", f"/api/items/{item}", "/api/search?q=sqlite"):
            replay = httpx.get(base + path, headers=headers)
            assert replay.status_code == 401, (sent, path, replay.text)
        replay = httpx.post(base + "/api/items", headers=headers, json={"text": "planted"})
        assert replay.status_code in (401, 403), (sent, replay.text)
        page_html = httpx.get(f"{base}/items/{item}", headers=headers).text
        assert "sqlite3.connect" not in page_html  # pages are shells: no stored text in them


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
            page.goto(f"{base}/?token={TOKEN}&q=document+needle")  # the snippet from the first payload
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
