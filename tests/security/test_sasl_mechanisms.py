"""SCRAM (RFC 5802/7677), PLAIN and OAUTHBEARER server exchanges and the session's
rules (handshake first, KIP-368 lifetime), driven by a client written from the RFCs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging

import pytest

from raystream.errors import (
    IllegalSaslStateError,
    InvalidConfigError,
    ResourceNotFoundError,
    SaslAuthenticationError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from raystream.security.oauth import JwksValidator, load_validator
from raystream.security.sasl import SaslSession, parse_mechanisms
from raystream.security.scram import (
    MECHANISMS,
    CredentialStore,
    ScramServer,
    credential_from_salted,
    make_credential,
    password_matches,
)


def scram_client(mechanism: str, user: str, password: str, step) -> bytes:
    """Run a SCRAM exchange against ``step`` (server's answer to each message); the
    server's final message after checking its signature."""
    hash_name = MECHANISMS[mechanism]
    client_nonce = "fyko+d2lbbFgONRv9qkxdawL"
    first_bare = f"n={user},r={client_nonce}"
    server_first = step(f"n,,{first_bare}".encode()).decode()
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.digest(salted, b"Client Key", hash_name)
    stored_key = hashlib.new(hash_name, client_key).digest()
    without_proof = f"c={base64.b64encode(b'n,,').decode()},r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.digest(stored_key, auth_message, hash_name)
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    final = step(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    server_key = hmac.digest(salted, b"Server Key", hash_name)
    expected = hmac.digest(server_key, auth_message, hash_name)
    assert final == b"v=" + base64.b64encode(expected)
    return final


def store_with(user: str, password: str) -> CredentialStore:
    store = CredentialStore()
    for mechanism in MECHANISMS:
        store.upsert(user, make_credential(mechanism, password, iterations=4096))
    return store


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_scram_exchange_accepts_the_password_and_refuses_another(mechanism: str) -> None:
    store = store_with("alice", "s3cret")
    server = ScramServer(mechanism, lambda user: store.lookup(user, mechanism))
    scram_client(mechanism, "alice", "s3cret", server.step)
    assert server.done and server.user == "alice"
    for user, password in (("alice", "wrong"), ("mallory", "s3cret")):
        server = ScramServer(mechanism, lambda user: store.lookup(user, mechanism))
        with pytest.raises(SaslAuthenticationError) as refused:
            scram_client(mechanism, user, password, server.step)
        assert "wrong" not in str(refused.value) and "s3cret" not in str(refused.value)
        assert not server.done


def test_scram_rfc7677_test_vector() -> None:
    """RFC 7677's SCRAM-SHA-256 example: user 'user', password 'pencil'."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credential = make_credential("SCRAM-SHA-256", "pencil", iterations=4096, salt=salt)
    server = ScramServer(
        "SCRAM-SHA-256", lambda user: credential, nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    )
    first = server.step(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = server.step(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_credentials_keep_no_password_and_check_their_inputs(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    credential = make_credential("SCRAM-SHA-512", "hunter2")
    assert "hunter2" not in repr(credential) and "hunter2" not in str(credential.to_json())
    assert credential.iterations >= 4096 and len(credential.salt) >= 16
    assert password_matches(credential, "hunter2") and not password_matches(credential, "x")
    with pytest.raises(UnacceptableCredentialError, match="iterations"):
        make_credential("SCRAM-SHA-512", "p", iterations=100)
    with pytest.raises(UnacceptableCredentialError, match="SCRAM-SHA-1"):
        make_credential("SCRAM-SHA-1", "p")
    with pytest.raises(UnacceptableCredentialError, match="non-empty"):
        make_credential("SCRAM-SHA-256", "")
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", b"salt", 4096)
    from_client = credential_from_salted("SCRAM-SHA-256", b"salt", 4096, salted)
    assert password_matches(from_client, "pw")
    assert "hunter2" not in caplog.text


def test_credential_store_records_replay_to_the_same_store() -> None:
    store = store_with("alice", "pw")
    store.upsert("bob", make_credential("SCRAM-SHA-256", "pw2", iterations=4096))
    replayed = CredentialStore()
    for user in ("alice", "bob"):
        replayed.replay(*store.record(user))
    assert (
        replayed.describe()
        == store.describe()
        == {
            "alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)],
            "bob": [("SCRAM-SHA-256", 4096)],
        }
    )
    store.delete("bob", "SCRAM-SHA-256")
    replayed.replay(*store.record("bob"))
    assert "bob" not in replayed.users
    with pytest.raises(ResourceNotFoundError, match="bob"):
        store.delete("bob", "SCRAM-SHA-256")
    assert CredentialStore.from_json(store.to_json()).describe() == store.describe()


def session(store: CredentialStore, clock=lambda: 1_000, **kwargs) -> SaslSession:
    return SaslSession(
        ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"), store.lookup, clock=clock, **kwargs
    )


def test_plain_checks_the_stored_scram_credential() -> None:
    store = store_with("alice", "pw")
    ok = session(store)
    ok.handshake("PLAIN")
    assert ok.authenticate(b"\0alice\0pw") == (b"", 0)
    assert ok.authenticated and ok.principal == "User:alice"
    bad = session(store)
    bad.handshake("PLAIN")
    with pytest.raises(SaslAuthenticationError):
        bad.authenticate(b"\0alice\0nope")
    assert bad.failed and not bad.authenticated and bad.principal == "User:ANONYMOUS"


def test_session_order_mechanisms_and_reauth_lifetime() -> None:
    store = store_with("alice", "pw")
    now = [1_000]
    s = session(store, clock=lambda: now[0], max_reauth_ms=5_000)
    with pytest.raises(IllegalSaslStateError):
        s.authenticate(b"\0alice\0pw")
    s = session(store, clock=lambda: now[0], max_reauth_ms=5_000)
    with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-256"):
        s.handshake("SCRAM-SHA-256")
    s.handshake("SCRAM-SHA-512")
    lifetimes = []

    def step(message: bytes) -> bytes:
        answer, lifetime = s.authenticate(message)
        lifetimes.append(lifetime)
        return answer

    scram_client("SCRAM-SHA-512", "alice", "pw", step)
    assert lifetimes == [0, 5_000] and s.principal == "User:alice"
    now[0] += 4_999
    assert not s.expired()
    now[0] += 1
    assert s.expired()
    s.handshake("PLAIN")  # KIP-368: a new handshake on the same connection
    assert s.authenticate(b"\0alice\0pw")[1] == 5_000 and not s.expired()
    store.upsert("bob", make_credential("SCRAM-SHA-512", "pw", iterations=4096))
    s.handshake("PLAIN")
    with pytest.raises(SaslAuthenticationError, match="principal"):
        s.authenticate(b"\0bob\0pw")


def test_mechanism_setting_is_checked() -> None:
    assert parse_mechanisms("plain, SCRAM-SHA-256") == ("PLAIN", "SCRAM-SHA-256")
    with pytest.raises(InvalidConfigError, match="GSSAPI"):
        parse_mechanisms("GSSAPI")


def oauth_message(token: str) -> bytes:
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_validates_jwts_against_the_jwks(jwt_issuer) -> None:
    validator = JwksValidator(f"file://{jwt_issuer.jwks_path}", audience="kafka")
    s = session(CredentialStore(), clock=lambda: 0, validator=validator, max_reauth_ms=10**12)
    s.handshake("OAUTHBEARER")
    token = jwt_issuer.token("carol", 60, aud="kafka")
    answer, lifetime = s.authenticate(oauth_message(token))
    assert answer == b"" and s.principal == "User:carol"
    assert lifetime == s.expires_at_ms  # the token's exp bounds the session (clock at 0)
    for bad, why in (
        (jwt_issuer.token("carol", -60, aud="kafka"), "expired"),
        (jwt_issuer.token("carol", 60, aud="other"), "(?i)audience"),
        (token[:-4] + "AAAA", "ignature"),
    ):
        s = session(CredentialStore(), validator=validator)
        s.handshake("OAUTHBEARER")
        with pytest.raises(SaslAuthenticationError, match=why):
            s.authenticate(oauth_message(bad))
    with pytest.raises(SaslAuthenticationError, match="Bearer"):
        s = session(CredentialStore(), validator=validator)
        s.handshake("OAUTHBEARER")
        s.authenticate(b"n,,\x01auth=Basic x\x01\x01")


def test_validators_are_pluggable_and_misconfiguration_is_named(jwt_issuer) -> None:
    plugged = load_validator("raystream.security.oauth:JwksValidator", jwks=jwt_issuer.jwks_path)
    assert plugged.validate(jwt_issuer.token("dan")).principal_name == "dan"
    with pytest.raises(InvalidConfigError, match=r"validator.class"):
        load_validator("no.such.module:Validator", jwks="x")
    with pytest.raises(InvalidConfigError, match=r"jwks.endpoint.url"):
        JwksValidator("/no/such/jwks.json")
