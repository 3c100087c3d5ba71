"""A server that means harm, or is badly broken, gets a clear :class:`RemoteError` in
bounded time and memory, never a traceback or a hang; and nothing secret (the API key, a
password in the address) or acting on a terminal (escape sequences) reaches a message.
Against the deliberately broken server of :mod:`tests.remote.broken_server`."""

from __future__ import annotations

import threading
import time

import pytest

from app.remote import (
    RemoteClient,
    RemoteError,
    ServerAuthError,
    ServerHTTPError,
    ServerProtocolError,
    ServerTimeoutError,
    ServerUnreachableError,
    StreamDroppedError,
)
from app.formatting import printable
from app.remote.display import redact_url, redact_userinfo
from app.remote.errors import RemoteCancelledError
from tests.remote.broken_server import BrokenServer
from tests.remote.llama_server import free_port

MESSAGES = [{"role": "user", "content": "hi"}]


def _causes_text(exc: BaseException) -> str:
    """The text of ``exc`` and of every exception it was raised from or while handling."""
    parts = []
    seen: BaseException | None = exc
    while seen is not None:
        parts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return " | ".join(parts)


# -- 1: a model list trickled byte by byte -------------------------------------------

def test_a_trickled_model_list_ends_at_the_deadline(broken: BrokenServer) -> None:
    """One byte every 0.05 s keeps the read timeout from ever firing: the whole answer's
    deadline ends it (it ran for 100,000 × 0.05 s before)."""
    broken.mode = "models-trickle"
    t0 = time.monotonic()
    with RemoteClient(broken.base_url, answer_deadline=1.0) as client:
        with pytest.raises(ServerTimeoutError, match="took more than 1 s to answer GET /v1/models "
                                                     r"\(it sends its answer too slowly\)"):
            client.identify()
    assert time.monotonic() - t0 < 5
    broken.mode = "ok"


def test_a_trickled_model_list_stops_when_cancelled(broken: BrokenServer) -> None:
    broken.mode = "models-trickle"
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    t0 = time.monotonic()
    try:
        with RemoteClient(broken.base_url) as client, pytest.raises(RemoteCancelledError):
            client.identify(cancel)
    finally:
        timer.cancel()
    assert time.monotonic() - t0 < 5
    broken.mode = "ok"


# -- 3: JSON nested past the recursion limit, figures that are not counts --------------

@pytest.mark.parametrize(("mode", "error", "words"), [
    ("models-deep", ServerProtocolError, "not OpenAI-compatible .JSON nested too deep"),
    ("deep-json", ServerProtocolError, "JSON that is not a chat completion"),
    ("deep-error", ServerHTTPError, "answered 500 .* nested too deep"),
])
def test_json_nested_too_deep_is_refused_in_a_sentence(
        broken: BrokenServer, mode: str, error: type[Exception], words: str) -> None:
    broken.mode = mode
    with RemoteClient(broken.base_url) as client, pytest.raises(error, match=words) as info:
        if mode.startswith("models"):
            client.models()
        else:
            client.chat("broken", MESSAGES, scrape_metrics=False)
    assert len(str(info.value)) < 400
    broken.mode = "ok"


def test_a_proxys_html_error_page_reads_as_its_words(broken: BrokenServer) -> None:
    broken.mode = "proxy-502"
    with RemoteClient(broken.base_url) as client, pytest.raises(ServerHTTPError) as info:
        client.chat("broken", MESSAGES, scrape_metrics=False)
    assert str(info.value).endswith("answered 502 to the chat request: "
                                    "502 Bad Gateway nginx/1.24.0")
    broken.mode = "ok"


def test_an_html_page_gives_its_text_without_markup_head_or_scripts() -> None:
    from app.remote.display import looks_like_html, page_text

    page = ("<!DOCTYPE html><html><head><title>T</title><style>p{}</style></head><body>"
            "<script>alert(1)</script><p>Service &amp; more\n\n  unavailable</p><p>")
    assert looks_like_html(page) and not looks_like_html("upstream timed out <p>")
    assert page_text(page) == "Service & more unavailable"
    assert page_text("<html><body></body></html>") == ""
    assert len(page_text("<p>" + "word " * 1000)) == 200


@pytest.mark.parametrize("max_tokens", [None, 50])
def test_a_chunk_nested_too_deep_is_garbage_keeping_the_text(
        broken: BrokenServer, max_tokens: int | None) -> None:
    """Without max_tokens the chunk is parsed and found too deep; with it, it is longer
    than 50 tokens' bound and is not a chunk (it does not open an object): garbage too,
    not an overrun of max_tokens."""
    broken.mode = "deep-chunk"
    with RemoteClient(broken.base_url) as client, pytest.raises(StreamDroppedError) as info:
        client.chat("broken", MESSAGES, max_tokens=max_tokens, scrape_metrics=False)
    assert "not an OpenAI-compatible stream" in str(info.value)
    assert info.value.partial_text == "Hello, world"
    broken.mode = "ok"


def test_figures_that_are_not_counts_are_not_reported(broken: BrokenServer) -> None:
    """NaN/Infinity draft counts, 10**30 completion tokens, -5 prompt tokens, -3
    predicted tokens and a rate of 1e999: none is shown; the chunks count the tokens
    (this raised OverflowError, and showed "-5 tokens" or 10**30 tokens)."""
    broken.mode = "bad-figures"
    with RemoteClient(broken.base_url) as client:
        result = client.chat("broken", MESSAGES, scrape_metrics=False)
    assert result.text == "Hello, world" and result.finish_reason == "stop"
    assert result.n_tokens == 2 and result.token_count_source == "chunks"
    assert result.prompt_tokens is None and result.figures is None
    assert result.server_decode_tps is None
    broken.mode = "ok"


# -- 2 and 7: streams without text, or without SSE framing ---------------------------

@pytest.mark.parametrize("mode", ["empty-deltas", "no-choices", "comments", "blank-lines"])
def test_a_stream_without_text_ends_in_a_sentence(broken: BrokenServer, mode: str) -> None:
    """Events without text, comments or blank lines without end are read only so far
    (16 lines per token asked and 10,000 more), then refused: they ran until a stop."""
    from app.remote.stream import NO_TEXT_LINES_EXTRA, NO_TEXT_LINES_PER_TOKEN

    broken.mode = mode
    t0 = time.monotonic()
    with RemoteClient(broken.base_url) as client, pytest.raises(StreamDroppedError) as info:
        client.chat("broken", MESSAGES, max_tokens=20, scrape_metrics=False)
    limit = NO_TEXT_LINES_PER_TOKEN * 20 + NO_TEXT_LINES_EXTRA
    assert f"more than {limit} lines without reply text" in str(info.value)
    assert "not an OpenAI-compatible stream" in str(info.value)
    assert time.monotonic() - t0 < 10
    broken.mode = "ok"


@pytest.mark.parametrize("mode", ["raw-text", "endless-field"])
def test_text_without_sse_framing_is_garbage_not_an_overrun(broken: BrokenServer,
                                                            mode: str) -> None:
    """A stream of ``xxxx…`` or one endless ``event:`` line is not reply text past
    max_tokens (it ended as finish "length", 0 tokens, exit 0): it is not a stream."""
    broken.mode = mode
    with RemoteClient(broken.base_url) as client, pytest.raises(StreamDroppedError) as info:
        client.chat("broken", MESSAGES, max_tokens=20, scrape_metrics=False)
    assert "not an OpenAI-compatible stream (a line longer than" in str(info.value)
    broken.mode = "ok"


# -- 4: addresses and keys that are not ------------------------------------------------

@pytest.mark.parametrize(("url", "words"), [
    ("http://[::1", "Invalid IPv6 URL"),
    ("http://127.0.0.1:18450%00x", "Port could not be cast"),
    ("http://127.0.0.1:99999", "Port out of range"),
    ("http://127.0.0.1:0", "port 0 is not a port"),
    ("http://h%00x:80", "host has characters"),
    ("http://ho st:80", "a space or a control character"),
    ("http://h\x00x:80", "a space or a control character"),
    ("http://127.0.0.1:1/" + "a" * 70_000, "70019 characters long"),
])
def test_addresses_that_are_not_are_refused_in_a_sentence(url: str, words: str) -> None:
    with pytest.raises(RemoteError, match=words) as info:
        RemoteClient(url)
    message = str(info.value)
    assert len(message) < 400 and "\x00" not in message
    assert message == printable(message)


@pytest.mark.parametrize("key", ["clé", "sk-sec\x01ret-1234", "sk-secret\n123"])
def test_a_key_a_header_cannot_carry_is_refused_without_showing_it(key: str) -> None:
    with pytest.raises(RemoteError, match="API key has a character") as info:
        RemoteClient("http://127.0.0.1:1", api_key=key)
    assert key not in str(info.value) and "sec" not in str(info.value)


def test_a_key_with_a_windows_line_end_is_sent_without_it(broken: BrokenServer) -> None:
    """A key file written on Windows ends in CR LF: the key is sent without them (httpx
    refused the header, and its error showed the key)."""
    broken.mode = "ok"
    with RemoteClient(broken.base_url, api_key=" sk-secret-123\r\n") as client:
        client.models()
        assert broken.last_auth == "Bearer sk-secret-123"
    with RemoteClient(broken.base_url, api_key=" \r\n") as client:  # only spaces: no key
        client.models()
        assert broken.last_auth is None


# -- 5: secrets in messages -------------------------------------------------------------

def test_a_key_the_server_repeats_is_not_shown(broken: BrokenServer) -> None:
    """The server's 401 repeats the key and carries an escape sequence: the message
    shows no key, nor does any exception it was raised from, and the escape is text."""
    broken.mode = "models-echo-key"
    with RemoteClient(broken.base_url, api_key="sk-secret-echo-42") as client:
        with pytest.raises(ServerAuthError) as info:
            client.models()
    assert "Bearer ***" in str(info.value)
    assert "\x1b" not in str(info.value) and "\\x1b[31mRED" in str(info.value)
    assert "sk-secret-echo-42" not in _causes_text(info.value)
    broken.mode = "ok"


def test_a_password_in_the_address_is_never_shown(broken: BrokenServer) -> None:
    url = f"http://user:s3cretpass@127.0.0.1:{free_port()}"
    with RemoteClient(url) as client:
        assert client.display_url == url.replace("s3cretpass", "***")
        assert "s3cretpass" not in repr(client)
        with pytest.raises(ServerUnreachableError) as info:
            client.models()
    assert "user:***@127.0.0.1" in str(info.value)
    assert "s3cretpass" not in _causes_text(info.value)
    with pytest.raises(RemoteError) as bad:
        RemoteClient("http://user:s3cretpass@[::1")
    assert "s3cretpass" not in str(bad.value) and "user:***@" in str(bad.value)
    broken.mode = "models-401"
    with RemoteClient(broken.base_url.replace("http://", "http://user:s3cretpass@")) as client:
        info_ = pytest.raises(ServerAuthError, client.models)
    assert "s3cretpass" not in str(info_.value) and "user:***@" in str(info_.value)
    broken.mode = "ok"


def test_redaction_helpers() -> None:
    assert redact_url("http://u:p4ss@h:1/x") == "http://u:***@h:1/x"
    assert redact_url("http://u@h") == "http://u@h" and redact_url("http://[::1") == "http://[::1"
    assert redact_userinfo("generate --server=https://u:p4ss@h:1 x") == (
        "generate --server=https://u:***@h:1 x")
    assert printable("a\x00b\x1b[2J\x9b\x7f\r\n\té") == "a\\x00b\\x1b[2J\\x9b\\x7f\\r\n\té"


def test_a_model_list_with_malformed_entries_keeps_the_good_ones(broken: BrokenServer) -> None:
    """Entries without a string id are left out (logged), the others offered; a list of
    nothing but such entries is no OpenAI model list."""
    client = RemoteClient(broken.base_url)
    try:
        broken.mode = "models-mixed"
        assert [m.id for m in client.models()] == ["good"]
        broken.mode = "models-no-id"
        with pytest.raises(ServerProtocolError, match="is not an OpenAI model list"):
            client.models()
    finally:
        client.close()
