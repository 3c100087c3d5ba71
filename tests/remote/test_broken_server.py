"""A server that is down, slow, answers garbage or drops a stream gets a clear error
(a :class:`~app.remote.errors.RemoteError` written for the user) and the text already
received is kept. Against a deliberately broken server on 127.0.0.1
(:mod:`tests.remote.broken_server`)."""

from __future__ import annotations

import re
import socket

import pytest

from app.remote import (
    RemoteClient,
    RemoteDelta,
    RemoteError,
    RemoteResult,
    ServerAuthError,
    ServerHTTPError,
    ServerProtocolError,
    ServerTimeoutError,
    ServerUnreachableError,
    StreamDroppedError,
)
from tests.remote.broken_server import BrokenServer
from tests.remote.llama_server import free_port

MESSAGES = [{"role": "user", "content": "hi"}]


def _collect(client: RemoteClient) -> tuple[list[str], Exception | RemoteResult]:
    texts: list[str] = []
    try:
        for event in client.stream_chat("broken", MESSAGES):
            if isinstance(event, RemoteDelta):
                texts.append(event.text)
            else:
                return texts, event
    except RemoteError as exc:
        return texts, exc
    raise AssertionError("the stream ended without a result or an error")


def test_a_good_stream_ends_with_its_result(broken: BrokenServer) -> None:
    broken.mode = "ok"
    with RemoteClient(broken.base_url) as client:
        texts, result = _collect(client)
    assert isinstance(result, RemoteResult)
    assert texts == ["Hello", ", world"] and result.text == "Hello, world"
    assert result.finish_reason == "stop" and result.token_count_source == "chunks"
    assert result.figures is None  # this server reports nothing about speculation


def test_nothing_listening_is_unreachable() -> None:
    with RemoteClient(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(ServerUnreachableError, match="Cannot reach"):
            client.models()
        with pytest.raises(ServerUnreachableError):
            list(client.stream_chat("m", MESSAGES))


@pytest.mark.parametrize(("mode", "error", "words"), [
    ("models-garbage", ServerProtocolError, "did not answer JSON"),
    ("models-401", ServerAuthError, "Invalid API Key"),
])
def test_model_list_failures(broken: BrokenServer, mode: str, error: type[Exception],
                             words: str) -> None:
    broken.mode = mode
    with RemoteClient(broken.base_url, api_key="secret-key-123") as client:
        with pytest.raises(error, match=words) as info:
            client.models()
    assert "secret-key-123" not in str(info.value)


@pytest.mark.parametrize(("mode", "words"), [
    ("garbage", "not an OpenAI-compatible stream"),
    ("drop-close", "ended the stream before the reply was complete"),
    ("drop-chunked", "connection to .* broke during the reply"),
    ("error-event", "slot crashed"),
])
def test_a_broken_stream_keeps_the_text_received(broken: BrokenServer, mode: str,
                                                 words: str) -> None:
    broken.mode = mode
    with RemoteClient(broken.base_url) as client:
        texts, error = _collect(client)
    assert texts == ["Hello", ", world"]
    assert isinstance(error, StreamDroppedError)
    assert error.partial_text == "Hello, world"
    assert re.search(words, str(error))


def test_an_error_status_before_the_stream_is_shown(broken: BrokenServer) -> None:
    broken.mode = "chat-500"
    with RemoteClient(broken.base_url) as client:
        texts, error = _collect(client)
    assert texts == [] and isinstance(error, ServerHTTPError)
    assert error.status == 500 and "out of memory" in str(error)


def test_a_whole_json_answer_is_taken_and_html_is_refused(broken: BrokenServer) -> None:
    broken.mode = "json"
    with RemoteClient(broken.base_url) as client:
        texts, result = _collect(client)
        assert isinstance(result, RemoteResult) and texts == ["whole"]
        assert result.n_tokens == 1 and result.token_count_source == "usage"
        broken.mode = "html"
        texts, error = _collect(client)
    assert isinstance(error, ServerProtocolError) and "text/html" in str(error)


def test_a_silent_server_times_out_keeping_the_text(broken: BrokenServer) -> None:
    broken.mode = "slow"
    broken.release.clear()
    try:
        with RemoteClient(broken.base_url, read_timeout=0.5) as client:
            texts, error = _collect(client)
    finally:
        broken.release.set()
    assert texts == ["Hello", ", world"]
    assert isinstance(error, StreamDroppedError) and error.partial_text == "Hello, world"
    assert isinstance(error.__cause__, Exception)


def test_a_server_that_never_answers_is_a_timeout() -> None:
    """A listening socket that accepts connections (the kernel's backlog) and never
    answers: the model list times out with a sentence, not a hang."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with RemoteClient(url, read_timeout=0.5) as client:
            with pytest.raises(ServerTimeoutError, match="sent nothing for 0.5 s"):
                client.models()
        # the whole answer's deadline, before the read timeout: not "too slowly"
        with RemoteClient(url, answer_deadline=0.5) as client:
            with pytest.raises(ServerTimeoutError, match="not even a response head came"):
                client.models()


def test_bad_addresses_are_refused_clearly() -> None:
    with pytest.raises(RemoteError, match="not a server address"):
        RemoteClient("ftp://example.org")
    for typo in ("htp:/bad", "http:/localhost:8080"):
        with pytest.raises(RemoteError, match="should start with http:// or https://"):
            RemoteClient(typo)
    with pytest.raises(RemoteError, match="not a server address"):
        RemoteClient("http://")
    assert RemoteClient("127.0.0.1:8080/v1/").base_url == "http://127.0.0.1:8080"


def test_stop_does_not_wait_for_a_silent_server(broken: BrokenServer) -> None:
    """The server sends two chunks, then nothing (read timeout 300 s): a stop set after
    the second chunk ends the reply at once as cancelled, with its text, and the client
    goes on working."""
    import threading

    broken.mode = "slow"
    broken.release.clear()
    broken.slow_ended = False
    cancel = threading.Event()
    texts: list[str] = []
    result = None
    try:
        with RemoteClient(broken.base_url) as client:
            for event in client.stream_chat("broken", MESSAGES, cancel=cancel):
                if isinstance(event, RemoteDelta):
                    texts.append(event.text)
                    if len(texts) == 2:
                        cancel.set()
                else:
                    result = event
            # the reply ended while the server still held its answer open (it holds it
            # until released, or 60 s): the stop did not wait for the server
            assert not broken.slow_ended
            broken.release.set()
            broken.mode = "ok"
            again = client.chat("broken", MESSAGES)
    finally:
        broken.release.set()
    assert isinstance(result, RemoteResult) and result.finish_reason == "cancelled"
    assert result.text == "Hello, world" == again.text


@pytest.mark.parametrize("mode", ["endless", "huge"])
def test_a_server_that_ignores_max_tokens_is_cut_off(broken: BrokenServer, mode: str) -> None:
    """A server that writes past ``max_tokens`` (without end, or one enormous chunk) is
    read only that far: the reply ends as ``length``, says the server overran, and its
    text stays bounded (without the cut, memory grew for as long as the server wrote)."""
    broken.mode, broken.endless_sent = mode, 0
    texts: list[str] = []
    with RemoteClient(broken.base_url) as client:
        for event in client.stream_chat("broken", MESSAGES, max_tokens=50,
                                        scrape_metrics=False):
            if isinstance(event, RemoteDelta):
                texts.append(event.text)
            else:
                result = event
    assert isinstance(result, RemoteResult)
    assert result.finish_reason == "length" and result.overran
    assert result.text == "".join(texts)
    if mode == "endless":
        assert len(texts) == 50 and result.text == "Hello, world" + " word" * 48
        assert result.n_tokens == 50 and result.token_count_source == "chunks"
    else:  # the 1 MB event is longer than 50 tokens' bound: not read, nor kept
        assert result.text == "Hello, world"
    broken.mode = "ok"  # the server is still there for the next request
    with RemoteClient(broken.base_url) as client:
        assert _collect(client)[1].finish_reason == "stop"  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["endless-error", "endless-models"])
def test_an_answer_without_end_is_read_only_so_far(broken: BrokenServer, mode: str) -> None:
    """An error body or a model list that never ends is read up to MAX_BODY_BYTES, then
    refused in one sentence (it was read whole, for as long as the server wrote)."""
    from app.remote.stream import MAX_BODY_BYTES

    broken.mode = mode
    with RemoteClient(broken.base_url) as client:
        with pytest.raises(ServerProtocolError, match=f"more than {MAX_BODY_BYTES // 2**20} MiB"):
            if mode == "endless-models":
                client.models()
            else:
                client.chat("broken", MESSAGES, scrape_metrics=False)
    broken.mode = "ok"


def test_stop_does_not_wait_for_a_server_that_has_not_answered(broken: BrokenServer) -> None:
    """The server took the request and sends nothing yet, not even headers (it reads a
    long prompt, or the request waits in its queue): a stop ends the reply as cancelled
    at once, not at the next byte or after the 300 s read timeout."""
    import threading

    broken.mode, broken.mute_ended = "mute", False
    broken.release.clear()
    cancel = threading.Event()
    timer = threading.Timer(0.3, cancel.set)
    timer.start()
    try:
        with RemoteClient(broken.base_url) as client:
            result = client.chat("broken", MESSAGES, cancel=cancel, scrape_metrics=False)
            assert not broken.mute_ended  # the server still held the request
            assert result.finish_reason == "cancelled" and result.text == ""
            broken.release.set()
            broken.mode = "ok"
            assert client.chat("broken", MESSAGES).text == "Hello, world"
    finally:
        timer.cancel()
        broken.release.set()


def test_connecting_to_a_server_that_does_not_answer_stops_when_cancelled(
        broken: BrokenServer) -> None:
    """A server that takes the model-list request and answers nothing: cancelling the
    connect (the load bar's Cancel, closing the window) ends it at once, not after the
    300 s read timeout; the client and the service's worker are free again."""
    import threading
    import time

    from app.chat.service import ChatService, JobError
    from app.remote.errors import RemoteCancelledError

    broken.mode, broken.mute_ended = "mute-models", False
    broken.release.clear()
    try:
        cancel = threading.Event()
        threading.Timer(0.3, cancel.set).start()
        with RemoteClient(broken.base_url) as client:
            t0 = time.monotonic()
            with pytest.raises(RemoteCancelledError):
                client.identify(cancel)
            assert time.monotonic() - t0 < 5 and not broken.mute_ended
        service = ChatService(warm_up=None)
        try:
            job = service.connect(RemoteClient(broken.base_url))
            time.sleep(0.3)
            job.cancel()
            with pytest.raises(JobError, match="Connecting was cancelled"):
                job.result(timeout=5)
            assert not broken.mute_ended
        finally:
            service.shutdown(timeout=5)
    finally:
        broken.release.set()
        broken.mode = "ok"


def test_a_line_without_end_is_read_only_so_far(broken: BrokenServer) -> None:
    """A stream whose ``data:`` line never ends is read up to the bound that max_tokens
    sets (four times its characters, 64 KiB more), then ends as an overrun: the reader
    held the whole line before."""
    broken.mode = "endless-line"
    with RemoteClient(broken.base_url) as client:
        result = client.chat("broken", MESSAGES, max_tokens=10, scrape_metrics=False)
    assert result.overran and result.finish_reason == "length" and result.text == ""
    broken.mode = "ok"


def test_lines_end_at_cr_lf_or_crlf_only_and_are_bounded() -> None:
    from app.remote.stream import LineTooLongError, bounded_lines

    pieces = ["data: a\r", "\ndata: b\u2028c\n", "\r\n", "da", "ta: d\rlast"]
    assert list(bounded_lines(iter(pieces), 100)) == [
        "data: a", "data: b\u2028c", "", "data: d", "last"]
    with pytest.raises(LineTooLongError):
        list(bounded_lines(iter(["x" * 60, "y" * 60]), 100))


def test_the_cli_ends_the_cut_reply_line_before_its_error(
        broken: BrokenServer, capsys: pytest.CaptureFixture[str]) -> None:
    """`generate --server` on a stream that drops: the text received, then a line end on
    stdout, and the error on a line of its own (not "Hello, worlderror: …")."""
    from app.cli.main import main

    broken.mode = "drop-chunked"
    try:
        code = main(["generate", "--server", broken.base_url, "--model", "broken", "--chat",
                     "hi"])
    finally:
        broken.mode = "ok"
    out, err = capsys.readouterr()
    assert code == 2 and out == "Hello, world\n" and err.startswith("error: ")
