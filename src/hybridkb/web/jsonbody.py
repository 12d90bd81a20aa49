"""JSON from a client, bounded before and while it is parsed (pure).

Python's parser recurses once per level and turns a 5,000-digit integer into a
ValueError of its own; both would reach the client as a 500. Here nesting is measured
on the raw text first (strings blanked out, then a running count of brackets) and
numbers are bounded by the parser's hooks, so a hostile body is a 400 naming the limit.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np

from ..errors import InvalidInputError
from ..validation import MAX_METADATA_DEPTH

# Metadata may nest MAX_METADATA_DEPTH levels inside a body (item -> metadata -> ...).
MAX_DEPTH = MAX_METADATA_DEPTH + 8
MAX_NUMBER_CHARS = 100

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
# '[' and '{' open a level (2 - 1 = +1), ']' and '}' close one (0 - 1 = -1).
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")


def too_deep(raw: bytes) -> bool:
    """Whether `raw` nests arrays and objects deeper than MAX_DEPTH (brackets in strings
    do not count)."""
    if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH:
        return False
    brackets = _STRING.sub(b'""', raw).translate(_STEPS, _NOT_BRACKETS)
    steps = np.frombuffer(brackets, dtype=np.int8).astype(np.int32) - 1
    return bool(steps.size) and int(steps.cumsum().max()) > MAX_DEPTH


def _int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise InvalidInputError(f"a number in the JSON has over {MAX_NUMBER_CHARS} digits")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise InvalidInputError(f"a number in the JSON has over {MAX_NUMBER_CHARS} characters")
    value = float(text)
    if not math.isfinite(value):
        raise InvalidInputError(f"the number {text} is out of range")
    return value


def _constant(name: str) -> Any:
    raise InvalidInputError(f"{name} is not a JSON value")


def parse(raw: bytes | str, what: str = "the body") -> Any:
    """`raw` as a JSON value; InvalidInputError when it is not JSON or passes a limit."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if too_deep(data):
        raise InvalidInputError(f"{what} nests arrays and objects deeper than {MAX_DEPTH} levels")
    try:
        return json.loads(data, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{what} is not valid JSON: {exc}") from exc
    except RecursionError as exc:  # never expected past the nesting check; still not a 500
        raise InvalidInputError(f"{what} nests too deep") from exc
