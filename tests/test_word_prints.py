"""Each item's word print (dedup.word_print) is stored with it, on both backends, and a
search's duplicate collapse reads it instead of tokenizing the text (issue #15: tokenizing
was about a millisecond of a first-time search at 100k items)."""

from __future__ import annotations

import hashlib
from typing import Any

import psycopg

from hybridkb import KnowledgeBase, dedup
from hybridkb.storage.sqlite.driver import driver


def _sql(target: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on the store's database directly (`?` marks on both)."""
    if target.startswith("postgresql://"):
        with psycopg.connect(target, autocommit=True) as conn:
            cur = conn.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []
    # The store's own SQLite library: a second copy of SQLite in one process (the stdlib
    # module beside sqlean) drops the store's POSIX locks when it closes the file.
    conn = driver().connect(target)
    try:
        with conn:
            return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def _prints(target: str) -> dict[str, int | None]:
    return dict(_sql(target, "SELECT id, word_print FROM items"))  # type: ignore[arg-type]


def test_word_print_is_stable_and_ignores_order_case_and_punctuation() -> None:
    # Stores keep prints across processes and versions: the function must never drift.
    assert dedup.word_print("one two three") == 2395301973939371864
    assert dedup.word_print("Three, two one! one") == dedup.word_print("one two three")
    assert dedup.word_print("one two") != dedup.word_print("one two three")
    assert dedup.word_print("日本語 テキスト") == dedup.word_print("テキスト 日本語")


def _print_of_tokens(text: str) -> int:
    """The print's definition, from dedup.tokens: the hash of the sorted tokens joined."""
    joined = "\x00".join(sorted(dedup.tokens(text))).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(joined, digest_size=8).digest(), "little", signed=True)


def test_word_print_is_the_hash_of_the_token_set_for_every_script() -> None:
    # word_print splits bytes and only runs the regex on pieces holding non-ASCII bytes:
    # each case below mixes ASCII separators with non-ASCII words or separators.
    texts = ["", "  ", "plain ascii, with punctuation!", "İstanbul ıi Iİ", "naïve café’s “quote” — dash…",
             "日本語のテキスト abc", "a\ud800b c", "x\u00a0y", "под_чёркивание 123 ΑΒΓ ß ẞ", "e\u0301cole",
             "ﬁ ligature", "Σίσυφος ΌΣΟΣ", "😀 emoji😀word", "tab\there\nnew line", "a\u2019b a b"]
    for text in texts:
        assert dedup.word_print(text) == _print_of_tokens(text), text
    assert dedup.word_print("don’t stop") == dedup.word_print("don t stop")


def test_each_item_is_stored_with_its_word_print(kb: KnowledgeBase, target: str) -> None:
    kb.add_many([{"id": "a", "text": "Alpha beta gamma."}, {"id": "b", "text": "delta epsilon"}])
    assert _prints(target) == {"a": dedup.word_print("alpha beta gamma"),
                               "b": dedup.word_print("delta epsilon")}
    kb.upsert("zeta eta", id="a")  # a replaced text gets the print of the new one
    assert _prints(target)["a"] == dedup.word_print("zeta eta")
    assert kb.get("a").word_print == dedup.word_print("zeta eta")  # type: ignore[union-attr]
    assert "word_print" not in kb.get("a").to_dict()  # type: ignore[union-attr]


def test_the_collapse_reads_the_stored_print(kb: KnowledgeBase, target: str) -> None:
    kb.add_many([{"id": "a", "text": "kestrel hovers over the field"},
                 {"id": "b", "text": "The field: kestrel hovers over"},
                 {"id": "c", "text": "kestrel nests on the cliff"}])

    def shown() -> list[str]:
        return sorted(h.id for h in kb.search("kestrel", mode="fts", limit=10).hits)

    assert shown() == ["a", "c"]  # b has a's word set: collapsed into a
    # A row without a print (written before the column existed) is printed at search time.
    _sql(target, "UPDATE items SET word_print = NULL WHERE id = ?", ("b",))
    assert shown() == ["a", "c"]
    # Equal stored prints alone never collapse different word sets (confirmed on the words).
    _sql(target, "UPDATE items SET word_print = (SELECT word_print FROM items WHERE id = ?) "
                 "WHERE id = ?", ("a", "c"))
    assert shown() == ["a", "c"]
    # The stored print is what the collapse goes by: told apart by their prints, a and b
    # both show (a search that tokenized every text would still collapse them).
    _sql(target, "UPDATE items SET word_print = 8 WHERE id = ?", ("b",))
    assert shown() == ["a", "b", "c"]
