"""A model folder a user brings: an ONNX model, its `tokenizer.json`, and how to use it.

What is read, first found wins:
- `hybridkb.json`: {"model", "pooling", "query_prefix", "document_prefix", "max_tokens"};
- sentence-transformers' files, as `SentenceTransformer(..., backend="onnx").save(DIR)` or a
  downloaded model folder holds them: `1_Pooling/config.json` (the pooling mode),
  `config_sentence_transformers.json` (the `prompts` for queries and documents),
  `sentence_bert_config.json` (`max_seq_length`);
- else mean pooling, no prefixes, 512 tokens.
The model is `model.onnx`, `onnx/model.onnx`, or the one `.onnx` file found there (what
`optimum-cli export onnx` and sentence-transformers write). Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import BackendUnavailableError, InvalidInputError

POOLINGS = ("mean", "cls", "max", "last")
DEFAULT_MAX_TOKENS = 512
SETTINGS = "hybridkb.json"
_KEYS = {"model", "pooling", "query_prefix", "document_prefix", "max_tokens"}
# sentence-transformers' pooling flags -> ours (the others, e.g. weighted mean, are refused)
_ST_POOLING = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
               "pooling_mode_max_tokens": "max", "pooling_mode_lasttoken": "last"}
EXPORT_HINT = ("export one elsewhere, e.g. `optimum-cli export onnx --model "
               "sentence-transformers/all-MiniLM-L6-v2 --task feature-extraction DIR`")


@dataclass(frozen=True)
class ModelFolder:
    """Where a model's files are and how its outputs become one vector per text."""

    path: Path
    model: Path
    tokenizer: Path
    pooling: str = "mean"
    query_prefix: str = ""
    document_prefix: str = ""
    max_tokens: int = DEFAULT_MAX_TOKENS

    @property
    def digest(self) -> str:
        """A short hash of the weights, the tokenizer and the settings: a store records it,
        so vectors of another model (or of the same model pooled otherwise) are refused."""
        h = hashlib.blake2b(digest_size=8)
        for part in (self.model, self.tokenizer):
            with part.open("rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        h.update(json.dumps([self.pooling, self.query_prefix, self.document_prefix,
                             self.max_tokens]).encode())
        return h.hexdigest()


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} must hold a JSON object")
    return data


def _find_model(folder: Path, named: str | None) -> Path:
    if named is not None:
        model = folder / named
        if not model.is_file():
            raise InvalidInputError(f"{folder / SETTINGS} names model {named!r}, which is not there")
        return model
    for candidate in (folder / "model.onnx", folder / "onnx" / "model.onnx"):
        if candidate.is_file():
            return candidate
    found = sorted([*folder.glob("*.onnx"), *folder.glob("onnx/*.onnx")])
    if len(found) == 1:
        return found[0]
    if found:
        names = ", ".join(str(p.relative_to(folder)) for p in found)
        raise InvalidInputError(f"{folder} holds several ONNX models ({names}); name one as "
                                f'{{"model": "..."}} in {SETTINGS}')
    raise InvalidInputError(f"no ONNX model (model.onnx) in {folder}; {EXPORT_HINT}")


def _st_pooling(folder: Path) -> str | None:
    config = folder / "1_Pooling" / "config.json"
    if not config.is_file():
        return None
    flags = _json(config)
    chosen = [ours for key, ours in _ST_POOLING.items() if flags.get(key)]
    other = [k for k, v in flags.items() if k.startswith("pooling_mode") and v and k not in _ST_POOLING]
    if len(chosen) != 1 or other:
        raise InvalidInputError(f"{config}: pooling {sorted(k for k, v in flags.items() if v is True)} "
                                f"is not supported; use one of {', '.join(POOLINGS)} in {SETTINGS}")
    return chosen[0]


def _st_prompts(folder: Path) -> tuple[str, str]:
    config = folder / "config_sentence_transformers.json"
    prompts = _json(config).get("prompts") if config.is_file() else None
    if not isinstance(prompts, dict):
        return "", ""
    document = next((prompts[k] for k in ("document", "passage", "corpus") if k in prompts), "")
    return str(prompts.get("query", "")), str(document)


def _st_max_tokens(folder: Path) -> int | None:
    config = folder / "sentence_bert_config.json"
    value = _json(config).get("max_seq_length") if config.is_file() else None
    return value if isinstance(value, int) else None


def read_folder(path: str | Path) -> ModelFolder:
    """The folder's model, tokenizer and settings; a clear error for what is missing."""
    folder = Path(os.path.expanduser(str(path)))
    if not folder.is_dir():
        raise InvalidInputError(f"no model folder at {folder}; {EXPORT_HINT}")
    settings = _json(folder / SETTINGS) if (folder / SETTINGS).is_file() else {}
    if unknown := set(settings) - _KEYS:
        raise InvalidInputError(f"{folder / SETTINGS}: unknown settings {sorted(unknown)}; "
                                f"known: {sorted(_KEYS)}")
    tokenizer = folder / "tokenizer.json"
    if not tokenizer.is_file():
        raise InvalidInputError(f"no tokenizer.json in {folder}; {EXPORT_HINT}")
    query, document = _st_prompts(folder)
    pooling = settings.get("pooling") or _st_pooling(folder) or "mean"
    if pooling not in POOLINGS:
        raise InvalidInputError(f"{folder / SETTINGS}: pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
    max_tokens = settings.get("max_tokens") or _st_max_tokens(folder) or DEFAULT_MAX_TOKENS
    if not (isinstance(max_tokens, int) and max_tokens > 0):
        raise InvalidInputError(f"{folder / SETTINGS}: max_tokens must be a positive integer")
    for key in ("query_prefix", "document_prefix"):
        if not isinstance(settings.get(key, ""), str):
            raise InvalidInputError(f"{folder / SETTINGS}: {key} must be a string")
    return ModelFolder(
        path=folder, model=_find_model(folder, settings.get("model")), tokenizer=tokenizer,
        pooling=pooling, query_prefix=settings.get("query_prefix", query),
        document_prefix=settings.get("document_prefix", document), max_tokens=max_tokens)


def load(folder: ModelFolder) -> tuple[Any, Any]:
    """(tokenizer, onnxruntime session) for the folder, truncating and padding as the model reads."""
    try:
        import onnxruntime  # noqa: F401 - missing: named here, not inside session()
        from tokenizers import Tokenizer
    except ImportError as exc:  # pragma: no cover - core dependencies
        raise BackendUnavailableError(f"a model folder needs {exc.name}: pip install hybridkb") from exc
    try:
        tokenizer = Tokenizer.from_file(str(folder.tokenizer))
    except Exception as exc:  # the tokenizers library raises its own exception types
        raise InvalidInputError(f"cannot read {folder.tokenizer}: {exc}") from None
    tokenizer.enable_truncation(max_length=folder.max_tokens)
    # Pad each batch to its longest text, with the file's pad token if it names one (a file
    # may pad to a fixed length shorter than max_tokens: all-MiniLM-L6-v2's pads to 128).
    given = tokenizer.padding or {}
    pad = given.get("pad_token") or next(
        (t for t in ("[PAD]", "<pad>", "<|endoftext|>") if tokenizer.token_to_id(t) is not None), "[PAD]")
    tokenizer.enable_padding(direction=given.get("direction", "right").lower(),
                             pad_id=given.get("pad_id", tokenizer.token_to_id(pad) or 0),
                             pad_type_id=given.get("pad_type_id", 0), pad_token=pad)
    try:
        return tokenizer, session(folder.model)
    except Exception as exc:  # onnxruntime's own exception types
        raise InvalidInputError(f"cannot load {folder.model}: {exc}") from None


def session(model: str | Path) -> Any:
    """An onnxruntime session on the CPU (HYBRIDKB_THREADS threads; 0: onnxruntime's choice)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(os.environ.get("HYBRIDKB_THREADS", "0"))
    options.log_severity_level = 3
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def feeds(session: Any, encodings: list[Any]) -> dict[str, Any]:
    """The model's inputs from tokenizer encodings: ids, mask and (if asked) token types."""
    columns = {"input_ids": "ids", "attention_mask": "attention_mask", "token_type_ids": "type_ids"}
    out = {}
    for spec in session.get_inputs():
        if spec.name not in columns:
            raise InvalidInputError(f"the model asks for input {spec.name!r}; hybridkb gives "
                                    f"{', '.join(columns)}")
        dtype = np.int32 if "int32" in spec.type else np.int64
        out[spec.name] = np.array([getattr(e, columns[spec.name]) for e in encodings], dtype=dtype)
    return out


def pool(hidden: np.ndarray, mask: np.ndarray, how: str) -> np.ndarray:
    """One row per text from (texts, tokens, dim) token vectors and their 0/1 mask."""
    m = mask.astype(hidden.dtype)[:, :, None]
    pooled: np.ndarray
    if how == "cls":
        pooled = hidden[:, 0]
    elif how == "max":
        pooled = np.where(m > 0, hidden, -np.inf).max(axis=1)
    elif how == "last":
        last = mask.shape[1] - 1 - np.argmax(mask[:, ::-1] > 0, axis=1)  # right or left padded
        pooled = hidden[np.arange(len(hidden)), last]
    else:
        pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    return pooled
