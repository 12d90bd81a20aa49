"""Results out: the JSON file, a markdown report, and the `## Speed` section of
docs/benchmarks.md (only the part between its generated-table markers)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

BEGIN = "<!-- speed:begin (written by python -m benchmarks) -->"
END = "<!-- speed:end -->"
HEADING = "## Speed"

# Targets for the embedded store at 100k items, p50, query embedding excluded: issue
# #15's (the derived indexes), then the first ones (issue #10's), kept to show they hold.
TARGET_ITEMS = 100_000
TARGET_FTS_MS = 2.0
TARGET_VECTOR_MS = 5.0
TARGET_HYBRID_MS = 5.0
TARGET_INGEST_PER_S = 3_000
TARGET_OVERHEAD = 1.5  # the store's p50 over the bare engine's (tantivy; the vector base)
FIRST_HYBRID_MS = 25.0
FIRST_VECTOR_RATIO = 2.0
FIRST_FTS_MS = 5.0


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _row(label: str, fig: dict[str, Any], base: str, base_fig: dict[str, Any] | None) -> str:
    r = fig.get("ratio", {})
    return (f"| {label} | {_ms(fig['p50_ms'])} | {_ms(fig['p95_ms'])} | {_ms(fig['p99_ms'])} | "
            f"{base} | {_ms(base_fig['p50_ms']) if base_fig else '-'} | "
            f"{_x(r.get('p50'))} / {_x(r.get('p95'))} / {_x(r.get('p99'))} |")


def _vs(fig: dict[str, Any], label: str, other: dict[str, Any] | None) -> str:
    """A row for an engine measured beside the store, with the store's p50 over its p50."""
    if other is None:
        return ""
    return (f"| {label} | {_ms(other['p50_ms'])} | {_ms(other['p95_ms'])} | {_ms(other['p99_ms'])} "
            f"| store / this, p50 | - | {_x(fig['p50_ms'] / max(other['p50_ms'], 1e-9))} |")


def _engine_rows(lat: dict[str, Any]) -> list[str]:
    """The previous path (FTS5) and the bare engines under the derived indexes, if measured."""
    base, wo = lat["baselines"], lat["without_embedding"]
    rows = [_vs(wo["fts"], "FTS5 bm25(), the previous path", base.get("fts5")),
            _vs(wo["fts"], "tantivy index alone (bare engine)", base.get("tantivy"))]
    u = base.get("usearch")
    if u is not None:
        rows.append(_vs(wo["vector"], f"{u['what']}, recall@10 {u['recall@10']:.3f}", u))
    if base.get("fts5+numpy") is not None:
        rows.append(_vs(wo["hybrid"], "FTS5 + numpy exact, the previous path's engines",
                        base["fts5+numpy"]))
    return [r for r in rows if r]


def latency_table(size: dict[str, Any]) -> list[str]:
    lat = size["latency"]
    base = lat["baselines"]
    wo, wi = lat["without_embedding"], lat["with_embedding"]
    lines = [
        "| mode (limit 10) | p50 ms | p95 ms | p99 ms | baseline | baseline p50 ms "
        "| ratio p50 / p95 / p99 |",
        "|---|---:|---:|---:|---|---:|---|",
        _row("FTS", wo["fts"], "bm25s", base["bm25s"]),
        *_engine_rows(lat),
        _row(f"vector (recall@10 vs exact {lat.get('vector_recall@10', float('nan')):.3f})",
             wo["vector"], "numpy exact", base["numpy"]),
        _row("hybrid", wo["hybrid"], "numpy + bm25s", base["numpy+bm25s"]),
        _row("vector, with query embedding", wi["vector"], "numpy + embed", None),
        _row("hybrid, with query embedding", wi["hybrid"], "numpy + bm25s + embed", None),
    ]
    if "vec0" in size:
        v = size["vec0"]
        lines.append(_row(f"sqlite-vec vec0 KNN (k={v['k']}, raw SQL)", v, "numpy exact",
                          {"p50_ms": v["baseline_p50_ms"]}))
    e = lat["embed_query"]
    lines.append(f"| query embedding alone (embed_query) | {_ms(e['p50_ms'])} | {_ms(e['p95_ms'])} "
                 f"| {_ms(e['p99_ms'])} | - | - | - |")
    return lines


def other_table(size: dict[str, Any]) -> list[str]:
    ing = size["ingest"]["without_embedding"]
    lines = ["| figure | hybridkb | baseline | ratio |", "|---|---:|---|---:|",
             f"| ingest, vectors given | {ing['items_per_s']:,.0f} items/s | "
             f"{ing['baseline_items_per_s']:,.0f} items/s (bm25s index build, in memory) "
             f"| {ing['ratio']:.2f}x |"]
    emb = size["ingest"].get("with_embedding")
    if emb:
        lines.append(f"| ingest with embedding ({emb['items']} items) | "
                     f"{emb['items_per_s']:.1f} items/s | {emb['baseline_items_per_s']:.1f} items/s "
                     f"(the model alone) | {emb['ratio']:.2f}x |")
    sz = size["size"]
    if "footprint_bytes" in sz:
        lines.append(f"| whole footprint (db + wal + derived indexes) | "
                     f"{sz['footprint_bytes'] / 2**20:,.1f} MiB | - | - |")
    lines.append(f"| store size (db + wal) | {sz['db_plus_wal_bytes'] / 2**20:,.1f} MiB "
                 f"({sz['bytes_per_item']:,.0f} B/item) | {sz['baseline_bytes'] / 2**20:,.1f} MiB "
                 f"(raw text + float32 vectors) | {sz['ratio']:.2f}x |")
    if "serve" in size:
        s = size["serve"]
        lines.append(f"| peak RSS, fresh process serving the queries | {s['peak_rss_mb']:,.0f} MB "
                     f"({s['rss_over_imports_mb']:,.0f} MB over imports) | "
                     f"{s['vector_matrix_mb']:,.0f} MB (the float32 matrix) "
                     f"| {s['ratio_rss_over_imports_to_matrix']:.2f}x |")
        lines.append(f"| first vector query after open (cold) | {_ms(s['first_vector_query_ms'])} ms "
                     f"| - | - |")
    c = size["cold"]
    if "open_first_hybrid_ms" in c:
        lines.append(f"| open + first hybrid query (fresh handle) | {_ms(c['open_first_hybrid_ms'])} ms | "
                     f"{_ms(c['baseline_ms'])} ms (previous path: read vec0 whole) | {c['ratio']:.2f}x |")
    aw = size.get("after_write")
    if aw:
        lines.append(f"| hybrid search right after a write (p50 of {aw['rounds']}) | "
                     f"{_ms(aw['hybrid_p50_ms'])} ms | {_ms(aw['baseline_p50_ms'])} ms (the same "
                     f"search again) | {aw['ratio']:.2f}x |")
    if "searchable_items_per_s" in ing:
        lines.append(f"| ingest + first search (text index built) | {ing['searchable_items_per_s']:,.0f} "
                     f"items/s ({ing['text_index_ready_s']:.1f} s for the index) | - | - |")
        lines.append(vector_build_row(ing))
    lines.append(f"| peak RSS of the benchmark process | {size['rss']['process_peak_mb']:,.0f} MB "
                 f"| - | - |")
    return lines


def vector_build_row(ing: dict[str, Any]) -> str:
    """The vector base build timed after the load, named for what was timed: the background
    build waited for, or a second build of a base add_many had already built. Older JSON
    (`graph_build_s`, written as "vector graph build") does not say which it was."""
    if "vector_base_build_s" in ing:
        seconds, rate = ing["vector_base_build_s"], ing["vector_base_build_vectors_per_s"]
        graph = ", with its graph" if ing.get("vector_base_graph") else ""
        what = (f"vector base build in the background after the load{graph}, waited for"
                if ing.get("vector_base_build") == "background" else
                f"vector base built again after the load{graph} (a second full build, timed; "
                "add_many built one already)")
    else:
        seconds, rate = ing["graph_build_s"], ing["graph_build_vectors_per_s"]
        what = ("vector base build timed after the load (older JSON: a second build unless one "
                "was under way in the background)")
    return f"| {what} | {seconds:.1f} s ({rate:,.0f} vectors/s) | - | - |"


def peers_table(size: dict[str, Any]) -> list[str]:
    """hybridkb beside LanceDB and Chroma (peers.py), one column each, from one loop."""
    peers = size.get("peers")
    if not peers:
        return []
    names = [n for n in ("hybridkb", "lancedb", "chroma") if n in peers]
    labels = {"hybridkb": "hybridkb", "lancedb": f"LanceDB {peers.get('lancedb', {}).get('version', '')}",
              "chroma": f"Chroma {peers.get('chroma', {}).get('version', '')}"}

    def cell(name: str, key: str, fmt: Any) -> str:
        fig = peers[name].get(key)
        return "-" if fig is None else fmt(fig)

    def p50(fig: Any) -> str:
        return f"{_ms(fig['p50_ms'])} ms"

    def stored_recall(name: str) -> str:  # the peers keep the float32 vectors given
        if name != "hybridkb":
            return "same (float32)"
        return cell(name, "vector_recall@10_of_stored", lambda v: f"{v:.3f}")

    rows: list[tuple[str, Callable[[str], str]]] = [("FTS p50", lambda n: cell(n, "fts", p50)),
            ("vector p50", lambda n: cell(n, "vector", p50)),
            ("vector recall@10 (vs exact over the given float32 vectors)",
             lambda n: cell(n, "vector_recall@10", lambda v: f"{v:.3f}")),
            ("vector recall@10 (vs exact over the values the engine stores)", stored_recall),
            ("hybrid p50", lambda n: cell(n, "hybrid", p50)),
            ("ingest, vectors given (until searchable)",
             lambda n: f"{peers[n]['items_per_s']:,.0f} items/s ({peers[n]['ingest_s']:.0f} s)"),
            ("first FTS search right after the load",
             lambda n: cell(n, "first_fts_s", lambda v: f"{v:.3f} s")),
            ("disk (everything the engine keeps)",
             lambda n: f"{peers[n]['disk_bytes'] / 1e6:,.0f} MB")]
    lines = ["| " + f"{size['items']:,} items" + " | " + " | ".join(labels[n] for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    lines += [f"| {label} | " + " | ".join(fn(n) for n in names) + " |" for label, fn in rows]
    lines += ["", f"{peers['queries']} queries, {peers['note']}."]
    return lines


def stage_table(sizes: list[dict[str, Any]]) -> list[str]:
    """Rows: stages; columns: hybrid at every size, then FTS and vector at the largest."""
    with_stages = [s for s in sizes if "stages" in s]
    if not with_stages:
        return []
    cols = [(s, "hybrid") for s in with_stages]
    cols += [(with_stages[-1], "fts"), (with_stages[-1], "vector")]
    names: list[str] = []
    for s, mode in cols:
        for k in s["stages"][mode]["mean_ms_by_stage"]:
            if k not in names:
                names.append(k)
    head = "| stage (mean ms per search) | " + " | ".join(
        f"{mode} {s['items']:,}" for s, mode in cols) + " |"
    lines = [head, "|---|" + "---:|" * len(cols)]
    for name in names:
        cells = []
        for s, mode in cols:
            st = s["stages"][mode]
            v = st["mean_ms_by_stage"].get(name)
            share = st["share_by_stage"].get(name)
            cells.append("-" if v is None else f"{v:.2f}" + (f" ({share:.0%})" if share else ""))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("| total (mean) | " + " | ".join(
        f"{s['stages'][mode]['total']['mean_ms']:.2f}" for s, mode in cols) + " |")
    return lines


def whatif_table(sizes: list[dict[str, Any]]) -> list[str]:
    with_whatif = [s for s in sizes if "whatif" in s]
    if not with_whatif:
        return []
    lines = ["| items | variant (limit 10) | p50 ms | p95 ms | p99 ms | ratio to numpy + bm25s p50 |",
             "|---:|---|---:|---:|---:|---:|"]
    for s in with_whatif:
        w = s["whatif"]
        for name, fig in w["hybrid"].items():
            lines.append(f"| {s['items']:,} | hybrid, {name} | {_ms(fig['p50_ms'])} | "
                         f"{_ms(fig['p95_ms'])} | {_ms(fig['p99_ms'])} | "
                         f"{_x(fig['ratio_to_numpy+bm25s'].get('p50'))} |")
        for mode, label in (("fts", "FTS"), ("vector", "vector")):
            for name, fig in w.get(mode, {}).items():
                lines.append(f"| {s['items']:,} | {label}, {name} | {_ms(fig['p50_ms'])} | "
                             f"{_ms(fig['p95_ms'])} | {_ms(fig['p99_ms'])} | - |")
        for name, fig in w.get("vector_binary_prefilter", {}).items():
            if name == "numpy exact":
                continue
            lines.append(f"| {s['items']:,} | vector top 10 alone: 1-bit codes, exact {name} "
                         f"(recall@10 {fig['recall@10']:.3f}) | {_ms(fig['p50_ms'])} | "
                         f"{_ms(fig['p95_ms'])} | {_ms(fig['p99_ms'])} | "
                         f"{_x(fig['ratio_to_numpy'].get('p50'))} of numpy |")
    differ = sum(s["whatif"]["fast_dedup_results_differ_on"] for s in with_whatif)
    lines += ["", f"The fast dedup returned the library's exact hits on every query "
                  f"({differ} differing)." if differ == 0 else
              f"**The fast dedup's hits differed on {differ} queries.**"]
    return lines


def targets(results: dict[str, Any]) -> list[str]:
    sized = {s["items"]: s for s in results["sizes"]}
    size = sized.get(TARGET_ITEMS)
    if size is None:
        return [f"Targets are set at {TARGET_ITEMS:,} items; this run has no such size."]
    wo, base = size["latency"]["without_embedding"], size["latency"]["baselines"]
    ingest = size["ingest"]["without_embedding"]["items_per_s"]

    def row(target: str, measured: str, ok: bool) -> str:
        return f"| {target} | {measured} | {'met' if ok else '**missed**'} |"

    def ms(mode: str) -> float:
        return float(wo[mode]["p50_ms"])

    rows = [row(f"FTS <= {TARGET_FTS_MS:g} ms (issue #15)", f"{ms('fts'):.2f} ms",
                ms("fts") <= TARGET_FTS_MS),
            row(f"vector <= {TARGET_VECTOR_MS:g} ms (issue #15)", f"{ms('vector'):.2f} ms",
                ms("vector") <= TARGET_VECTOR_MS),
            row(f"hybrid <= {TARGET_HYBRID_MS:g} ms (issue #15)", f"{ms('hybrid'):.2f} ms",
                ms("hybrid") <= TARGET_HYBRID_MS),
            row(f"ingest, vectors given >= {TARGET_INGEST_PER_S:,} items/s (issue #15)",
                f"{ingest:,.0f} items/s", ingest >= TARGET_INGEST_PER_S)]
    for mode, engine, label in (("fts", "tantivy", "tantivy"), ("vector", "usearch", "vector base")):
        if base.get(engine) is not None:
            over = ms(mode) / max(float(base[engine]["p50_ms"]), 1e-9)
            rows.append(row(f"{mode} over the bare engine ({label}) <= {TARGET_OVERHEAD:g}x "
                            "(issue #15)", f"{over:.2f}x", over <= TARGET_OVERHEAD))
    ratio = float(wo["vector"]["ratio"]["p50"])
    rows += [row(f"hybrid <= {FIRST_HYBRID_MS:g} ms (first targets)", f"{ms('hybrid'):.2f} ms",
                 ms("hybrid") <= FIRST_HYBRID_MS),
             row(f"vector <= {FIRST_VECTOR_RATIO:g}x numpy exact (first targets)",
                 f"{ratio:.2f}x", ratio <= FIRST_VECTOR_RATIO),
             row(f"FTS <= {FIRST_FTS_MS:g} ms (first targets)", f"{ms('fts'):.2f} ms",
                 ms("fts") <= FIRST_FTS_MS)]
    return ["| target at 100k items (p50, query embedding excluded) | measured | verdict |",
            "|---|---:|---|", *rows]


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    d = results["data"]
    lines = [
        f"Run {results['started']} on {m['cores']} cores ({m['cpu']}), {m['memory_gb']} GB, "
        f"Python {m['python']}, numpy {m['numpy']}, SQLite {m['sqlite']} "
        f"({m['sqlite_driver']}), sqlite-vec {m['sqlite_vec']}, bm25s {m['bm25s']}, "
        f"BLAS threads {m.get('blas_threads', '?')}; "
        f"{results['seconds']:.0f} s in all.",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Items: {d['sources']:,} distinct SciFact + NFCorpus documents "
        f"({', '.join(f'{k} {v:,}' for k, v in d['per_dataset'].items())}), repeated with a "
        f"deterministic perturbation; vectors from `{d['model']}` ({d['dim']} dims). "
        f"Queries: {d['queries']} test queries of both sets, each mode timed per query, "
        f"interleaved with the baselines, after a warm-up.",
        "",
    ]
    for size in results["sizes"]:
        la = size["load_average_start"]
        lines += [f"### {size['items']:,} items", "",
                  f"Load average at start: {la[0]:.1f} (machine shared with other jobs).", ""]
        lines += [*latency_table(size), "", *other_table(size), ""]
        peers = peers_table(size)
        if peers:
            lines += ["Beside the stores users would pick instead (same run):", "", *peers, ""]
    stage = stage_table(results["sizes"])
    if stage:
        lines += ["### Where a search spends its time", "", *stage, ""]
    what = whatif_table(results["sizes"])
    if what:
        lines += ["### What would meet the targets (measured by swapping parts in)", "", *what, ""]
    lines += ["### Targets", "", *targets(results), ""]
    return "\n".join(lines)


def write(results: dict[str, Any], out_dir: Path, stamp: str) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"speed-{stamp}.json"
    md_path = out_dir / f"speed-{stamp}.md"
    json_path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown(results) + "\n", encoding="utf-8")
    return json_path, md_path


def update_doc(doc: Path, results: dict[str, Any]) -> None:
    """Replace the generated part of `## Speed` in `doc`; create what is missing.
    Other sections, and prose in the Speed section outside the markers, are kept."""
    generated = f"{BEGIN}\n{markdown(results)}\n{END}"
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    if BEGIN in text and END in text:
        start, stop = text.index(BEGIN), text.index(END) + len(END)
        text = text[:start] + generated + text[stop:]
    elif re.search(rf"^{re.escape(HEADING)}\s*$", text, flags=re.M):
        match = re.search(rf"^{re.escape(HEADING)}\s*$", text, flags=re.M)
        assert match is not None
        text = text[: match.end()] + "\n\n" + generated + "\n" + text[match.end():]
    else:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{generated}\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text, encoding="utf-8")
