// The search page and the item page: thin clients of /api. Text from the store only ever
// goes into text nodes (never innerHTML), so stored content cannot inject markup.
//
// The token: read once from ?token= (then dropped from the address), kept in this origin's
// localStorage (no other port's page can read it) and sent as `Authorization: Bearer` on
// each fetch. No cookie is sent: a browser gives cookies to every port of a host.
"use strict";

const $ = (id) => document.getElementById(id);
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

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function marked(text, spans) {
  const out = document.createDocumentFragment();
  let at = 0;
  for (const [start, end] of spans) {
    if (start < at) continue;
    out.append(document.createTextNode(text.slice(at, start)));
    out.append(el("mark", {}, text.slice(start, end)));
    at = end;
  }
  out.append(document.createTextNode(text.slice(at)));
  return out;
}

function num(x, digits) { return typeof x === "number" ? x.toFixed(digits) : "-"; }
function raw(x) { return typeof x === "number" ? Number(x.toPrecision(4)).toString() : "-"; }

function shortTitle(hit) {
  if (hit.title) return hit.title;
  const words = hit.snippet.replace(/^…/, "").split(" ").slice(0, 8).join(" ");
  return words.length < hit.snippet.length ? words + " …" : words;
}

function explainTable(hit, fusion) {
  const ex = hit.explanation || {};
  const rows = [el("tr", {}, el("th", {}, "step"), el("th", {}, "rank"), el("th", {}, "score"))];
  for (const [name, r] of Object.entries(ex.retrievers || {}).sort()) {
    rows.push(el("tr", {"class": "retriever", "data-retriever": name},
      el("td", {}, name), el("td", {}, "#" + r.rank), el("td", {}, raw(r.score))));
  }
  rows.push(el("tr", {"class": "fusion"}, el("td", {}, "fusion (" + fusion + ")"), el("td", {}, ""),
    el("td", {}, num(ex.fusion_score, 5))));
  const boosts = Object.entries(ex.boosts || {});
  for (const [name, factor] of boosts) {
    rows.push(el("tr", {"class": "boost"}, el("td", {}, "boost: " + name), el("td", {}, ""),
      el("td", {}, "×" + num(factor, 3))));
  }
  if (!boosts.length) rows.push(el("tr", {"class": "boost"}, el("td", {}, "boosts"), el("td", {}, ""), el("td", {}, "none")));
  rows.push(el("tr", {"class": "final"}, el("td", {}, "final"), el("td", {}, ""), el("td", {}, num(ex.final_score, 5))));
  return el("table", {"class": "explain"}, ...rows);
}

function renderHit(hit, fusion) {
  const details = el("div", {"class": "details", hidden: ""}, explainTable(hit, fusion));
  const toggle = el("button", {"class": "link explain-toggle", type: "button"}, "explain");
  toggle.addEventListener("click", () => {
    details.hidden = !details.hidden;
    toggle.textContent = details.hidden ? "explain" : "hide explanation";
  });
  const title = el("a", {"class": "title", href: "/items/" + encodeURIComponent(hit.id)},
    shortTitle(hit));
  return el("li", {"class": "hit", "data-id": hit.id},
    el("div", {}, title, el("span", {"class": "source"}, hit.source),
      hit.location ? el("span", {"class": "loc"}, hit.location) : null),
    el("div", {"class": "snippet"}, marked(hit.snippet, hit.highlights || [])),
    el("div", {"class": "meta"}, el("span", {}, "score " + num(hit.score, 5)),
      el("span", {}, "found by " + (hit.found_by || []).join(" + ")),
      el("span", {}, hit.corpus + (hit.kind ? " · " + hit.kind : "")), toggle),
    details);
}

async function search(push) {
  const params = new URLSearchParams();
  params.set("q", $("q").value);
  for (const name of ["corpus", "kind", "path", "mode"]) {
    if ($(name).value) params.set(name, $(name).value);
  }
  if (push) history.replaceState(null, "", "/?" + params.toString());
  $("status").textContent = "searching…";
  const response = await api("/api/search?" + params.toString());
  const data = await response.json();
  const list = $("hits");
  list.replaceChildren();
  if (!response.ok) {
    $("status").textContent = "error: " + ((data.error || {}).message || response.status);
    return;
  }
  const notes = data.notes.length ? " · " + data.notes.join("; ") : "";
  $("status").replaceChildren(data.hits.length + " hits · answered by " + data.answered_by + notes + " · ",
    jsonLink(el("a", {href: "/api/search?" + params.toString(), id: "as-json"}, "JSON")));
  for (const hit of data.hits) list.append(renderHit(hit, data.fusion));
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

const ITEM_FIELDS = ["id", "corpus", "kind", "scope", "repo", "namespace", "source_url", "created_at",
  "updated_at", "expires_at", "access_count"];

async function showItem() {
  const id = decodeURIComponent(location.pathname.slice("/items/".length));
  const path = "/api/items/" + encodeURIComponent(id);
  jsonLink($("as-json")).setAttribute("href", path);
  $("back").addEventListener("click", (event) => {
    if (history.length > 1) { event.preventDefault(); history.back(); }
  });
  const response = await api(path);
  if (response.status === 401) return;
  const data = await response.json();
  if (!response.ok) {
    $("status").textContent = (data.error || {}).message || "error " + response.status;
    return;
  }
  document.title = (data.title || data.id) + " · hybridkb";
  $("item-title").textContent = data.title || data.id;
  $("item-source").textContent = data.source || "";
  $("item-loc").textContent = data.location || "";
  for (const key of ITEM_FIELDS) {
    const value = data[key];
    if (value === null || value === undefined || value === "") continue;
    $("item-fields").append(el("dt", {}, key), el("dd", {}, String(value)));
  }
  if (data.metadata && Object.keys(data.metadata).length) {
    $("item-fields").append(el("dt", {}, "metadata"), el("dd", {}, el("code", {}, JSON.stringify(data.metadata))));
  }
  $("item-text").textContent = data.text;
}

async function showSearch() {
  $("search").addEventListener("submit", (event) => { event.preventDefault(); search(true); });
  await loadCorpora();
  const params = new URLSearchParams(location.search);
  for (const name of ["q", "corpus", "kind", "path", "mode"]) {
    if (params.get(name)) $(name).value = params.get(name);
  }
  if (params.get("q")) search(false);
}

document.addEventListener("DOMContentLoaded", async () => {
  takeToken();
  if (!localStorage.getItem(TOKEN_KEY)) { showLogin(); return; }
  if ($("item-text")) await showItem(); else await showSearch();
});
