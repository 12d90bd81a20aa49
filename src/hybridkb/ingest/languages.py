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

_PROSE = {".md": MARKDOWN, ".markdown": MARKDOWN, ".mdx": MARKDOWN,
          ".txt": TEXT, ".rst": TEXT, ".adoc": TEXT}

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
                              "composer.lock", "yarn.lock"})
_GENERATED_SUFFIXES = (".min.js", ".min.css")


def classify(name: str) -> FileType | None:
    """The type of a file by its name; None for files we do not index."""
    if name in _BY_NAME:
        return _BY_NAME[name]
    suffix = PurePosixPath(name).suffix.lower()
    return _PROSE.get(suffix) or _CODE.get(suffix)


def is_generated(name: str) -> bool:
    return name in _GENERATED_NAMES or name.lower().endswith(_GENERATED_SUFFIXES)
