// DOM builders shared by the search page and the item pages. Stored text only ever becomes
// text nodes (never innerHTML): Markdown is read by a small renderer that makes its own
// elements, links keep only http(s) and mailto targets, and images show their alt text.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// text[start:end) into `parent`, the parts inside `spans` ([s, e) over all of text) in <mark>.
function appendMarked(parent, text, start, end, spans) {
  let at = start;
  for (const [s, e] of spans || []) {
    if (e <= at || s >= end) continue;
    const from = Math.max(s, at), to = Math.min(e, end);
    if (from > at) parent.append(document.createTextNode(text.slice(at, from)));
    parent.append(el("mark", {}, text.slice(from, to)));
    at = to;
  }
  if (at < end) parent.append(document.createTextNode(text.slice(at, end)));
}

function marked(text, spans) {
  const out = document.createDocumentFragment();
  appendMarked(out, text, 0, text.length, spans);
  return out;
}

function fixed(x, digits) { return typeof x === "number" && isFinite(x) ? x.toFixed(digits) : "-"; }
function raw(x) { return typeof x === "number" ? Number(x.toPrecision(4)).toString() : "-"; }

// -- Markdown: a safe subset (headings, paragraphs, lists, quotes, fences, tables, rules,
// inline code, bold, italics, links) read line by line; offsets into the source are kept
// so the query's marks land on the right words.

const INLINE = /`([^`\n]+)`|\*\*(?=\S)(.+?)\*\*|__(?=\S)(.+?)__|(?<![\w*])\*(?=[^\s*])([^*\n]+?)\*(?![\w*])|(?<![\w_])_(?=[^\s_])([^_\n]+?)_(?![\w_])|(!?)\[([^\]\n]*)\]\(((?:[^()\s]|\([^()\s]*\))+)(?:\s+"[^"\n]*")?\)/dg;

function safeHref(url) {
  return /^(https?:\/\/|mailto:)/i.test(url) ? url : null;
}

function appendInline(parent, text, start, end, spans) {
  const part = text.slice(0, end);
  let at = start;
  INLINE.lastIndex = start;
  let m;
  while ((m = INLINE.exec(part)) !== null) {
    const [mStart, mEnd] = m.indices[0];
    if (mStart > at) appendMarked(parent, text, at, mStart, spans);
    const group = (i) => m.indices[i];
    const inner = (node, i) => {
      const [s, e] = group(i);
      const saved = INLINE.lastIndex;
      appendInline(node, text, s, e, spans);
      INLINE.lastIndex = saved;
      parent.append(node);
    };
    if (m[1] !== undefined) {
      const code = el("code");
      appendMarked(code, text, group(1)[0], group(1)[1], spans);
      parent.append(code);
    } else if (m[2] !== undefined) inner(el("strong"), 2);
    else if (m[3] !== undefined) inner(el("strong"), 3);
    else if (m[4] !== undefined) inner(el("em"), 4);
    else if (m[5] !== undefined) inner(el("em"), 5);
    else if (m[6] === "!") {
      const alt = el("span", {"class": "md-img", title: "image: " + m[8]});
      appendMarked(alt, text, group(7)[0], group(7)[1], spans);
      parent.append(alt);
    } else {
      const href = safeHref(m[8]);
      const link = href ? el("a", {href, rel: "noopener noreferrer", target: "_blank"})
        : el("span", {"class": "md-link", title: m[8]});
      inner(link, 7);
    }
    at = mEnd;
  }
  if (at < end) appendMarked(parent, text, at, end, spans);
}

const BLOCK = {
  fence: /^\s{0,3}(```|~~~)/,
  heading: /^\s{0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/,
  rule: /^\s{0,3}([-*_])(\s*\1){2,}\s*$/,
  quote: /^\s{0,3}>\s?/,
  bullet: /^(\s*)([-*+])\s+/,
  ordered: /^(\s*)(\d{1,9})[.)]\s+/,
  table: /^\s*\|.*\|\s*$/,
  tableRule: /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/,
};

// Markdown `text` as a fragment; `level` shifts headings (a snippet's "#" is an h4).
function markdown(text, spans, level) {
  const out = document.createDocumentFragment();
  const lines = [];
  let pos = 0;
  for (const line of text.split("\n")) { lines.push([pos, line]); pos += line.length + 1; }
  let i = 0, para = null, list = null;
  const close = () => { para = null; list = null; };
  while (i < lines.length) {
    const [at, line] = lines[i];
    let m;
    if (!line.trim()) { close(); i++; continue; }
    if ((m = BLOCK.fence.exec(line))) {
      close();
      const pre = el("pre", {"class": "md-code"}), code = el("code");
      pre.append(code);
      i++;
      let first = true;
      while (i < lines.length && !lines[i][1].trimStart().startsWith(m[1])) {
        if (!first) code.append("\n");
        appendMarked(code, text, lines[i][0], lines[i][0] + lines[i][1].length, spans);
        first = false; i++;
      }
      i++;
      out.append(pre);
      continue;
    }
    if ((m = BLOCK.heading.exec(line))) {
      close();
      const h = el("h" + Math.min(6, m[1].length + (level || 0)), {"class": "md-h"});
      const title = m[2] || "";
      const s = at + (title ? line.indexOf(title, line.indexOf("#") + m[1].length) : line.length);
      appendInline(h, text, s, s + title.length, spans);
      out.append(h); i++; continue;
    }
    if (BLOCK.rule.test(line)) { close(); out.append(el("hr")); i++; continue; }
    if (BLOCK.table.test(line) && i + 1 < lines.length && BLOCK.tableRule.test(lines[i + 1][1])) {
      close();
      const table = el("table", {"class": "md-table"});
      const row = ([rowAt, rowLine], cellTag) => {
        const tr = el("tr");
        let s = rowLine.indexOf("|") + 1;
        const last = rowLine.lastIndexOf("|");
        while (s <= last) {
          let e = rowLine.indexOf("|", s);
          if (e === -1 || e > last) break;
          const cell = el(cellTag);
          const cellText = rowLine.slice(s, e), lead = cellText.length - cellText.trimStart().length;
          appendInline(cell, text, rowAt + s + lead, rowAt + s + cellText.trimEnd().length, spans);
          tr.append(cell); s = e + 1;
        }
        table.append(tr);
      };
      row(lines[i], "th"); i += 2;
      while (i < lines.length && BLOCK.table.test(lines[i][1])) { row(lines[i], "td"); i++; }
      out.append(table);
      continue;
    }
    if ((m = BLOCK.quote.exec(line))) {
      close();
      const q = el("blockquote");
      appendInline(q, text, at + m[0].length, at + line.length, spans);
      out.append(q); i++; continue;
    }
    const item = BLOCK.bullet.exec(line) || BLOCK.ordered.exec(line);
    if (item) {
      const tag = BLOCK.bullet.test(line) ? "ul" : "ol";
      if (!list || list.tagName.toLowerCase() !== tag) {
        list = el(tag, tag === "ol" && item[2] !== "1" ? {start: item[2]} : {});
        out.append(list);
      }
      para = null;
      const li = el("li", item[1].length >= 2 ? {"class": "nested"} : {});
      appendInline(li, text, at + item[0].length, at + line.length, spans);
      list.append(li); i++; continue;
    }
    if (list && /^\s{2,}\S/.test(line)) {  // a list item's continuation line
      const li = list.lastElementChild;
      li.append(" ");
      appendInline(li, text, at + line.length - line.trimStart().length, at + line.length, spans);
      i++; continue;
    }
    list = null;
    if (!para) { para = el("p"); out.append(para); } else para.append(" ");
    appendInline(para, text, at + line.length - line.trimStart().length, at + line.length, spans);
    i++;
  }
  return out;
}

// Lines numbered from `first` (a string, or a list in which null is a line not known);
// `own` = [start, end] lines to set apart (an item within its file).
function codeLines(text, spans, first, own) {
  const pre = el("pre", {"class": "code-lines"});
  const lines = Array.isArray(text) ? text : text.split("\n");
  const source = Array.isArray(text) ? null : text;
  let pos = 0;
  lines.forEach((line, i) => {
    const n = first + i;
    const mine = own && n >= own[0] && n <= own[1];
    const cls = "line" + (mine ? " own" : "") + (line === null ? " gap" : "");
    const row = el("span", {"class": cls, "data-line": String(n)},
      el("span", {"class": "ln", "aria-hidden": "true"}, String(n)));
    const code = el("span", {"class": "lc"});
    if (line === null) code.append("⋯");
    else if (source === null) code.append(line);
    else appendMarked(code, source, pos, pos + line.length, spans);
    row.append(code);
    pre.append(row);
    pos += (line || "").length + 1;
  });
  return pre;
}

// A hit's or item's source label without what its line already says: "[code: src/a.py › f]" in corpus
// "code" is "code"; "[memory: decision]" is "memory · decision". A label from a corpus's
// own template is shown as it is.
function shortLabel(hit) {
  const label = hit.source || "";
  const m = /^\[([^:\]]+): (.*)\]$/.exec(label);
  const said = [hit.title, hit.id, hit.kind].filter(Boolean);
  const prefixes = [hit.corpus, "memory", "wiki", "review", "code", "doc"];
  if (label && (!m || !said.includes(m[2]) || !prefixes.includes(m[1]))) return label;
  const kindWord = m && m[2] === hit.kind ? hit.kind : (m ? m[1] : hit.kind);
  const parts = [hit.corpus];
  if (kindWord && kindWord.toLowerCase() !== String(hit.corpus).toLowerCase()) parts.push(kindWord);
  return parts.join(" · ");
}

// A heading path as a title: "Guide > `min_score`" -> "Guide › min_score" (code marks dropped).
function headingText(heading) {
  return heading.replaceAll(" > ", " › ").replace(/`([^`]+)`/g, "$1");
}

function isMarkdown(metadata, path) {
  const language = (metadata || {}).language;
  if (language) return language === "markdown";
  return !path || /\.(md|markdown|mdx)$/i.test(path);
}

// -- dates: "2026-11-29 14:05 (3 hours ago)" in the reader's time zone; the ISO form on hover.

function pad(n) { return String(n).padStart(2, "0"); }

function ago(seconds) {
  const future = seconds < 0, s = Math.abs(seconds);
  const [n, unit] = s < 90 ? [Math.round(s), "second"] : s < 5400 ? [Math.round(s / 60), "minute"]
    : s < 129600 ? [Math.round(s / 3600), "hour"] : s < 86400 * 60 ? [Math.round(s / 86400), "day"]
    : s < 86400 * 730 ? [Math.round(s / (86400 * 30.44)), "month"] : [Math.round(s / (86400 * 365.25)), "year"];
  const words = n + " " + unit + (n === 1 ? "" : "s");
  return future ? "in " + words : words + " ago";
}

function readableDate(iso) {
  const d = new Date(iso);
  if (!iso || isNaN(d)) return document.createTextNode(iso ? String(iso) : "-");
  const text = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
    pad(d.getHours()) + ":" + pad(d.getMinutes());
  return el("time", {datetime: d.toISOString(), title: iso},
    text + " (" + ago((Date.now() - d.getTime()) / 1000) + ")");
}
