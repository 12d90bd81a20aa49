"""Which files we index, as what: a file name decides the chunker, the item kind and the language."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True, slots=True)
class FileType:
    language: str  # "markdown", "text", or a programming/config language
    kind: str  # the item kind: "code" or "document"

    @property
    def is_code(self) -> bool:
        return self.kind == "code"


MARKDOWN = FileType("markdown", "document")
TEXT = FileType("text", "document")
HTML = FileType("html", "document")
NOTEBOOK = FileType("notebook", "document")
CSV = FileType("csv", "document")

_PROSE = {".md": MARKDOWN, ".markdown": MARKDOWN, ".mdx": MARKDOWN,
          ".txt": TEXT, ".rst": TEXT, ".adoc": TEXT, ".html": HTML, ".htm": HTML,
          ".xhtml": HTML, ".ipynb": NOTEBOOK, ".csv": CSV, ".tsv": CSV}

_CODE_SUFFIXES = {
    "python": (".py", ".pyi"),
    "javascript": (".js", ".mjs", ".cjs", ".jsx"),
    "typescript": (".ts", ".mts", ".cts", ".tsx"),
    "go": (".go",), "rust": (".rs",), "java": (".java",), "kotlin": (".kt", ".kts"),
    "scala": (".scala",), "swift": (".swift",), "csharp": (".cs",), "php": (".php",),
    "c": (".c", ".h"), "cpp": (".cc", ".cpp", ".cxx", ".hh", ".hpp", ".hxx"),
    "ruby": (".rb",), "shell": (".sh", ".bash", ".zsh"), "sql": (".sql",), "lua": (".lua",),
    "toml": (".toml",), "ini": (".ini", ".cfg"), "yaml": (".yaml", ".yml"), "json": (".json",),
    "css": (".css", ".scss"), "proto": (".proto",), "graphql": (".graphql", ".gql"),
    "hcl": (".tf", ".hcl"),
}
_CODE = {suffix: FileType(lang, "code") for lang, suffixes in _CODE_SUFFIXES.items() for suffix in suffixes}

_BY_NAME = {
    "Makefile": FileType("make", "code"), "GNUmakefile": FileType("make", "code"),
    "Dockerfile": FileType("dockerfile", "code"), "Containerfile": FileType("dockerfile", "code"),
    "README": TEXT, "CHANGELOG": TEXT, "CONTRIBUTING": TEXT, "NOTES": TEXT,
}

# Machine-written files: large, noisy, and never what a question is about.
_GENERATED_NAMES = frozenset({"package-lock.json", "pnpm-lock.yaml", "npm-shrinkwrap.json",
                              "composer.lock", "yarn.lock", "Cargo.lock", "poetry.lock", "Pipfile.lock",
                              "Gemfile.lock", "uv.lock", "pdm.lock", "go.sum", "flake.lock",
                              "packages.lock.json", "bun.lockb"})
_GENERATED_SUFFIXES = (".min.js", ".min.css", ".min.mjs", ".bundle.js", ".map", ".pb.go", "_pb2.py")
# Folders of someone else's code, copied in.
VENDORED_DIRS = frozenset({"vendor", "vendored", "_vendor", "third_party", "third-party", "thirdparty"})
# Data formats: worth indexing when small (a config), noise when large (a dump, a tokenizer).
DATA_LANGUAGES = frozenset({"json", "csv"})
MAX_DATA_BYTES = 32_000
# A line this long in a source file means machine output (minified, generated).
MINIFIED_LINE_CHARS = 1000


def classify(name: str) -> FileType | None:
    """The type of a file by its name; None for files we do not index."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    suffix = PurePosixPath(name).suffix.lower()
    return _PROSE.get(suffix) or _CODE.get(suffix)


def generated_reason(name: str) -> str | None:
    """Why a file name says "machine-written", or None."""
    if name in _GENERATED_NAMES or name.lower().endswith(".lock"):
        return "lock file"
    if name.lower().endswith(_GENERATED_SUFFIXES):
        return "generated or minified file"
    return None


def is_generated(name: str) -> bool:
    return generated_reason(name) is not None


def looks_minified(text: str, file_type: FileType) -> bool:
    """Code whose lines are mostly very long: a minified or generated bundle."""
    if not file_type.is_code or file_type.language in DATA_LANGUAGES:
        return False
    lines = text.count("\n") + 1
    return len(text) / lines > 300 or (lines <= 5 and len(text) > MINIFIED_LINE_CHARS * 5)
