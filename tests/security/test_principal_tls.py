"""Principal mapping rules (Kafka's ``ssl.principal.mapping.rules``) and the listener's
TLS context: client certificates verified, files replaced on disk picked up by the
next handshake without a restart."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from raystream.config import BrokerConfig
from raystream.errors import InvalidConfigError
from raystream.kafka.listeners import parse_listeners
from raystream.security.principal import certificate_principal, parse_mapping_rules, subject_dn
from raystream.security.tls import TlsConfig, TlsSettings


def test_mapping_rules_as_kafka() -> None:
    dn = "CN=alice,OU=ServiceUsers,O=acme"
    assert certificate_principal(dn, parse_mapping_rules("DEFAULT")) == f"User:{dn}"
    rules = parse_mapping_rules(
        r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L, DEFAULT"
    )
    assert certificate_principal(dn, rules) == "User:alice"
    assert certificate_principal("CN=Bob,OU=Ops,O=acme", rules) == "User:bob@ops"
    assert certificate_principal("CN=x", rules) == "User:CN=x"
    upper = parse_mapping_rules(r"RULE:^CN=([^,]*).*$/$1/U")
    assert certificate_principal(dn, upper) == "User:ALICE"
    for bad in ("RULE:^CN=(.*$/$1/", "NOPE", "RULE:a/b/ x"):
        with pytest.raises(InvalidConfigError, match=r"ssl.principal.mapping.rules"):
            parse_mapping_rules(bad)


def test_listener_settings_are_checked_by_name(tmp_path) -> None:
    specs = parse_listeners(
        "CLIENT://:0,SASL_SSL://:0", protocol_map="CLIENT:SSL,SASL_SSL:SASL_SSL"
    )
    assert [(s.protocol, s.security_protocol) for s in specs] == [
        ("CLIENT", "SSL"),
        ("SASL_SSL", "SASL_SSL"),
    ]
    with pytest.raises(InvalidConfigError, match="CLIENT"):
        parse_listeners("CLIENT://:0")
    with pytest.raises(InvalidConfigError, match=r"ssl.keystore.location"):
        BrokerConfig.from_kafka({"listeners": "SSL://:0"})
    with pytest.raises(InvalidConfigError, match=r"ssl.client.auth"):
        BrokerConfig.from_kafka({"ssl.client.auth": "sometimes"})
    with pytest.raises(InvalidConfigError, match=r"sasl.oauthbearer.jwks.endpoint.url"):
        BrokerConfig.from_kafka(
            {"listeners": "SASL_PLAINTEXT://:0", "sasl.enabled.mechanisms": "OAUTHBEARER"}
        )
    with pytest.raises(InvalidConfigError, match="GSSAPI"):
        BrokerConfig.from_kafka({"sasl.enabled.mechanisms": "GSSAPI"})
    with pytest.raises(InvalidConfigError, match=r"ssl.truststore.location"):
        TlsSettings(str(tmp_path / "x.pem"), client_auth="required").check()
    with pytest.raises(InvalidConfigError, match=r"ssl.keystore.location"):
        TlsConfig(TlsSettings(str(tmp_path / "missing.pem")))


async def _handshake(port: int, context: ssl.SSLContext) -> tuple[str, str]:
    """(the server certificate's subject, the client principal the server saw)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    seen = (await reader.readline()).decode().strip()
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return subject_dn(der), seen


def test_client_certificates_and_reload_on_change(pki) -> None:
    cert, key = pki.issue("server-tls", "server-one", ("127.0.0.1",))
    live = TlsConfig(TlsSettings(cert, key, "", pki.ca_path, "required"))
    client_cert = pki.issue("client-tls", "alice", org_unit="eng")
    rules = parse_mapping_rules(r"RULE:^CN=([^,]*),.*$/$1/")

    async def main() -> list[tuple[str, str]]:
        async def serve(reader, writer) -> None:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.write(certificate_principal(subject_dn(der), rules).encode() + b"\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=live.context)
        port = server.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=pki.ca_path)
        client.load_cert_chain(*client_cert)
        seen = [await _handshake(port, client)]
        pki.issue("server-tls", "server-two", ("127.0.0.1",))  # replaced on disk
        seen.append(await _handshake(port, client))
        anonymous = ssl.create_default_context(cafile=pki.ca_path)
        try:  # ssl.client.auth=required: refused (TLS 1.3 tells after the handshake)
            refused = (await _handshake(port, anonymous))[1]
        except (ssl.SSLError, ConnectionError):
            refused = ""
        assert refused == ""
        server.close()
        return seen

    seen = asyncio.run(main())
    assert seen[0] == ("CN=server-one,O=raystream-tests", "User:alice")
    assert seen[1] == ("CN=server-two,O=raystream-tests", "User:alice")
    assert live.reloads == 1 and not live.reload(force=False)
