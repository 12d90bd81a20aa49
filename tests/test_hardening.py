"""The attacks of issue #13, each one a test that failed before the fix (see docs/reliability.md)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

import hybridkb
from hybridkb import BackendUnavailableError, HashingEmbedder, InvalidInputError
from hybridkb.cli import cli
from hybridkb.validation import redact_target, scrub

# -- 2. an empty target is refused, never a temporary database --------------------------------


@pytest.mark.parametrize("target", ["", "   ", "\t"])
def test_an_empty_target_is_refused(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="store target is empty"):
        hybridkb.open(target, embedder=None)
    result = CliRunner().invoke(cli, ["--db", target, "--embedder", "hashing-8", "add", "important"])
    assert result.exit_code == 1
    assert "store target is empty" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere


# -- 3. PostgreSQL passwords never shown; malformed URLs are clear errors ----------------------

SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(("url", "shown"), [
    (f"postgresql://u:{SECRET}@h:5/db?x=1", "postgresql://u:***@h:5/db?x=1"),
    (f"postgresql://u@h/db?password={SECRET}", "postgresql://u@h/db?password=***"),
    (f"postgres://h/db?sslmode=disable&Password={SECRET}#f", "postgres://h/db?sslmode=disable&Password=***#f"),
    (f"postgresql://h/db?pass%77ord={SECRET}", "postgresql://h/db?pass%77ord=***"),
    (f"postgresql://u:{SECRET}@[::1", "postgresql://u:***@[::1"),
    (f"postgresql://u:{SECRET}@h1:5,h2:6/db", "postgresql://u:***@h1:5,h2:6/db"),
    (f"host=h password={SECRET} dbname=x", "host=h password=*** dbname=x"),
    (f"host=h password='{SECRET} x' dbname=x", "host=h password=*** dbname=x"),
    ("postgresql://u@h/db", "postgresql://u@h/db"),
    ("kb.db", "kb.db"),
])
def test_every_password_form_is_redacted(url: str, shown: str) -> None:
    assert redact_target(url) == shown
    assert SECRET not in scrub(f"error near {url!r}: {url}", url)
    if SECRET in url and "x'" not in url:
        assert scrub(f"password {SECRET} refused", url) == "password *** refused"


@pytest.mark.parametrize("url", [
    "postgresql://[::1", f"postgresql://u:{SECRET}@[::1", f"postgresql://u:{SECRET}@h:99999/db",
    f"postgresql://u@h/db?password={SECRET}&nosuchparam=1", f"postgresql://u:{SECRET}@h:port/db",
])
def test_a_malformed_url_is_a_clear_error_without_the_password(url: str) -> None:
    with pytest.raises((InvalidInputError, BackendUnavailableError)) as info:
        hybridkb.open(url, embedder=None, connect_timeout=1)
    assert SECRET not in str(info.value) and "Traceback" not in str(info.value)
    result = CliRunner().invoke(cli, ["--db", url, "--no-embedder", "init"])
    assert result.exit_code == 1 and result.output.startswith("error: ")
    assert SECRET not in result.output


def _with_password(pg_url: str, form: str) -> str:
    """The test server trusts every login, so any password is accepted (and must not leak)."""
    if form == "query":
        return f"{pg_url}?password={SECRET}"
    if form == "userinfo":
        scheme, rest = pg_url.split("://", 1)
        user, host = rest.split("@", 1)
        return f"{scheme}://{user}:{quote(SECRET)}@{host}"
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**{**conninfo_to_dict(pg_url), "password": SECRET})


@pytest.mark.parametrize("form", ["query", "userinfo", "conninfo"])
def test_a_real_store_never_shows_its_password(pg_url: str, form: str) -> None:
    url = _with_password(pg_url, form)
    with hybridkb.open(url, embedder=HashingEmbedder(8)) as kb:
        kb.add("hello", id="a")
        assert SECRET not in kb.target and "***" in kb.target
        assert SECRET not in json.dumps(kb.stats())
    for args in (["--json", "stats"], ["stats"], ["search", "hello"]):
        result = CliRunner().invoke(cli, ["--db", url, "--embedder", "hashing-8", *args])
        assert result.exit_code == 0, result.output
        assert SECRET not in result.output
    bad = url.replace("hkb_test", "hkb_missing") if form != "conninfo" else url + " port=1"
    with pytest.raises(BackendUnavailableError) as info:
        hybridkb.open(bad, embedder=None, connect_timeout=1)
    assert SECRET not in str(info.value)
