"""Test certificates (a CA, server and client certificates, PKCS12 stores of them) and
JWT keys, made with ``cryptography`` in a temporary directory (nothing is checked in),
and the secured clusters of the listener tests (a broker config of their own each, one
per module)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass
class Pki:
    """A CA and a way to issue certificates from it as PEM files."""

    directory: str
    ca_key: Any
    ca_cert: Any
    ca_path: str

    def issue(
        self, name: str, common_name: str, hosts: tuple[str, ...] = (), org_unit: str = ""
    ) -> tuple[str, str]:
        """(certificate path, key path) of a new certificate for ``common_name``,
        valid for ``hosts`` (IP addresses or DNS names) as subject alternative names."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "raystream-tests")]
        if org_unit:
            attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, org_unit))
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )
        if hosts:
            names: list[Any] = []
            for host in hosts:
                try:
                    names.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    names.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA256())
        cert_path = os.path.join(self.directory, f"{name}.pem")
        key_path = os.path.join(self.directory, f"{name}.key")
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        _write(
            key_path,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        return cert_path, key_path


def _write(path: str, data: bytes) -> None:
    """Replace ``path`` atomically (a listener may be reading it)."""
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def make_pki(directory: str) -> Pki:
    """A fresh CA in ``directory``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raystream test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    ca_path = os.path.join(directory, "ca.pem")
    _write(ca_path, cert.public_bytes(serialization.Encoding.PEM))
    return Pki(directory, key, cert, ca_path)


def write_pkcs12(
    path: str, password: str, key_pem: str = "", cert_pem: str = "", cas: tuple[str, ...] = ()
) -> str:
    """Write a PKCS12 file: a private key with its certificate (a keystore) and/or CA
    certificates (a truststore), read from PEM files; returns ``path``."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        load_pem_private_key,
        pkcs12,
    )

    def cert(pem_path: str) -> Any:
        with open(pem_path, "rb") as f:
            return x509.load_pem_x509_certificate(f.read())

    key = None
    if key_pem:
        with open(key_pem, "rb") as f:
            key = load_pem_private_key(f.read(), None)
    data = pkcs12.serialize_key_and_certificates(
        b"server" if key is not None else None,
        key,
        cert(cert_pem) if cert_pem else None,
        [cert(c) for c in cas] or None,
        BestAvailableEncryption(password.encode()),
    )
    with open(path, "wb") as f:
        f.write(data)
    return path


@dataclass
class JwtIssuer:
    """An RSA key whose public half is in a JWKS file, and tokens signed with it."""

    jwks_path: str
    key: Any
    kid: str = "test-key"

    def token(self, sub: str, expires_in_s: float = 3600, **claims: Any) -> str:
        """A signed JWT for ``sub`` expiring in ``expires_in_s`` (negative: expired)."""
        import time

        import jwt

        payload = {"sub": sub, "exp": int(time.time() + expires_in_s), **claims}
        return jwt.encode(payload, self.key, algorithm="RS256", headers={"kid": self.kid})


def make_jwt_issuer(directory: str) -> JwtIssuer:
    """A JWT issuer with its JWKS written in ``directory``."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update({"kid": "test-key", "use": "sig", "alg": "RS256"})
    path = os.path.join(directory, "jwks.json")
    with open(path, "w") as f:
        json.dump({"keys": [jwk]}, f)
    return JwtIssuer(path, key)


@pytest.fixture(scope="package")
def pki(tmp_path_factory) -> Pki:
    """A test CA for the package."""
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture(scope="package")
def jwt_issuer(tmp_path_factory) -> JwtIssuer:
    """A JWT issuer and its JWKS for the package."""
    return make_jwt_issuer(str(tmp_path_factory.mktemp("jwks")))


@pytest.fixture
def issue(pki: Pki) -> Callable[..., tuple[str, str]]:
    """``issue(name, common_name, hosts=())`` -> (cert path, key path)."""
    return pki.issue


@pytest.fixture(scope="module")
def module_cluster(
    start_local_ray: Callable[[], None], request, tmp_path_factory
) -> Iterator[Callable[[dict[str, Any]], Any]]:
    """``module_cluster(broker_config)`` -> a raystream cluster on the session's Ray
    for the whole module (namespace and data dir of its own), shut down after the
    module: the secured listeners need broker settings the package's clusters lack."""
    from raystream.client.cluster import connect

    module = request.module.__name__.rsplit(".", 1)[-1]
    made: list[Any] = []

    def make(broker_config: dict[str, Any]) -> Any:
        start_local_ray()
        cluster = connect(
            namespace=f"{module}-{len(made)}-{os.getpid()}",
            data_dir=str(tmp_path_factory.mktemp(f"{module}-data")),
            broker_config=broker_config,
        )
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.shutdown()
