"""The source's connections verify the service's certificate, with the CAs the environment
names (`SSL_CERT_FILE`) when it names some, although every client of the process shares one
TLS context: against a real HTTPS server on loopback with a certificate of its own."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sources.signing.transport import DeadlineTransport, tls_context

ANSWER = b'{"workspace": "tls"}'


class _Answering(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, format: str, *args: object) -> None:
        pass


def self_signed(folder: Path, name: str) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that no public CA signed, and its key."""
    certificate, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(certificate)],
        check=True, capture_output=True,
    )  # fmt: skip
    return certificate, key


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on loopback whose certificate no public CA signed, and that certificate."""
    certificate, key = self_signed(tmp_path_factory.mktemp("tls"), "server")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certificate, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", certificate
    finally:
        server.shutdown()
        server.server_close()


def fetched(url: str) -> bytes:
    transport = DeadlineTransport(limits=httpx.Limits(max_connections=1), proxy=None)
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.get(f"{url}/me").content


def test_a_certificate_no_known_ca_signed_is_refused(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = https_server
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        fetched(url)


def test_the_cas_the_environment_names_are_trusted_and_only_there(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, certificate = https_server
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
    assert fetched(url) == ANSWER
    assert tls_context() is tls_context(), "each client made a TLS context of its own"
    monkeypatch.delenv("SSL_CERT_FILE")
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        fetched(url)


def test_a_ca_bundle_rewritten_in_place_is_read_again(
    https_server: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long-running process (the receiver, Dagster) sees its CA bundle updated in place."""
    url, certificate = https_server
    other, _ = self_signed(tmp_path, "other")
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(other.read_bytes())
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        fetched(url)
    bundle.write_bytes(other.read_bytes() + certificate.read_bytes())
    assert fetched(url) == ANSWER
