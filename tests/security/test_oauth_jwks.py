"""OAUTHBEARER's JWKS from an ``https://`` endpoint: a real HTTPS server on loopback
(Python's ``http.server`` in an SSL context with a self-signed certificate made here)
serves the keys, and counts the fetches."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from raystream.config import BrokerConfig
from raystream.errors import InvalidConfigError, SaslAuthenticationError
from raystream.security.oauth import JwksValidator, load_validator


def self_signed(directory: str) -> tuple[str, str]:
    """(certificate path, key path) of a self-signed certificate for 127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jwks.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = os.path.join(directory, "jwks.pem"), os.path.join(directory, "jwks.key")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_path, key_path


class JwksServer:
    """An HTTPS server answering ``GET /jwks.json`` with :attr:`keys` (``{"keys":
    [...]}``), or :attr:`body` when set; :attr:`fetches` counts the GETs."""

    def __init__(self, cert: str, key: str, keys: list[dict[str, Any]]) -> None:
        self.keys = list(keys)
        self.body: bytes | None = None
        self.fetches = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.fetches += 1
                body = server.body or json.dumps({"keys": server.keys}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.httpd.server_address[1]}/jwks.json"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


def public_jwk(key: Any, kid: str) -> dict[str, Any]:
    """The JWK of an RSA key's public half, named ``kid``."""
    from jwt.algorithms import RSAAlgorithm

    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": kid, "use": "sig", "alg": "RS256"})
    return jwk


def signed(key: Any, kid: str, sub: str) -> str:
    """A JWT for ``sub`` signed with ``key`` under key id ``kid``, valid for an hour."""
    import jwt

    claims = {"sub": sub, "exp": int(time.time()) + 3600}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def rsa_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture
def https(tmp_path) -> Iterator[dict[str, Any]]:
    """A JWKS server holding one key (``kid`` "k1"), its private key, and the client
    context trusting the server's self-signed certificate."""
    cert, key = self_signed(str(tmp_path))
    signing = rsa_key()
    server = JwksServer(cert, key, [public_jwk(signing, "k1")])
    yield {
        "server": server,
        "key": signing,
        "trust": ssl.create_default_context(cafile=cert),
    }
    server.close()


def test_tokens_are_checked_against_an_https_jwks_fetched_once(https) -> None:
    server, key = https["server"], https["key"]
    validator = JwksValidator(server.url, ssl_context=https["trust"])
    assert server.fetches == 1  # fetched when built: a bad endpoint shows at start
    assert validator.validate(signed(key, "k1", "erin")).principal_name == "erin"
    assert validator.validate(signed(key, "k1", "frank")).principal_name == "frank"
    forged = signed(rsa_key(), "k1", "mallory")  # another key under the same key id
    with pytest.raises(SaslAuthenticationError, match=r"(?i)signature"):
        validator.validate(forged)
    # another validator of the URL (another listener of the node) shares the keys
    shared = load_validator("", jwks=server.url, ssl_context=https["trust"])
    assert shared.validate(signed(key, "k1", "gina")).principal_name == "gina"
    assert server.fetches == 1


def test_unknown_key_ids_fetch_the_jwks_again_at_most_once_per_cooldown(https) -> None:
    server = https["server"]
    validator = JwksValidator(server.url, ssl_context=https["trust"])
    rotated = rsa_key()
    server.keys.append(public_jwk(rotated, "k2"))  # the provider rotates its keys
    for attempt in range(3):  # key ids the JWKS lacks, within 30 s of the last fetch
        with pytest.raises(SaslAuthenticationError, match=r"k-forged"):
            validator.validate(signed(rsa_key(), "k-forged", f"mallory-{attempt}"))
    with pytest.raises(SaslAuthenticationError, match=r"k2"):  # not yet fetched again
        validator.validate(signed(rotated, "k2", "hana"))
    assert server.fetches == 1
    eager = JwksValidator(server.url + "?eager", ssl_context=https["trust"], refetch_cooldown_s=0)
    assert server.fetches == 2  # its own client (another URL): its own first fetch
    assert eager.validate(signed(rotated, "k2", "hana")).principal_name == "hana"
    newest = rsa_key()
    server.keys.append(public_jwk(newest, "k3"))  # rotated again, right after a fetch
    assert eager.validate(signed(newest, "k3", "ivan")).principal_name == "ivan"
    assert server.fetches == 3  # the key id it lacked fetched the JWKS again at once
    with pytest.raises(SaslAuthenticationError, match=r"k-forged"):
        eager.validate(signed(rsa_key(), "k-forged", "mallory"))
    assert server.fetches == 4  # and so does a forged one: the cooldown's purpose


def test_the_endpoints_certificate_is_checked_and_a_bad_endpoint_is_named(https, tmp_path) -> None:
    server = https["server"]
    untrusted = JwksValidator(server.url, ssl_context=ssl.create_default_context())
    assert server.fetches == 0  # the handshake failed: nothing was asked for
    with pytest.raises(SaslAuthenticationError, match=r"cannot be fetched.*(?i:certificate)"):
        untrusted.validate(signed(https["key"], "k1", "erin"))
    server.body = b'{"not": "a jwks"}'
    with pytest.raises(InvalidConfigError, match=r"jwks.endpoint.url=.*not a JWKS"):
        JwksValidator(server.url, refresh_ms=1000, ssl_context=https["trust"])
    with pytest.raises(InvalidConfigError, match=r"use https"):
        JwksValidator(server.url.replace("https://", "http://"))
    with pytest.raises(InvalidConfigError, match=r"sasl.oauthbearer.jwks.endpoint.url=.*https"):
        BrokerConfig.from_kafka(
            {
                "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "sasl.oauthbearer.jwks.endpoint.url": "http://idp.example/jwks",
            }
        )
    refresh = BrokerConfig.from_kafka({"sasl.oauthbearer.jwks.endpoint.refresh.ms": "60000"})
    assert refresh.sasl_oauthbearer_jwks_endpoint_refresh_ms == 60_000
