"""Client certificate chains judged by the broker, not by OpenSSL's store (issue 28, point 6):
real TLS handshakes over loopback sockets with `judge_chains` on the server's context, and
`identify_certificate` over an in-memory store of registered CAs of colliding names."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from common.security.device_credentials import (
    IdentityError,
    make_ca,
    make_leaf,
    parse_certificate,
    pem_of,
)
from data_plane.broker.auth import peer_certificate
from data_plane.tenancy.identity import TrustAnchors, identify_certificate
from data_plane.tenancy.tls_client_chains import judge_chains


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("pki")
    server_ca, server_ca_key = make_ca("test server CA")
    server, server_key = make_leaf(
        "localhost", server_ca, server_ca_key, server_names=["127.0.0.1"]
    )
    (directory / "server.pem").write_text(pem_of(server))
    (directory / "server.key").write_text(pem_of(server_key))
    (directory / "server-ca.pem").write_text(pem_of(server_ca))
    return {"dir": directory}


def handshake(pki: dict, judge, chain: list, key, version=ssl.TLSVersion.TLSv1_3) -> dict:
    """One TLS handshake of a client presenting `chain` (its certificate first) to a server
    whose context has `judge` installed; what each side saw."""
    directory: Path = pki["dir"]
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(directory / "server.pem", directory / "server.key")
    server_context.verify_mode = ssl.CERT_OPTIONAL
    seen: dict = {}

    def judging(presented: list[bytes]) -> bool:
        seen["judged"] = presented
        return judge(presented)

    assert judge_chains(server_context, judging)
    (directory / "client.pem").write_text("".join(pem_of(c) for c in chain))
    (directory / "client.key").write_text(pem_of(key))
    client_context = ssl.create_default_context(cafile=directory / "server-ca.pem")
    client_context.maximum_version = version
    client_context.load_cert_chain(directory / "client.pem", directory / "client.key")
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        raw, _ = listener.accept()
        try:
            with server_context.wrap_socket(raw, server_side=True) as tls:
                seen["server_chain"] = peer_certificate(_Transport(tls))
                tls.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            seen["server_error"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=5) as raw:
            with client_context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                seen["client_read"] = tls.recv(2)
    except (ssl.SSLError, OSError) as exc:
        seen["client_error"] = exc
    thread.join(5)
    listener.close()
    return seen


class _Transport:
    def __init__(self, ssl_object) -> None:
        self.ssl_object = ssl_object

    def get_extra_info(self, name: str):
        return self.ssl_object if name == "ssl_object" else None


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_the_judge_sees_the_chain_as_sent_and_decides_the_handshake(pki, version):
    root, root_key = make_ca("root", path_length=1)
    issuing, issuing_key = make_ca("issuing", signer=(root, root_key))
    leaf, key = make_leaf("sensor-1", issuing, issuing_key)
    # Accepted: the chain reaches CONNECT as sent (the device's certificate first).
    seen = handshake(pki, lambda chain: True, [leaf, issuing], key, version)
    assert seen.get("client_read") == b"ok", seen
    assert seen["judged"] == [der(leaf), der(issuing)]
    assert seen["server_chain"] == (der(leaf), der(issuing))
    # Refused by the judge: the handshake fails, whatever OpenSSL's store would have said.
    refused = handshake(pki, lambda chain: False, [leaf, issuing], key, version)
    assert "client_error" in refused and "server_error" in refused
    # A judge that breaks refuses too (nothing escapes into OpenSSL).
    broken = handshake(pki, lambda chain: 1 / 0, [leaf], key, version)
    assert "client_error" in broken and "server_error" in broken


def test_the_filter_lets_through_any_chain_naming_a_registered_issuer_whoever_else_shares_it(pki):
    anchors = TrustAnchors(store=None)
    victim, victim_key = make_ca("fleet CA")
    squatter, squatter_key = make_ca("fleet CA")  # another tenant's, of the same name
    anchors._remember([("ca", squatter.subject.rfc4514_string(), pem_of(squatter))])
    anchors._remember([("ca", victim.subject.rfc4514_string(), pem_of(victim))])
    device, device_key = make_leaf("sensor-1", victim, victim_key)
    seen = handshake(pki, anchors.vouches_for, [device], device_key)
    assert seen.get("client_read") == b"ok", seen
    stranger_ca, stranger_key = make_ca("nobody's CA")
    stranger, stranger_key = make_leaf("sensor-1", stranger_ca, stranger_key)
    assert "client_error" in handshake(pki, anchors.vouches_for, [stranger], stranger_key)
    registered, registered_key = make_leaf("own", None, None)
    anchors._remember([("cert", parse_certificate(der(registered)).fingerprint, "")])
    seen = handshake(pki, anchors.vouches_for, [registered], registered_key)
    assert seen.get("client_read") == b"ok", seen


class Store:
    """Registered CAs as `IdentityStore.cas_named` reads them: (id, tenant, CA, revoked)."""

    def __init__(self, *cas: tuple[int, str, x509.Certificate]) -> None:
        self.rows = [(i, tenant, parse_certificate(der(ca)), False) for i, tenant, ca in cas]
        self.asked: list[str] = []

    async def cas_named(self, subject: str):
        self.asked.append(subject)
        return [row for row in self.rows if row[2].subject == subject]

    async def device_certificate(self, fingerprint: str, tenant: str, device: str):
        return None

    async def registrations(self, tenant: str, fingerprint: str):
        return []  # nothing registered by fingerprint


def identify(store: Store, chain: list, username: str = ""):
    return asyncio.run(identify_certificate(store, [der(c) for c in chain], username))


def test_a_ca_is_chosen_by_signature_and_only_among_the_user_names_tenant():
    victim, victim_key = make_ca("fleet CA")
    squatter, squatter_key = make_ca("fleet CA")
    store = Store((1, "evil", squatter), (2, "acme", victim))
    device, _ = make_leaf("sensor-1", victim, victim_key)
    assert identify(store, [device]).tenant == "acme"
    assert identify(store, [device], "acme/sensor-1").label == "ca:2"
    impostor, _ = make_leaf("sensor-1", squatter, squatter_key)
    assert identify(store, [impostor]).tenant == "evil"  # the squatter's own, at most
    with pytest.raises(IdentityError):  # never acme's: evil's CA is not consulted for acme
        identify(store, [impostor], "acme/sensor-1")


def test_intermediates_sent_in_any_order_still_chain():
    root, root_key = make_ca("root", path_length=2)
    upper, upper_key = make_ca("upper", signer=(root, root_key), path_length=1)
    lower, lower_key = make_ca("lower", signer=(upper, upper_key))
    device, _ = make_leaf("sensor-1", lower, lower_key)
    store = Store((7, "acme", root))
    assert identify(store, [device, upper, root, lower]).label == "ca:7"
    with pytest.raises(IdentityError):  # a link missing: nothing signed `lower`
        identify(store, [device, lower, root])


def test_a_certificate_not_meant_for_tls_clients_is_refused():
    """What OpenSSL's "TLS client" purpose refused before the broker judged chains itself."""
    ca, ca_key = make_ca("fleet CA")
    store = Store((1, "acme", ca))

    def leaf(*extensions: tuple[x509.ExtensionType, bool]) -> x509.Certificate:
        plain, _ = make_leaf("sensor-1", ca, ca_key)
        builder = (
            x509.CertificateBuilder()
            .subject_name(plain.subject)
            .issuer_name(ca.subject)
            .public_key(ec.generate_private_key(ec.SECP256R1()).public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(plain.not_valid_before_utc)
            .not_valid_after(plain.not_valid_after_utc)
        )
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical)
        return builder.sign(ca_key, hashes.SHA256())

    client = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    server_only = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    assert identify(store, [leaf((client, False))]).device == "sensor-1"
    with pytest.raises(IdentityError, match="extended key usage"):
        identify(store, [leaf((server_only, False))])
    unknown = x509.UnrecognizedExtension(x509.ObjectIdentifier("1.3.6.1.4.1.99999.1"), b"\x05\x00")
    with pytest.raises(IdentityError, match="unknown critical extension"):
        identify(store, [leaf((unknown, True))])
    assert identify(store, [leaf((unknown, False))]).device == "sensor-1"
