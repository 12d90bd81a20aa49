// The search page (and, with item.js, the item page): thin clients of /api; render.js builds
// the DOM (stored text only ever goes into text nodes, never innerHTML).
//
// The token: read once from ?token= (then dropped from the address), kept in this origin's
// localStorage (no other port's page can read it) and sent as `Authorization: Bearer` on
// each fetch. No cookie is sent: a browser gives cookies to every port of a host.
"use strict";

const TOKEN_KEY = "hybridkb_token";

function takeToken() {
  const url = new URL(location.href);
  const given = url.searchParams.get("token");
  if (given !== null) {
    localStorage.setItem(TOKEN_KEY, given);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
}

function showLogin() {
  if ($("login")) $("login").hidden = false;
  if ($("status")) $("status").textContent = "";
}

async function api(path) {
  const token = localStorage.getItem(TOKEN_KEY);
  const response = await fetch(path, {
    credentials: "omit", headers: token ? {Authorization: "Bearer " + token} : {}});
  if (response.status === 401) {
    localStorage.removeItem(TOKEN_KEY);  // a wrong or outdated token: ask again
    showLogin();
  }
  return response;
}

// A link to an /api address opens its JSON: fetched with the token, shown as a file.
function jsonLink(link) {
  link.addEventListener("click", async (event) => {
    event.preventDefault();
    const response = await api(link.getAttribute("href"));
    const text = JSON.stringify(await response.json(), null, 2);
    location.href = URL.createObjectURL(new Blob([text], {type: "application/json"}));
  });
  return link;
}

const FIELDS = ["q", "corpus", "kind", "language", "path", "mode"];
const FACET_FIELDS = {corpus: "corpus", kind: "kind", language: "language", folder: "path"};

// -- one hit ---------------------------------------------------------------------------------

// The title a hit is known by: a file chunk's symbol or heading (its path goes to `path:line`),
// else its title, else its text's first words. `withLoc`: whether `path:line` follows apart.
function hitTitle(hit) {
  const meta = hit.metadata || {};
  if (hit.path) {
    const name = meta.symbol || meta.heading;
    if (typeof name === "string" && name) return {text: headingText(name), withLoc: true};
    return {text: hit.location || hit.path, withLoc: false};
  }
  if (hit.title) return {text: hit.title, withLoc: Boolean(hit.location)};
  const flat = hit.snippet.replace(/^…/, "").replace(/\s+/g, " ").trim();
  const words = flat.split(" ").slice(0, 9).join(" ");
  return {text: words.length < flat.length ? words + " …" : words, withLoc: Boolean(hit.location)};
}

function hitSnippet(hit) {
  const spans = hit.highlights || [];
  const meta = hit.metadata || {};
  if (typeof hit.snippet_line === "number" && !isMarkdown(meta, hit.path)) {
    return el("div", {"class": "snippet code"}, codeLines(hit.snippet, spans, hit.snippet_line, null));
  }
  const box = el("div", {"class": "snippet md"});
  box.append(markdown(hit.snippet, spans, 3));
  return box;
}

// Each step of the hit's explanation, in the order the API gives them, so the numbers
// can be followed: retrievers -> fusion -> (calibration) -> relevance -> boosts -> final.
function explainTable(hit, fusion) {
  const ex = hit.explanation || {};
  const row = (cls, step, how, value) => el("tr", {"class": cls}, el("td", {}, step),
    el("td", {"class": "how"}, how), el("td", {"class": "num"}, value));
  const rows = [el("tr", {}, el("th", {}, "step"), el("th", {}, "how"), el("th", {}, "value"))];
  let product = 1;
  for (const [key, value] of Object.entries(ex)) {
    if (key === "retrievers") {
      for (const [name, r] of Object.entries(value || {}).sort()) {
        rows.push(row("retriever", name, "rank #" + r.rank + " · raw score " + raw(r.score), ""));
      }
    } else if (key === "fusion_score") {
      rows.push(row("fusion", "fusion (" + fusion + ")", "the retrievers' scores combined", fixed(value, 4)));
    } else if (key === "relevance") {
      rows.push(row("relevance", "relevance", "the score before boosts, in [0, 1]", fixed(value, 4)));
    } else if (key === "boosts") {
      const boosts = Object.entries(value || {});
      if (!boosts.length) rows.push(row("boost", "boosts", "none apply", "×1"));
      for (const [name, factor] of boosts) {
        product *= factor;
        rows.push(row("boost", "boost: " + name, "a factor", "×" + fixed(factor, 3)));
      }
    } else if (key === "final_score") {
      rows.push(row("final", "final score", boostRule(ex.relevance, product, value), fixed(value, 4)));
    } else if (value && typeof value === "object") {
      const parts = Object.entries(value).map(([k, v]) => k + " " + (typeof v === "number" ? raw(v) : v));
      if (parts.length) rows.push(row("step", key, parts.join(" · "), ""));
    } else if (typeof value === "number") {
      rows.push(row("step", key.replaceAll("_", " "), "", fixed(value, 4)));
    }
  }
  return el("table", {"class": "explain"}, ...rows);
}

// How the boosts' product f turned the relevance r into the final score, written as the
// rule that reproduces it (docs/scoring.md): r's odds times f, or r ^ (1 / f).
function boostRule(r, f, final) {
  if (f === 1) return "the relevance";
  const p = fixed(f, 3);
  if (typeof r === "number" && typeof final === "number" && r > 0 && r < 1) {
    const odds = Math.abs(f * r / (1 - r + f * r) - final), power = Math.abs(Math.pow(r, 1 / f) - final);
    if (Math.min(odds, power) < 1e-6) {
      return odds <= power ? "relevance's odds × " + p + ": f·r / (1 − r + f·r)" : "relevance ^ (1 / " + p + ")";
    }
  }
  return "relevance boosted × " + p;
}

function renderHit(hit, fusion) {
  const details = el("div", {"class": "details", hidden: ""}, explainTable(hit, fusion));
  const toggle = el("button", {"class": "link explain-toggle", type: "button"}, "explain");
  toggle.addEventListener("click", () => {
    details.hidden = !details.hidden;
    toggle.textContent = details.hidden ? "explain" : "hide explanation";
  });
  const title = hitTitle(hit);
  const head = el("div", {"class": "head"},
    el("a", {"class": "title", href: "/items/" + encodeURIComponent(hit.id), title: hit.source}, title.text),
    el("span", {"class": "tag"}, shortLabel(hit)),
    title.withLoc && hit.location ? el("span", {"class": "loc"}, hit.location) : null,
    el("span", {"class": "score", title: "relevance in [0, 1] after boosts"}, fixed(hit.score, 2)));
  const alternates = (hit.alternate_sources || []).map((a) => a.source || a.id);
  return el("li", {"class": "hit", "data-id": hit.id}, head, hitSnippet(hit),
    el("div", {"class": "meta"}, el("span", {}, "found by " + (hit.found_by || []).join(" + ")),
      alternates.length ? el("span", {}, "also in " + alternates.join(", ")) : null, toggle),
    details);
}

// -- the result around the hits -----------------------------------------------------------

function confidenceBanner(data) {
  if (!data.hits.length) {
    return el("div", {"class": "banner none", id: "confidence"}, "Nothing found for this query.");
  }
  if (data.confidence === "none") {
    return el("div", {"class": "banner none", id: "confidence"},
      el("strong", {}, "No confident match. "),
      "Nothing here looks like an answer; these are the nearest items the store holds.");
  }
  if (data.confidence === "low") {
    return el("div", {"class": "banner low", id: "confidence"},
      el("strong", {}, "Weak matches only. "), "Check the hits before relying on them.");
  }
  return null;
}

function renderFacets(data) {
  const aside = $("facets");
  aside.replaceChildren();
  for (const [facet, field] of Object.entries(FACET_FIELDS)) {
    const current = $(field).value;
    const values = (data.facets || {})[facet] || [];
    if (!values.length && !current) continue;
    const list = el("ul");
    const shown = values.some((v) => v.value === current) || !current ? values
      : [{value: current, count: 0}, ...values];
    for (const {value, count} of shown) {
      const active = value === current;
      const button = el("button", {type: "button", "class": "facet-value" + (active ? " active" : ""),
        "data-facet": facet, "data-value": value, "aria-pressed": active ? "true" : "false",
        title: active ? "remove this filter" : "only " + value},
        el("span", {"class": "fv"}, value), el("span", {"class": "count"}, active ? "×" : String(count)));
      button.addEventListener("click", () => {
        $(field).value = active ? "" : value;
        pageLimit = PAGE;
        search(true);
      });
      list.append(el("li", {}, button));
    }
    aside.append(el("section", {"class": "facet", "data-facet": facet}, el("h3", {}, facet), list));
  }
  if (aside.childElementCount && data.facet_pool !== undefined) {
    aside.append(el("p", {"class": "muted small"}, "counts over the first " + data.facet_pool + " hits"));
  }
}

function renderStatus(data, params) {
  const pool = data.facet_pool;
  const count = pool !== undefined && pool > data.hits.length
    ? data.hits.length + " of " + (pool >= 100 ? "100+" : pool) + " hits" : data.hits.length + " hits";
  const notes = data.notes.length ? " · " + data.notes.join("; ") : "";
  const confidence = data.confidence ? " · confidence " + data.confidence : "";
  $("status").replaceChildren(count + " · answered by " + data.answered_by + confidence + notes + " · ",
    jsonLink(el("a", {href: "/api/search?" + params.toString(), id: "as-json"}, "JSON")));
}

// -- keyboard: / focuses the search box, j/k or the arrows move between hits, Enter opens --

let selected = -1;

function hitNodes() { return Array.from(document.querySelectorAll("#hits > li.hit")); }

function selectHit(i) {
  const nodes = hitNodes();
  if (!nodes.length) return;
  selected = Math.max(0, Math.min(nodes.length - 1, i));
  nodes.forEach((node, j) => node.classList.toggle("selected", j === selected));
  const link = nodes[selected].querySelector("a.title");
  link.focus({preventScroll: true});
  nodes[selected].scrollIntoView({block: "nearest"});
}

function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const target = event.target;
  const typing = target.matches && target.matches("input, select, textarea");
  if (typing) {
    if (target.id === "q" && event.key === "ArrowDown" && hitNodes().length) {
      event.preventDefault();
      selectHit(0);
    } else if (event.key === "Escape") {
      target.blur();
    }
    return;
  }
  if (event.key === "/") {
    event.preventDefault();
    $("q").focus();
    $("q").select();
  } else if (event.key === "j" || event.key === "ArrowDown") {
    event.preventDefault();
    selectHit(selected + 1);
  } else if (event.key === "k" || event.key === "ArrowUp") {
    event.preventDefault();
    selectHit(selected - 1);
  } else if (event.key === "Enter" && selected >= 0 && !target.matches("a, button")) {
    event.preventDefault();
    hitNodes()[selected].querySelector("a.title").click();
  }
}

// -- talking to the API ------------------------------------------------------------------------

const PAGE = 10, MAX_PAGE = 100;
let pageLimit = PAGE;  // grows by PAGE with each "more hits"; a new search starts again

function searchParams() {
  const params = new URLSearchParams();
  params.set("q", $("q").value);
  for (const name of FIELDS.slice(1)) {
    if ($(name).value) params.set(name, $(name).value);
  }
  if (pageLimit !== PAGE) params.set("limit", String(pageLimit));
  return params;
}

function moreButton(data) {
  const more = data.facet_pool !== undefined && data.facet_pool > data.hits.length && pageLimit < MAX_PAGE;
  if (!more) return null;
  const button = el("button", {type: "button", "class": "more", id: "more"}, "more hits");
  button.addEventListener("click", () => {
    pageLimit = Math.min(MAX_PAGE, pageLimit + PAGE);
    search(true);
  });
  return button;
}

async function search(push) {
  const params = searchParams();
  if (push) history.replaceState(null, "", "/?" + params.toString());
  params.set("facets", "true");
  $("status").textContent = "searching…";
  const response = await api("/api/search?" + params.toString());
  const data = await response.json();
  const list = $("hits");
  list.replaceChildren();
  selected = -1;
  $("banner").replaceChildren();
  if (!response.ok) {
    $("status").textContent = "error: " + ((data.error || {}).message || response.status);
    $("facets").replaceChildren();
    shown();
    return;
  }
  renderStatus(data, params);
  const banner = confidenceBanner(data);
  if (banner) $("banner").append(banner);
  renderFacets(data);
  for (const hit of data.hits) list.append(renderHit(hit, data.fusion));
  $("more-box").replaceChildren(...[moreButton(data)].filter(Boolean));
  shown();
}

// How many answers the list has shown: a test waits for the next one by selector (the
// page's CSP leaves it no eval to poll with).
function shown() {
  const list = $("hits");
  list.dataset.searches = String(Number(list.dataset.searches || 0) + 1);
}

async function loadCorpora() {
  const response = await api("/api/corpora");
  if (!response.ok) return;
  const data = await response.json();
  for (const c of data.corpora) {
    $("corpus").append(el("option", {value: c.name}, c.name + " (" + c.count + ")"));
  }
  const total = data.corpora.reduce((n, c) => n + c.count, 0);
  $("store").textContent = total + " items" + (data.vector_search ? "" : " · full text only");
}

async function showSearch() {
  $("search").addEventListener("submit", (event) => {
    event.preventDefault();
    pageLimit = PAGE;
    search(true);
  });
  document.addEventListener("keydown", onKey);
  await loadCorpora();
  const params = new URLSearchParams(location.search);
  const limit = Number(params.get("limit"));
  if (Number.isInteger(limit) && limit >= 1 && limit <= MAX_PAGE) pageLimit = limit;
  for (const name of FIELDS) {
    if (params.get(name)) $(name).value = params.get(name);
  }
  if (params.get("q")) search(false);
}

document.addEventListener("DOMContentLoaded", async () => {
  takeToken();
  if (!localStorage.getItem(TOKEN_KEY)) { showLogin(); return; }
  if ($("item-text")) await showItem(); else await showSearch();  // showItem: item.js
});
