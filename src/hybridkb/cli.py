"""The `hybridkb` command line: a thin face over KnowledgeBase.

It only translates arguments and formats results; errors become one line on
stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import click

from . import cli_index, cli_transfer
from .cli_common import JsonErrorsGroup, _fail, emit, fail_with, handle_errors, pass_ctx, progress_bar
from .cli_options import Context, add_global_options, global_options, require_store
from .cli_progress import ctrl_c_stops, on_worker
from .errors import EmbeddingInterrupted, HybridKBError, InvalidInputError
from .fusion import DEFAULT_MERGE, FUSIONS, MERGES
from .model import MODES, Hit, Item, SearchResult, iso


@click.group(cls=JsonErrorsGroup, context_settings={"help_option_names": ["-h", "--help"]})
@global_options
@click.option("--config", "config_path", metavar="FILE",
              help="Read settings from this TOML file (env HYBRIDKB_CONFIG; default ./hybridkb.toml, "
                   "else hybridkb.toml in the user config folder).")
@click.version_option(package_name="hybridkb")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """hybridkb: hybrid BM25 + vector search over your knowledge, in one SQLite file.

    Global options (--db, --embedder, --no-embedder, --json) go before or after the
    command. Each setting comes from the flag, else the environment, else hybridkb.toml.
    """
    try:
        ctx.obj = Context.start(ctx, config_path)
    except HybridKBError as exc:
        fail_with(str(exc), type(exc).__name__)
    ctx.call_on_close(ctx.obj.close)


@cli.command()
@pass_ctx
@handle_errors
def init(ctx: Context) -> None:
    """Create the store (if missing) and record the embedding model."""
    kb = ctx.kb()
    emit(ctx, kb.stats(), lambda: click.echo(f"store ready: {kb.target}"))


def _parse_json_object(raw: str | None, option: str) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{option} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidInputError(f"{option} must be a JSON object")
    return value


@cli.command()
@click.argument("text")
@click.option("--id", "item_id", help="Item id (generated when omitted).")
@click.option("--title")
@click.option("--corpus", default="default", show_default=True)
@click.option("--kind", help="decision, lesson, summary, temp_note, memory, wiki_page, code...")
@click.option("--scope")
@click.option("--repo")
@click.option("--namespace")
@click.option("--url", "source_url")
@click.option("--ttl", type=float, help="Expire after this many seconds.")
@click.option("--metadata", help="JSON object.")
@click.option("--replace", is_flag=True, help="Replace an existing item with the same id.")
@pass_ctx
@handle_errors
def add(ctx: Context, /, text: str, item_id: str | None, metadata: str | None, replace: bool,
        **fields: Any) -> None:
    """Add one item."""
    kb = ctx.kb()
    data = {k: v for k, v in fields.items() if v is not None}
    write = kb.upsert if replace else kb.add
    new_id = write(text, id=item_id, metadata=_parse_json_object(metadata, "--metadata"), **data)
    emit(ctx, {"id": new_id}, lambda: click.echo(new_id))


def _where(hit: Hit, roots: dict[str, str], line: int) -> str:
    """`path:line`, the path as the shell here reaches it (so terminals and editors can open it)."""
    path = hit.path or ""
    root = roots.get(hit.corpus)
    if root:
        full = Path(root) / path if Path(root).is_dir() else Path(root)
        try:
            path = os.path.relpath(full)
        except ValueError:  # another drive (Windows)
            path = str(full)
        if path.startswith(".."):
            path = str(full)
    return f"{path}:{line}"


HEADER_WIDTH = 99  # a hit's first line fits a terminal of 100 columns


def _part(hit: Hit) -> str:
    """The symbol or heading a file's chunk is, as its label names it after the path."""
    name = hit.metadata.get("symbol") or hit.metadata.get("heading")
    return f"› {name}" if isinstance(name, str) and name else ""


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(room - 1, 0)] + "…"


def _header(start: str, main: str, extra: str) -> str:
    """`rank. score  main  extra` in HEADER_WIDTH columns: `extra` (a symbol, an id) is cut
    first, then the middle of `main` (a path keeps its file name and line, a label its ends)."""
    room = HEADER_WIDTH - len(start)
    if len(main) > room:
        keep = room - 1
        main = main[: keep // 3] + "…" + main[len(main) - (keep - keep // 3):]
    space = room - len(main) - 2
    parts = extra.removeprefix("› ").split(" > ")
    while len(extra) > space and len(parts) > 1:  # a heading path keeps its innermost headings
        parts = parts[1:]
        extra = "› … > " + " > ".join(parts)
    extra = _cut(extra, space)
    return start + main + (f"  {extra}" if extra and len(extra) > 1 else "")


def format_hits(result: SearchResult, explain: bool, *, ansi: bool = False,
                roots: dict[str, str] | None = None) -> str:
    """Hits as text: rank, score and `path:line` (a file's chunk, with its symbol or heading) or
    label and id (any other item) on one line that fits a terminal; below it the
    best-matching lines, terms marked."""
    from .snippets import best_lines, highlight, query_terms, snippet

    if not result.hits:
        return f"no results (answered by: {result.answered_by})"
    terms = query_terms(result.query)
    lines = [f"answered by: {result.answered_by}; confidence: {result.confidence}"]
    lines += [f"note: {n}" for n in result.notes]
    for rank, hit in enumerate(result.hits, start=1):
        start = f"{rank:>3}. {hit.score:.3f}  "
        if hit.path is not None and hit.start_line is not None:
            shown = best_lines(hit.text, result.query, first_line=hit.start_line)
            lines.append(_header(start, _where(hit, roots or {}, shown.best), _part(hit)))
            width = len(str(shown.last))
            for number, text in enumerate(shown.lines, start=shown.first):
                lines.append(f"      {number:>{width}} │ {highlight(text, terms, ansi=ansi)}")
        else:
            lines.append(_header(start, hit.source_label, f"({hit.id})" if hit.id not in hit.source_label
                                 else ""))
            lines.append("      " + highlight(snippet(hit.text, result.query, 100), terms, ansi=ansi))
        if hit.alternate_sources:
            alts = ", ".join(a.get("source", a["id"]) for a in hit.alternate_sources)
            lines.append(f"      also in: {alts}")
        if explain:
            parts = [f"{name} #{r.rank} ({r.score:.4f})" for name, r in sorted(hit.retrievers.items())]
            boosts = " ".join(f"{k}×{v:.3f}" for k, v in hit.boosts.items()) or "none"
            lines.append(f"      {', '.join(parts)} -> fused {hit.fusion_score:.5f}, "
                         f"relevance {hit.relevance:.4f}; boosts {boosts}; score {hit.score:.4f}")
            ev = hit.evidence
            if ev:
                lines.append(f"      evidence: coverage {ev['coverage']:.2f}, bm25 {ev['bm25']:.2f}, "
                             f"vector {ev['vector']:.2f}, cosine z {ev['cosine_z']:.2f} -> "
                             f"calibrated {ev['calibrated']:.4f}")
    return "\n".join(lines)


@cli.command()
@click.argument("query")
@click.option("--mode", type=click.Choice(MODES), default="hybrid",
              show_default=True)
@click.option("--limit", default=10, show_default=True)
@click.option("--offset", default=0, show_default=True)
@click.option("--corpus", "corpora", multiple=True, help="Search this corpus (repeatable).")
@click.option("--kind", "kinds", multiple=True, help="Only items of this kind (repeatable).")
@click.option("--path", "paths", multiple=True, metavar="GLOB",
              help="Only indexed files matching this glob, under this folder, or of this name "
                   "at any depth, e.g. 'src/**/*.py', 'src/pkg/', 'cors.py'; a path as hits print "
                   "it (from here) or absolute works too (repeatable).")
@click.option("--language", "languages", multiple=True, help="Only indexed files of this language "
              "(python, markdown...; repeatable).")
@click.option("--filter", "filter_json", help='Filters as JSON, e.g. {"metadata": {"team": "x"}}.')
@click.option("--fusion", type=click.Choice(FUSIONS), default=None)
@click.option("--min-score", type=float, help="Drop hits scoring lower (scores are in [0, 1]).")
@click.option("--merge", type=click.Choice(MERGES), default=DEFAULT_MERGE, show_default=True,
              help="Several corpora: by relevance, or rrf (each corpus gets equal say).")
@click.option("--explain", is_flag=True, help="Show ranks, raw scores, fusion and boosts per hit.")
@click.option("--touch", is_flag=True, help="Count returned hits as accessed.")
@pass_ctx
@handle_errors
def search(ctx: Context, query: str, mode: str, limit: int, offset: int, corpora: tuple[str, ...],
           kinds: tuple[str, ...], paths: tuple[str, ...], languages: tuple[str, ...],
           filter_json: str | None, fusion: str | None, min_score: float | None, merge: str,
           explain: bool, touch: bool) -> None:
    """Search the store."""
    filters = _parse_json_object(filter_json, "--filter")
    for key, values in (("kind", kinds), ("path", paths), ("language", languages)):
        if values:
            filters[key] = list(values)
    kb = ctx.kb()
    result = kb.search(query, mode=mode, limit=limit, offset=offset,
                       corpora=list(corpora) or None, filters=filters or None,
                       fusion=fusion, min_score=min_score, merge=merge, touch=touch)
    roots = {c: str(kb.corpus_settings(c).get("root") or "") for c in {h.corpus for h in result.hits}}
    emit(ctx, result.to_dict(explain=explain), lambda: click.echo(
        format_hits(result, explain, ansi=sys.stdout.isatty(), roots=roots)))


def item_json(item: Item) -> dict[str, Any]:
    data = item.to_dict()
    for key in ("created_at", "updated_at", "expires_at", "last_accessed_at"):
        data[key] = iso(data[key])
    return data


@cli.command()
@click.argument("item_id")
@pass_ctx
@handle_errors
def get(ctx: Context, item_id: str) -> None:
    """Show one item."""
    item = ctx.kb().get(item_id)
    data = item_json(item)

    def human() -> None:
        for key, value in data.items():
            if value not in (None, {}, "") and key != "text":
                click.echo(f"{key}: {value}")
        click.echo("")
        click.echo(item.text)

    emit(ctx, data, human)


@cli.command()
@click.argument("item_ids", nargs=-1, required=True)
@pass_ctx
@handle_errors
def delete(ctx: Context, item_ids: tuple[str, ...]) -> None:
    """Delete items by id."""
    n = ctx.kb().delete_many(list(item_ids))
    emit(ctx, {"deleted": n}, lambda: click.echo(f"deleted {n}"))
    if n == 0:
        sys.exit(1)


@cli.command()
@pass_ctx
@handle_errors
def stats(ctx: Context) -> None:
    """Counts per corpus, the embedding model, items still missing vectors."""
    data = ctx.kb().stats()

    def human() -> None:
        click.echo(f"store:    {data['target']}")
        click.echo(f"items:    {data['items']}")
        click.echo(f"embedder: {data['embedder'] or 'none'} ({data['vector_dim'] or '-'} dims)")
        click.echo(f"without vectors: {data['items_without_vectors']}")
        if data["awaiting_embedding"]:
            click.echo(f"awaiting embedding: {data['awaiting_embedding']:,} items (`hybridkb embed`)")
        for name, count in data["corpora"].items():
            click.echo(f"  {name}: {count}")

    emit(ctx, data, human)


@cli.command()
@click.option("--repair", is_flag=True,
              help="Rebuild what derives from the items (full-text index, statistics, vectors).")
@pass_ctx
@handle_errors
def check(ctx: Context, repair: bool) -> None:
    """Check the store: the database's integrity and items, full text and vectors agreeing.

    Exits 1 while problems remain; each comes with what to do about it.
    """
    _require_store(ctx.db)
    if not repair:
        ctx.embedder = None  # checking needs no model; repairing embeds dropped vectors again
    report = ctx.kb().check(repair=repair)

    def human() -> None:
        click.echo(f"store: {report['target']}")
        for line in report["repaired"]:
            click.echo(f"repaired: {line}")
        for entry in report["problems"]:
            click.echo(f"problem: {entry['problem']}\n  fix: {entry['fix']}")
        click.echo("ok: no problems found" if report["ok"] else f"{len(report['problems'])} problem(s)")

    emit(ctx, report, human)
    if not report["ok"]:
        sys.exit(1)


@cli.command()
@pass_ctx
@handle_errors
def purge(ctx: Context) -> None:
    """Delete expired items."""
    n = ctx.kb().purge_expired()
    emit(ctx, {"purged": n}, lambda: click.echo(f"purged {n} expired items"))


@cli.command()
@click.option("--batch-size", default=16, show_default=True)
@pass_ctx
@handle_errors
def reembed(ctx: Context, batch_size: int) -> None:
    """Give every item a vector from --embedder, switching the store to it when done.

    New vectors are written beside the old ones in batches; the store keeps its old
    model (and its vector search) until all are ready. Resumable: after a crash, run
    it again with the same --embedder. Also embeds items that lack a vector.
    """
    kb = ctx.kb()
    todo = kb.count() if not kb.has_vectors else kb.stats()["items_without_vectors"]
    done = 0

    def count(k: int) -> None:
        nonlocal done
        done += k
        bar.update(k)

    stopping = kb.embedder.interrupt if kb.embedder is not None else None
    try:
        with ctrl_c_stops(stopping, "stopping: the batch in hand is dropped"), \
                progress_bar(todo, "embedding", "item") as bar:
            n = on_worker(lambda: kb.reembed(batch_size=batch_size, progress=count))
    except EmbeddingInterrupted:
        assert kb.embedder is not None
        kb.embedder.resume()
        _fail(f"stopped: {done} of {todo} items embedded with {kb.embedder_name}, {max(todo - done, 0)} "
              f"wait; the same command continues", code=130)
    emit(ctx, {"embedded": n, "embedder": kb.embedder_name},
         lambda: click.echo(f"embedded {n} items with {kb.embedder_name}"))


SAMPLE_QUERY = "where do we keep the data?"


@cli.command()
@click.argument("query", default=SAMPLE_QUERY)
@click.option("--limit", default=5, show_default=True)
@pass_ctx
@handle_errors
def demo(ctx: Context, query: str, limit: int) -> None:
    """Load the shipped sample notes into the store (once) and search them."""
    kb = ctx.kb()
    if kb.count("hybridkb-notes") == 0:
        sample = resources.files("hybridkb") / "samples" / "notes.jsonl"
        items = [json.loads(line) for line in sample.read_text("utf-8").splitlines() if line.strip()]
        kb.upsert_many(items)
        if not ctx.as_json:
            click.echo(f"loaded {len(items)} sample notes into {kb.target}", err=True)
    result = kb.search(query, limit=limit, corpora=["hybridkb-notes"])
    emit(ctx, result.to_dict(), lambda: click.echo(f"query: {query}\n{format_hits(result, False)}"))


@cli.command(name="eval")
@click.option("--dataset", "datasets", multiple=True,
              type=click.Path(exists=True, file_okay=False),
              help="A BEIR-layout folder: corpus.jsonl[.gz], queries.jsonl, qrels/<split>.tsv. "
                   "Repeat it: several sets as corpora of one store (see docs/quality.md).")
@click.option("--split", default="test", show_default=True, help="Which qrels/<split>.tsv to run.")
@click.option("--mode", "modes", multiple=True, help="fts, vector, hybrid (repeatable or a comma "
              "list; default all).")
@click.option("--fusion", "fusions", multiple=True, help="rrf, convex, dbsf for hybrid rows "
              "(repeatable or a comma list; default all).")
@click.option("--weights", "weights", multiple=True, help="Hybrid weights fts,vector, e.g. 1,0.5 "
              "(repeatable; default the search default).")
@click.option("--rrf-k", "rrf_ks", multiple=True, help="RRF k for rrf rows (repeatable or a "
              "comma list; default 60).")
@click.option("--bm25-weights", "bm25", multiple=True, help="BM25 weights title,text, "
              "e.g. 2,1 (repeatable; default the backend's).")
@click.option("--max-queries", type=int, help="Run only the first N judged queries (qrels order).")
@click.option("--ignore-identical-ids", is_flag=True, help="Drop a hit whose id is the query's id.")
@click.option("--scope-by", metavar="KEY", help="Limit each query to items sharing the query's "
              "metadata.KEY value (a metadata filter inside each retriever).")
@click.option("--depth", type=int, help="Candidates per retriever (default: what search picks "
              "for 100 hits); the default row always keeps the search default.")
@click.option("--db", "target", help="Index into this store instead of a temporary SQLite file.")
@click.option("--no-default-row", is_flag=True, help="Skip the row run with search defaults.")
@click.option("--near-duplicates", is_flag=True, help="Add a near copy of each answer (decoy or sibling).")
@click.option("--query-typos", is_flag=True, help="Misspell half of each query's longer words.")
@click.option("--merge", "merges", multiple=True, help="Several datasets: relevance, rrf (or both).")
@click.option("--no-distractors", is_flag=True, help="Several datasets: no distractor corpora.")
@click.option("--identifiers", is_flag=True, help="Instead of a dataset: the identifier evaluation "
              "(function and class names of installed packages' source, see docs/quality.md).")
@click.option("--package", "packages", multiple=True, help="With --identifiers: the packages to "
              "index (repeatable; default click and tqdm).")
@click.option("--no-cache", is_flag=True, help="Neither read nor write cached embeddings.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON report to this file.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object (as the global --json).")
@pass_ctx
@handle_errors
def eval_(ctx: Context, datasets: tuple[str, ...], split: str, modes: tuple[str, ...],
          fusions: tuple[str, ...], weights: tuple[str, ...], rrf_ks: tuple[str, ...], bm25: tuple[str, ...],
          max_queries: int | None, ignore_identical_ids: bool, scope_by: str | None,
          depth: int | None, target: str | None, no_default_row: bool, near_duplicates: bool,
          query_typos: bool,
          merges: tuple[str, ...], no_distractors: bool, identifiers: bool,
          packages: tuple[str, ...], no_cache: bool, output: Path | None, as_json: bool) -> None:
    """Measure nDCG@10, Recall@100, MRR@10 and latency on a BEIR dataset, per mode and fusion.

    Several --dataset: each set's queries over its own corpus and over every corpus, and
    how often the distractor corpora outrank a matching document. --identifiers: names
    defined in installed packages' source as queries.
    Embeddings are cached in $HYBRIDKB_CACHE (default ~/.cache/hybridkb/embeddings).
    """
    from .embedding import get_embedder
    from .evaluation import runner
    from .evaluation.cache import EmbeddingCache

    try:
        ks = tuple(float(k) for k in runner.split_values(rrf_ks))
    except ValueError as exc:
        raise InvalidInputError(f"--rrf-k takes numbers: {exc}") from exc
    defaults = runner.EvalOptions()
    options = runner.EvalOptions(
        modes=runner.split_values(modes) or defaults.modes,
        fusions=runner.split_values(fusions) or defaults.fusions,
        weights=runner.parse_pairs(weights, "--weights") or defaults.weights,
        rrf_ks=ks or defaults.rrf_ks,
        bm25_weights=runner.parse_pairs(bm25, "--bm25-weights") or defaults.bm25_weights,
        split=split, max_queries=max_queries, ignore_identical_ids=ignore_identical_ids,
        scope_by=scope_by, depth=depth, db=target, default_row=not no_default_row,
        near_duplicates=near_duplicates, query_typos=query_typos, distractors=not no_distractors,
        merges=tuple(runner.split_values(merges)) or defaults.merges)
    needs_model = any(m != "fts" for m in options.modes)
    model = get_embedder(ctx.embedder) if needs_model else None
    cache = None if no_cache else EmbeddingCache()
    if identifiers == bool(datasets):
        raise InvalidInputError("give --dataset (one or more) or --identifiers")
    if identifiers:
        from .evaluation import identifiers as code_eval

        found = code_eval.evaluate_identifiers(model, options, cache=cache, progress=progress_bar,
                                               packages=packages or code_eval.PACKAGES)
        data, text = found.to_dict(), code_eval.format_identifiers(found)
    elif len(datasets) > 1:
        from .evaluation import multi

        many = multi.evaluate_multi(datasets, model, options, cache=cache, progress=progress_bar)
        data, text = many.to_dict(), multi.format_multi(many)
    else:
        report = runner.evaluate(datasets[0], model, options, cache=cache, progress=progress_bar)
        data, text = report.to_dict(), runner.format_table(report)
    if output is not None:
        output.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    ctx.as_json = ctx.as_json or as_json
    emit(ctx, data, lambda: click.echo(text))


@cli.command()
@click.option("--http", "use_http", is_flag=True,
              help="Serve HTTP instead of stdio: MCP at /mcp, REST at /api, the search page at /.")
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP bind address.")
@click.option("--port", default=8765, show_default=True, help="HTTP port.")
@click.option("--token", envvar="HYBRIDKB_TOKEN",
              help="Bearer token HTTP clients must send (env HYBRIDKB_TOKEN); "
                   "generated for loopback when omitted, required otherwise.")
@click.option("--read-only", is_flag=True, help="Expose only search, recall, get, list_corpora.")
@click.option("--corpora", "corpora_csv",
              help="Comma-separated corpora the server may see and write.")
@click.option("--defer-embed", is_flag=True, help="Commit writes as text at once and leave their "
              "vectors to the background thread (default: a write embeds before it commits).")
@pass_ctx
@handle_errors
def serve(ctx: Context, use_http: bool, host: str, port: int, token: str | None, read_only: bool,
          corpora_csv: str | None, defer_embed: bool) -> None:
    """Serve the store over MCP (stdio by default); with --http also REST and a search page.

    Logs go to stderr. Over HTTP: MCP at /mcp, the REST API at /api (OpenAPI at
    /api/openapi.json) and the search page at /, all under one token. A background
    thread embeds whatever waits for a vector (e.g. an `index --no-embed`), unless
    --read-only; with --defer-embed the server's own writes wait there too.
    """
    try:
        from . import mcp as mcp_server
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "pydantic", "starlette", "anyio"):
            raise
        _fail("the MCP server needs the mcp package: pip install 'hybridkb[mcp]'")
    corpora = [c.strip() for c in (corpora_csv or "").split(",") if c.strip()] or None
    if read_only:
        ctx.require_store()  # nothing to serve, and nothing may be written
        ctx.write_nothing()
    if use_http:
        token, generated = mcp_server.check_http_binding(host, token)
    kb = ctx.kb()
    server = mcp_server.build_server(kb, read_only=read_only, corpora=corpora)
    if kb.embedder is not None and not read_only:
        from .background import BackgroundEmbedder

        kb.embed_mode = "defer" if defer_embed else "sync"  # sync: remember, then recall, ranks it
        click.get_current_context().call_on_close(BackgroundEmbedder(kb).start().stop)
    if not use_http:
        mcp_server.run_stdio(server)
        return
    assert token is not None
    from . import web

    app = web.combined_app(ctx.kb(), mcp_server.http_app(server, token=token, host=host), token=token,
                           host=host, read_only=read_only, corpora=corpora)
    base = f"http://{'[' + host + ']' if ':' in host else host}:{port}"
    click.echo(f"hybridkb MCP server on {base}/mcp, REST API on {base}/api"
               + (" (read-only)" if read_only else ""), err=True)
    if generated:
        click.echo(f"bearer token for this run: {token}", err=True)
    click.echo(f"search page: {base}/?token={token if generated else '<your token>'}", err=True)
    web.run(app, host=host, port=port)


def _require_store(db: str) -> None:
    require_store(db)


cli_index.register(cli)
cli_transfer.register(cli)
add_global_options(cli)


def main() -> None:
    cli(prog_name="hybridkb")


if __name__ == "__main__":
    main()
