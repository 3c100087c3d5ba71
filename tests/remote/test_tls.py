"""A server on https: a certificate Tandem cannot verify is refused in a sentence that
says how to trust it, and the authority given in ``SSL_CERT_FILE`` (or as ``verify``)
is trusted. The server is a real TLS listener with a certificate from a throwaway
authority (trustme)."""

from __future__ import annotations

import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from app.remote import RemoteClient, ServerUnreachableError
from app.remote.client import tls_context

MODELS = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()


class _Models(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(MODELS)))
        self.end_headers()
        self.wfile.write(MODELS)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def https_url(authority: trustme.CA) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    authority.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"https://localhost:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def ca_file(authority: trustme.CA, tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(path))
    return path


def test_an_unknown_authority_is_refused_with_how_to_trust_it(
        https_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with RemoteClient(https_url) as client, pytest.raises(ServerUnreachableError) as info:
        client.models()
    message = str(info.value)
    assert message.startswith(f"{https_url}: its TLS certificate could not be verified")
    assert "SSL_CERT_FILE" in message


def test_the_authority_in_ssl_cert_file_or_given_is_trusted(
        https_url: str, ca_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    with RemoteClient(https_url) as client:
        assert [m.id for m in client.models()] == ["m"]
    monkeypatch.delenv("SSL_CERT_FILE")
    with RemoteClient(https_url, verify=str(ca_file)) as client:
        assert [m.id for m in client.models()] == ["m"]


def test_the_default_context_is_the_systems_verification_with_certifi_added(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import truststore

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    ctx = tls_context()
    assert isinstance(ctx, truststore.SSLContext)  # the keychain, the Windows store, …
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
