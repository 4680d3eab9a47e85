"""Client certificate chains judged by the broker, not by OpenSSL's store (issue 28, point 6;
issue 44): real TLS handshakes on an event loop with the broker's `ClientCertificateContext`,
and `identify_certificate` (`cryptography`'s verifier) over an in-memory store of registered
CAs, from the attacker's side."""

from __future__ import annotations

import ast
import asyncio
import ssl
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.mqtt.packets import Connect
from common.mqtt.reason_codes import ReasonCode
from common.security.device_credentials import (
    IdentityError,
    make_ca,
    make_leaf,
    parse_certificate,
    pem_of,
)
from data_plane.broker import auth
from data_plane.broker.auth import peer_certificate
from data_plane.tenancy import ca_index, chain_verification, identity, tls_client_chains
from data_plane.tenancy.authenticator import CERTIFICATE_FAILURES, PostgresAuthenticator
from data_plane.tenancy.identity import TrustAnchors, identify_certificate
from data_plane.tenancy.tls_client_chains import (
    ClientCertificateContext,
    UnavailableError,
    endpoint_tenant,
)


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("pki")
    server_ca, server_ca_key = make_ca("test server CA")
    server, server_key = make_leaf(
        "localhost", server_ca, server_ca_key, server_names=["127.0.0.1", "*.mqtt.test"]
    )
    (directory / "server.pem").write_text(pem_of(server))
    (directory / "server.key").write_text(pem_of(server_key))
    (directory / "server-ca.pem").write_text(pem_of(server_ca))
    return {"dir": directory}


def handshake(pki: dict, chain: list, key, version=ssl.TLSVersion.TLSv1_3, sni: str = "") -> dict:
    """One TLS handshake, on an event loop, of a client presenting `chain` (its certificate
    first) to a listener with the broker's client-certificate context; what each side saw."""
    directory: Path = pki["dir"]
    (directory / "client.pem").write_text("".join(pem_of(c) for c in chain))
    (directory / "client.key").write_text(pem_of(key))
    client_context = ssl.create_default_context(cafile=directory / "server-ca.pem")
    client_context.maximum_version = version
    client_context.check_hostname = bool(sni)
    if chain:
        client_context.load_cert_chain(directory / "client.pem", directory / "client.key")
    seen: dict = {}

    class Server(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            seen["server_chain"] = peer_certificate(transport)
            transport.write(b"ok" * 40_000)

    async def run() -> None:
        context = ClientCertificateContext(
            str(directory / "server.pem"), str(directory / "server.key"), "mqtt.test"
        )
        server = await asyncio.get_running_loop().create_server(Server, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_context, server_hostname=sni
            )
            seen["client_read"] = await asyncio.wait_for(reader.readexactly(80_000), 5)
            writer.close()
        finally:
            server.close()

    asyncio.run(run())
    return seen


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_any_chain_reaches_connect_as_sent_with_the_endpoints_tenant(pki, version):
    root, root_key = make_ca("root", path_length=1)
    issuing, issuing_key = make_ca("issuing", signer=(root, root_key))
    leaf, key = make_leaf("sensor-1", issuing, issuing_key)
    # No store judges it at the handshake: the chain reaches CONNECT as the client sent it.
    seen = handshake(pki, [leaf, issuing], key, version)
    assert seen["client_read"] == b"ok" * 40_000
    assert seen["server_chain"] == (der(leaf), der(issuing))
    assert seen["server_chain"].endpoint_tenant is None  # no server name: no tenant chosen
    named = handshake(pki, [leaf], key, version, sni="acme.mqtt.test")
    assert named["server_chain"] == (der(leaf),)
    assert named["server_chain"].endpoint_tenant == "acme"
    # A stranger's self-signed certificate is no handshake failure either: CONNECT refuses it.
    stranger, stranger_key = make_leaf("who", None, None)
    assert handshake(pki, [stranger], stranger_key, version)["server_chain"] == (der(stranger),)
    # Without a certificate (passwords over TLS): nothing to judge.
    assert handshake(pki, [], key, version)["server_chain"] is None


def test_the_handshake_runs_on_uvloop_too(pki):
    import uvloop  # a dependency of the broker: missing, this fails (never a skip)

    leaf, key = make_leaf("sensor-1", *make_ca("fleet CA"))
    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        seen = handshake(pki, [leaf], key, sni="acme.mqtt.test")
    finally:
        asyncio.set_event_loop_policy(policy)
    assert seen["client_read"] == b"ok" * 40_000
    assert seen["server_chain"].endpoint_tenant == "acme"


def test_the_endpoint_names_a_tenant_only_under_the_domain():
    assert endpoint_tenant("acme.mqtt.test", "mqtt.test") == "acme"
    assert endpoint_tenant("ACME.mqtt.test.", "mqtt.test") == "acme"
    assert endpoint_tenant("mqtt.test", "mqtt.test") is None
    assert endpoint_tenant("a.b.mqtt.test", "mqtt.test") is None
    assert endpoint_tenant("acme.evil.test", "mqtt.test") is None
    assert endpoint_tenant("acme.mqtt.test", None) is None


def test_no_ctypes_and_no_private_ssl_internals():
    """Issue 44: the mechanism stands on public interfaces only."""
    for module in (tls_client_chains, identity, chain_verification, ca_index, auth):
        tree = ast.parse(Path(module.__file__).read_text())
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add((node.module or "").split(".")[0])
        assert not imported & {"ctypes", "_ssl", "cffi"}, module.__name__
        attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert not attributes & {"_sslobj", "__basicsize__"}, module.__name__


def test_the_listener_refuses_to_start_without_its_mechanism(pki, monkeypatch):
    """No fallback to a store shared by all tenants: a plain `ssl` context is refused, and so is
    a client-certificate context where pyOpenSSL is missing."""
    anchors = TrustAnchors(store=None)
    with pytest.raises(UnavailableError):
        asyncio.run(anchors.attach(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)))
    assert not anchors.attached
    monkeypatch.setattr(tls_client_chains, "SSL", None)
    with pytest.raises(UnavailableError, match="pyOpenSSL"):
        ClientCertificateContext(str(pki["dir"] / "server.pem"), str(pki["dir"] / "server.key"))


def test_the_filter_lets_through_any_chain_naming_a_registered_issuer_whoever_else_shares_it():
    anchors = TrustAnchors(store=None)
    victim, victim_key = make_ca("fleet CA")
    squatter, squatter_key = make_ca("fleet CA")  # another tenant's, of the same name
    anchors._remember([("ca", squatter.subject.rfc4514_string(), pem_of(squatter))])
    anchors._remember([("ca", victim.subject.rfc4514_string(), pem_of(victim))])
    device, _ = make_leaf("sensor-1", victim, victim_key)
    assert anchors.vouches_for([der(device)])
    stranger_ca, stranger_key = make_ca("nobody's CA")
    stranger, _ = make_leaf("sensor-1", stranger_ca, stranger_key)
    assert not anchors.vouches_for([der(stranger)])
    registered, _ = make_leaf("own", None, None)
    anchors._remember([("cert", parse_certificate(der(registered)).fingerprint, "")])
    assert anchors.vouches_for([der(registered)])


class Store:
    """Registered CAs as `IdentityStore.cas_named` reads them: (id, tenant, CA, revoked)."""

    def __init__(self, *cas: tuple[int, str, x509.Certificate]) -> None:
        self.rows = [(i, tenant, parse_certificate(der(ca)), False) for i, tenant, ca in cas]
        self.asked: list[str] = []

    async def cas_named(self, subject: str):
        self.asked.append(subject)
        return [row for row in self.rows if row[2].subject == subject]

    async def ca_index(self, subject: str, tenant: str = ""):
        """As `IdentityStore.ca_index` reads them (one tenant's, when the client names it)."""
        rows = [
            (i, owner, pem_of(ca.certificate), revoked)
            for i, owner, ca, revoked in await self.cas_named(subject)
            if not tenant or owner == tenant
        ]
        return ca_index.CaIndex.parsed(rows)

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


# -- from the attacker's side (issue 44) --------------------------------------------------------


def device_certificate(ca, ca_key, *, key=None, cn="sensor-1", ca_flag=False, days=30, sans=()):
    """A device certificate as an attacker may make one: any key, CA flag, validity, names."""
    key = key or ec.generate_private_key(ec.SECP256R1())
    start = datetime.now(UTC) - timedelta(days=1)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=ca_flag, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in sans]), critical=False
        )
    return builder.sign(ca_key, hashes.SHA256())


def test_a_ca_certificate_presented_as_a_device_is_refused():
    ca, ca_key = make_ca("fleet CA", path_length=None)
    store = Store((1, "acme", ca))
    sub_ca, _ = make_ca("sensor-1", signer=(ca, ca_key))  # CA:TRUE, its CN a device's name
    with pytest.raises(IdentityError):
        identify(store, [sub_ca])
    with pytest.raises(IdentityError, match="cA must not be asserted"):
        identify(store, [device_certificate(ca, ca_key, ca_flag=True)])
    assert identify(store, [device_certificate(ca, ca_key)]).tenant == "acme"


def test_weak_device_keys_are_refused():
    ca, ca_key = make_ca("fleet CA")
    store = Store((1, "acme", ca))
    weak = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    with pytest.raises(IdentityError, match="RSA key of 1024 bits"):
        identify(store, [device_certificate(ca, ca_key, key=weak)])
    small_curve = ec.generate_private_key(ec.SECP224R1())
    with pytest.raises(IdentityError, match="secp224r1"):
        identify(store, [device_certificate(ca, ca_key, key=small_curve)])
    strong = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    assert identify(store, [device_certificate(ca, ca_key, key=strong)]).device == "sensor-1"


def test_an_expired_certificate_is_refused_and_so_is_one_through_an_expired_ca():
    ca, ca_key = make_ca("fleet CA", path_length=None)
    store = Store((1, "acme", ca))
    with pytest.raises(IdentityError, match="expired"):
        identify(store, [device_certificate(ca, ca_key, days=0)])
    gone = datetime.now(UTC) - timedelta(minutes=1)
    stale, stale_key = make_ca("stale issuing CA", signer=(ca, ca_key), not_after=gone)
    with pytest.raises(IdentityError):
        identify(store, [device_certificate(stale, stale_key), stale])


def test_another_tenants_certificate_is_refused_under_this_tenants_endpoint_or_user_name():
    acme_ca, acme_key = make_ca("acme CA")
    evil_ca, evil_key = make_ca("evil CA")
    store = Store((1, "acme", acme_ca), (2, "evil", evil_ca))
    evils = device_certificate(evil_ca, evil_key)
    assert identify(store, [evils]).tenant == "evil"  # its own tenant's device, at most
    with pytest.raises(IdentityError):
        identify(store, [evils], "acme/sensor-1")
    with pytest.raises(IdentityError):
        asyncio.run(identify_certificate(store, [der(evils)], endpoint_tenant="acme"))
    with pytest.raises(IdentityError, match="not the endpoint's"):
        asyncio.run(identify_certificate(store, [der(evils)], "evil/x", endpoint_tenant="acme"))
    acmes = device_certificate(acme_ca, acme_key)
    found = asyncio.run(identify_certificate(store, [der(acmes)], endpoint_tenant="acme"))
    assert (found.tenant, found.device) == ("acme", "sensor-1")


def test_a_name_constraint_of_the_registered_ca_is_enforced():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "constrained CA")])
    start = datetime.now(UTC) - timedelta(days=1)
    ca = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.NameConstraints([x509.DNSName("devices.acme.example")], None), critical=True
        )
        .sign(key, hashes.SHA256())
    )
    store = Store((1, "acme", ca))
    inside = device_certificate(ca, key, sans=["s1.devices.acme.example"])
    assert identify(store, [inside]).tenant == "acme"
    outside = device_certificate(ca, key, sans=["s1.devices.evil.example"])
    with pytest.raises(IdentityError, match="refused"):
        identify(store, [outside])


def test_look_alike_cas_cannot_crowd_out_the_real_one():
    """Sign-ups are free: many tenants' CAs of the victim's name and key identifier. The real
    CA's key identifier is its key's; a look-alike's is copied, so it comes after, and at most
    a few candidates are checked."""
    victim, victim_key = make_ca("fleet CA")
    stated = victim.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    rows = []
    for number in range(1, 3 * identity.MAX_CANDIDATES):
        key = ec.generate_private_key(ec.SECP256R1())
        look_alike = (
            x509.CertificateBuilder()
            .subject_name(victim.subject)
            .issuer_name(victim.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(victim.not_valid_before_utc)
            .not_valid_after(victim.not_valid_after_utc)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(stated, critical=False)
            .sign(key, hashes.SHA256())
        )
        rows.append((number, f"evil{number}", look_alike))
    store = Store(*rows, (999, "acme", victim))
    device = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sensor-1")]))
        .issuer_name(victim.subject)
        .public_key(ec.generate_private_key(ec.SECP256R1()).public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.now(UTC) - timedelta(days=1))
        .not_valid_after(datetime.now(UTC) + timedelta(days=30))
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(victim_key.public_key()), False
        )
        .sign(victim_key, hashes.SHA256())
    )
    assert identify(store, [device]).label == "ca:999"


def test_a_check_past_its_deadline_is_refused(monkeypatch):
    ca, ca_key = make_ca("fleet CA")
    store = Store((1, "acme", ca))
    slow = chain_verification.verify_client_chain

    def slower(*args):
        time.sleep(0.5)
        return slow(*args)

    monkeypatch.setattr(chain_verification, "verify_client_chain", slower)
    device = der(device_certificate(ca, ca_key))
    with pytest.raises(IdentityError, match="too long"):
        asyncio.run(identify_certificate(store, [device], deadline=0.1))
    assert asyncio.run(identify_certificate(store, [device], deadline=5)).tenant == "acme"


class Directory:
    """What the authenticator asks of the directory on a refused certificate."""

    def __init__(self) -> None:
        self.stats: dict[str, int] = defaultdict(int)


def test_refused_certificates_are_throttled_per_fingerprint_and_tenant_never_per_address():
    ca, ca_key = make_ca("fleet CA")
    authenticator = PostgresAuthenticator(Directory(), identities=Store((1, "acme", ca)))
    nobodys_ca, nobodys_key = make_ca("nobody's CA")
    guessed = der(device_certificate(nobodys_ca, nobodys_key))

    def connect(chain: bytes, username: str = "", endpoint: str | None = None) -> int:
        presented = auth.ClientChain((chain,))
        presented.endpoint_tenant = endpoint
        result = asyncio.run(
            authenticator.authenticate(
                Connect("sensor-1", username=username or None), "10.0.0.1:5000", presented
            )
        )
        return result.reason_code

    for _ in range(CERTIFICATE_FAILURES):
        assert connect(guessed) == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    assert connect(guessed) == ReasonCode.BAD_USER_NAME_OR_PASSWORD  # one a second is judged
    assert connect(guessed) == ReasonCode.CONNECTION_RATE_EXCEEDED  # the others are not
    # From the same address, another certificate, or this one claiming another tenant, is judged.
    other = der(device_certificate(nobodys_ca, nobodys_key, cn="sensor-2"))
    assert connect(other) == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    assert connect(guessed, "acme/sensor-1") == ReasonCode.BAD_USER_NAME_OR_PASSWORD
    assert connect(guessed, endpoint="evil") == ReasonCode.BAD_USER_NAME_OR_PASSWORD


def test_chains_the_filter_does_not_know_are_looked_up_a_few_a_second():
    """A CA registered a moment ago (its notification on its way) is looked up; a flood of
    strangers' chains costs at most `lookups_per_second` queries a second."""
    anchors = TrustAnchors(store=None)
    known_ca, known_key = make_ca("fleet CA")
    anchors._remember([("ca", known_ca.subject.rfc4514_string(), pem_of(known_ca))])
    known = [der(make_leaf("sensor-1", known_ca, known_key)[0])]
    stranger_ca, stranger_key = make_ca("nobody's CA")
    stranger = [der(make_leaf("sensor-1", stranger_ca, stranger_key)[0])]
    looked_up = [anchors.worth_a_lookup(stranger) for _ in range(3 * anchors.lookups_per_second)]
    assert looked_up.count(True) == anchors.lookups_per_second
    assert anchors.worth_a_lookup(known)  # the filter's own are never refused


def test_the_nearest_registered_ca_says_whose_device_it_is():
    """An issuing CA one tenant registered, under a root another registered earlier: the
    device is the issuing CA's tenant's, as the nearest registered CA reached says."""
    root, root_key = make_ca("shared root", path_length=1)
    issuing, issuing_key = make_ca("acme issuing CA", signer=(root, root_key))
    store = Store((1, "rootco", root), (2, "acme", issuing))
    device, _ = make_leaf("sensor-1", issuing, issuing_key)
    found = identify(store, [device, issuing])
    assert (found.tenant, found.label) == ("acme", "ca:2")
    assert identify(store, [device, issuing], "rootco/sensor-1").label == "ca:1"


def test_cas_as_openssl_makes_them_anchor_and_path_lengths_hold():
    """A CA of `openssl req -x509` (no keyUsage) or an older one (basicConstraints not
    critical) anchors, as OpenSSL takes them; one whose keyUsage excludes signing certificates
    does not, nor does a CA below a root whose path length allows none."""

    def ca_certificate(cn: str, *, critical: bool = True, usage=None, signer=None, length=None):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
        start = datetime.now(UTC) - timedelta(days=1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(signer[0].subject if signer else name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=length), critical=critical)
        )
        if usage is not None:
            builder = builder.add_extension(usage, critical=True)
        return builder.sign(signer[1] if signer else key, hashes.SHA256()), key

    bare, bare_key = ca_certificate("bare CA")
    assert identify(Store((1, "acme", bare)), [device_certificate(bare, bare_key)]).label == "ca:1"
    loose, loose_key = ca_certificate("loose CA", critical=False)
    assert identify(Store((2, "acme", loose)), [device_certificate(loose, loose_key)])
    signs_only_data = x509.KeyUsage(True, False, False, False, False, False, False, False, False)
    wrong, wrong_key = ca_certificate("wrong CA", usage=signs_only_data)
    with pytest.raises(IdentityError, match="keyCertSign"):
        identify(Store((3, "acme", wrong)), [device_certificate(wrong, wrong_key)])
    root, root_key = ca_certificate("root", length=0)
    below, below_key = ca_certificate("below", signer=(root, root_key))
    with pytest.raises(IdentityError, match="path length"):
        identify(Store((4, "acme", root)), [device_certificate(below, below_key), below])
