// An item page: a thin client of /api/items/ID (with the lines around the item in its file);
// app.js fetches with the token and calls showItem, render.js builds the DOM (stored text
// only ever goes into text nodes).
"use strict";

const CONTEXT_LINES = 12;
const FIELD_ORDER = ["corpus", "kind", "scope", "repo", "namespace", "created_at", "updated_at",
  "expires_at", "last_accessed_at", "access_count", "stale"];
const DATES = new Set(["created_at", "updated_at", "expires_at", "last_accessed_at"]);
// Keys `hybridkb index` keeps for itself, and those the page shows elsewhere.
const INTERNAL = new Set(["file_hash", "chunker", "chunks"]);
const SHOWN = new Set(["path", "start_line", "end_line", "symbol", "heading"]);

function itemId() {
  return decodeURIComponent(location.pathname.slice("/items/".length));
}

function cellValue(key, value) {
  if (DATES.has(key)) return readableDate(value);
  if (value !== null && typeof value === "object") return el("code", {}, JSON.stringify(value));
  return document.createTextNode(String(value));
}

function fieldRows(table, entries) {
  for (const [key, value] of entries) {
    table.append(el("tr", {"data-key": key}, el("th", {}, key.replaceAll("_", " ")),
      el("td", {}, cellValue(key, value))));
  }
}

function sourceLink(url) {
  if (/^https?:\/\//i.test(url)) {
    return el("a", {href: url, rel: "noopener noreferrer", target: "_blank", id: "item-url"}, "source ↗");
  }
  return el("span", {id: "item-url", "class": "muted"}, "source ",
    el("code", {title: "browsers do not follow file links from a web page"}, url));
}

function itemTitle(item) {
  const meta = item.metadata || {};
  const name = meta.symbol || meta.heading;
  if (meta.path && typeof name === "string" && name) return headingText(name);
  return item.title || item.location || item.id;
}

function lineRange(item) {
  const meta = item.metadata || {};
  if (!meta.path || !meta.start_line) return item.location;
  const end = meta.end_line && meta.end_line !== meta.start_line ? "-" + meta.end_line : "";
  return meta.path + ":" + meta.start_line + end;
}

// The main view: code with its file's surrounding lines (its own set apart), or the text
// as Markdown with those lines behind a toggle.
function renderText(item) {
  const meta = item.metadata || {};
  const ctx = item.context;
  const code = Boolean(meta.path) && !isMarkdown(meta, meta.path);
  const box = $("item-text");
  if (code && ctx) {
    box.append(codeLines(ctx.lines, [], ctx.first, [ctx.start_line, ctx.end_line]));
  } else if (code && meta.start_line) {
    box.append(codeLines(item.text, [], meta.start_line, null));
  } else {
    box.append(el("div", {"class": "md text"}, markdown(item.text, [], 1)));
  }
  box.firstElementChild.id = "item-body";
  if (ctx && !code) {
    $("item-context").append(codeLines(ctx.lines, [], ctx.first, [ctx.start_line, ctx.end_line]));
    $("item-context-box").hidden = false;
  }
  if (ctx) {
    const last = ctx.first + ctx.lines.length - 1;
    const where = ctx.source === "file" ? "read from the file" : "pieced from its stored chunks (the file changed or is not readable here)";
    const summary = "lines " + ctx.first + "–" + last + " of " + ctx.path + ", " + where;
    if (code) box.prepend(el("p", {"class": "muted small", id: "item-context-note"}, summary));
    else $("item-context-summary").textContent = "the file around it: " + summary;
  }
}

function render(item) {
  document.title = itemTitle(item) + " · hybridkb";
  $("item-title").textContent = itemTitle(item);
  $("item-head").append(el("span", {"class": "tag", id: "item-source", title: item.source}, shortLabel(item)));
  const range = lineRange(item);
  if (range) $("item-head").append(el("span", {"class": "loc", id: "item-loc"}, range));
  if (item.source_url) $("item-head").append(sourceLink(item.source_url));
  renderText(item);
  const meta = item.metadata || {};
  fieldRows($("item-fields"), FIELD_ORDER
    .filter((k) => item[k] !== null && item[k] !== undefined && item[k] !== "" && item[k] !== false
      && !(k === "access_count" && item[k] === 0) && !(k === "updated_at" && item[k] === item.created_at))
    .map((k) => [k, item[k]]));
  fieldRows($("item-fields"), Object.entries(meta).filter(([k]) => !INTERNAL.has(k) && !SHOWN.has(k)));
  const internal = [["id", item.id], ...Object.entries(meta).filter(([k]) => INTERNAL.has(k))];
  fieldRows($("item-internal-fields"), internal);
  $("item-internal").hidden = false;
  $("item").hidden = false;
  $("status").textContent = "";
  const own = document.querySelector("#item-body .line.own");
  if (own) {  // the item's first line a few lines below the top of its box
    const box = own.parentElement;
    box.scrollTop += own.getBoundingClientRect().top - box.getBoundingClientRect().top - 3 * own.offsetHeight;
  }
}

function onItemKey(event) {
  if (event.key === "/" && !event.target.matches("input, select, textarea")) {
    event.preventDefault();
    location.href = "/";
  }
}

async function showItem() {
  document.addEventListener("keydown", onItemKey);
  const url = "/api/items/" + encodeURIComponent(itemId()) + "?context=" + CONTEXT_LINES;
  jsonLink($("as-json")).setAttribute("href", url);
  const response = await api(url);
  if (response.status === 401) return;
  const data = await response.json();
  if (!response.ok) {
    $("status").textContent = (data.error || {}).message || "error " + response.status;
    $("status").classList.add("error");
    return;
  }
  render(data);
}
