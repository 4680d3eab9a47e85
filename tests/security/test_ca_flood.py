"""Issue 44, point 2, from the attacker's side: a free tenant registering CA after CA (one subject)
to make every failing mTLS CONNECT cost the broker a check per CA. Registration is capped by the
plan (`max_ca_certificates`, a 403 naming it, counted and shown as the broker's refusals are) and
rate-limited per tenant (a 429 with Retry-After); and whatever a tenant holds (200 CAs of one
subject here, as an operator's override allows), a CONNECT looks at a few of them: the index is
read and parsed once, not per CONNECT, and at most `MAX_CANDIDATES` go to the verifier."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID
from django.core.cache import cache
from django.db import connection
from psycopg_pool import AsyncConnectionPool

from common.security.device_credentials import (
    IdentityError,
    make_ca,
    make_leaf,
    parse_certificate,
    pem_of,
)
from data_plane.tenancy import ca_index, chain_verification, identity
from data_plane.tenancy.identity import IdentityStore, identify_certificate
from tenants.accounts import services as account_services
from tenants.models import CaCertificate
from tenants.quota_refusals import REFUSED
from tenants.tenant import services as tenant_services
from tests.security.test_device_identity import api, register_ca

SUBJECT = "fleet CA"


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()
    yield
    cache.clear()


def refused_count(limit: str) -> float:
    return REFUSED.labels(limit)._value.get()


def throttling(client, limit: str) -> dict:
    body = client.get("/api/v1/quota").json()
    rows = body["throttling"]["last_hour"]["limits"]
    return next((row for row in rows if row["limit"] == limit), {})


@pytest.mark.django_db
def test_a_free_tenant_cannot_register_more_cas_than_its_plan_allows():
    evil = tenant_services.tenant_create("evil")
    attacker = api(evil)
    assert attacker.get("/api/v1/quota").json()["limits"]["max_ca_certificates"] == 5
    for number in range(5):
        assert register_ca(attacker, f"ca-{number}", *make_ca(SUBJECT)).status_code == 201
    before = refused_count("ca_certificates")
    over = register_ca(attacker, "ca-5", *make_ca(SUBJECT))
    assert over.status_code == 403, over.content
    error = over.json()["error"]
    assert error["code"] == "quota_exceeded" and error["quota"] == "max_ca_certificates"
    assert error["limit"] == 5
    assert "allows 5 registered CA certificates (max_ca_certificates)" in error["message"]
    assert CaCertificate.objects.filter(tenant=evil).count() == 5
    # Counted (bounded label: the limit, never the tenant) and shown to the tenant as the
    # broker's refusals are.
    assert refused_count("ca_certificates") == before + 1
    row = throttling(attacker, "ca_certificates")
    assert row["refused"] == 1 and row["quota_key"] == "max_ca_certificates" and row["value"] == 5
    # A revoked CA no longer counts; the fleet CA never does.
    assert attacker.delete("/api/v1/cas/ca-0").status_code in (200, 204)
    assert register_ca(attacker, "ca-5", *make_ca(SUBJECT)).status_code == 201
    # Another tenant's cap is its own.
    owner = api(tenant_services.tenant_create("acme"))
    assert register_ca(owner, "a", *make_ca(SUBJECT)).status_code == 201
    # An operator's override raises it.
    tenant_services.tenant_set_quota(evil, {"max_ca_certificates": 7})
    assert register_ca(attacker, "ca-6", *make_ca(SUBJECT)).status_code == 201


@pytest.mark.django_db
def test_registrations_are_rate_limited_per_tenant(settings):
    settings.CA_REGISTRATION_RATE = "3/min"
    evil = tenant_services.tenant_create("evil")
    tenant_services.tenant_set_quota(evil, {"max_ca_certificates": 100})
    attacker = api(evil)
    bad = {"name": "junk", "pem": "not a certificate", "verification_pem": "x"}
    assert attacker.post("/api/v1/cas", bad, format="json").status_code == 400  # counts too
    for number in range(2):
        assert register_ca(attacker, f"ca-{number}", *make_ca(SUBJECT)).status_code == 201
    before = refused_count("ca_registration_rate")
    throttled = register_ca(attacker, "ca-2", *make_ca(SUBJECT))
    assert throttled.status_code == 429
    assert 1 <= int(throttled["Retry-After"]) <= 60
    message = throttled.json()["error"]["message"]
    assert "at most 3 a min per tenant" in message and "try again in" in message
    assert refused_count("ca_registration_rate") == before + 1
    assert throttling(attacker, "ca_registration_rate")["refused"] == 1
    assert CaCertificate.objects.filter(tenant=evil).count() == 2
    # Per tenant: the attacker's flood does not hold another tenant's registrations back.
    owner = api(tenant_services.tenant_create("acme"))
    assert register_ca(owner, "mine", *make_ca(SUBJECT)).status_code == 201


@pytest.mark.django_db
def test_the_portal_says_it_in_words(client):
    tenant, user, _ = account_services.signup(
        tenant="evil", email="x@evil.io", password="a long passphrase"
    )
    tenant_services.tenant_set_quota(tenant, {"max_ca_certificates": 1})
    client.force_login(user)
    page = client.get("/identity/")
    code = page.context["registration_code"]

    def post(name: str):
        ca, ca_key = make_ca(SUBJECT)
        verification, _ = make_leaf(code, ca, ca_key, days=1)
        form = {"ca-name": name, "ca-pem": pem_of(ca), "ca-verification_pem": pem_of(verification)}
        return client.post("/identity/", form, follow=True)

    assert b"CA registered." in post("first").content
    over = post("second").content.decode()
    assert "allows 1 registered CA certificate (max_ca_certificates)" in over
    assert CaCertificate.objects.filter(tenant=tenant).count() == 1
    quota = client.get("/quota/").content.decode()
    assert "Registered CA certificates" in quota


# -- the broker's side: 200 CAs of one subject on the attacker's tenant ----------------------


def dsn() -> str:
    p = connection.get_connection_params()
    return f"host={p['host']} port={p['port']} user={p['user']} dbname={p['dbname']}"


def forged_leaf(issuer: x509.Name, authority_key_id: bytes | None) -> bytes:
    """A device certificate that names the CAs' subject as its issuer, signed by a key no CA
    holds: it fails, after whatever checks the broker gives it."""
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sensor-1")]))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.now(UTC) - timedelta(days=1))
        .not_valid_after(datetime.now(UTC) + timedelta(days=30))
    )
    if authority_key_id is not None:
        aki = x509.AuthorityKeyIdentifier(authority_key_id, None, None)
        builder = builder.add_extension(aki, critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(Encoding.DER)


@pytest.mark.django_db(transaction=True)
def test_a_failing_connect_checks_a_few_of_200_cas_and_parses_none(monkeypatch):
    evil = tenant_services.tenant_create("evil")
    acme = tenant_services.tenant_create("acme")
    cas = [make_ca(SUBJECT) for _ in range(200)]
    CaCertificate.objects.bulk_create(
        CaCertificate(
            tenant=evil,
            name=f"ca-{n}",
            pem=pem_of(ca),
            fingerprint=parse_certificate(pem_of(ca)).fingerprint,
            subject=ca.subject.rfc4514_string(),
            not_after=ca.not_valid_after_utc,
        )
        for n, (ca, _key) in enumerate(cas)
    )
    victim, victim_key = make_ca(SUBJECT)
    CaCertificate.objects.create(
        tenant=acme,
        name="fleet",
        pem=pem_of(victim),
        fingerprint=parse_certificate(pem_of(victim)).fingerprint,
        subject=victim.subject.rfc4514_string(),
        not_after=victim.not_valid_after_utc,
    )
    connection.close()
    checked: list[int] = []
    verify = chain_verification.verify_client_chain

    def counted(leaf, anchors, intermediates, at):
        checked.append(len(anchors))
        return verify(leaf, anchors, intermediates, at)

    monkeypatch.setattr(chain_verification, "verify_client_chain", counted)
    parses = {"n": 0}
    parse = identity.parse_certificate

    def counted_parse(data):
        parses["n"] += 1
        return parse(data)

    monkeypatch.setattr(identity, "parse_certificate", counted_parse)  # each CONNECT's own
    monkeypatch.setattr(ca_index, "parse_certificate", counted_parse)  # the CAs' (once)
    some_ca_key_id = cas[7][0].extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    attempts = [
        (None, "evil/sensor-1"),  # no key identifier: every CA of the name might have signed
        (None, None),  # nor a user name: every tenant's
        (some_ca_key_id.value.digest, "evil/sensor-1"),  # one CA's key identifier, copied
        (b"\x01" * 20, None),  # a key identifier no CA has
    ]

    async def main() -> None:
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=2, open=False) as pool:
            await pool.open(wait=True)
            store = IdentityStore(pool)
            for aki, username in attempts:  # warm: each index is read and parsed once
                with pytest.raises(IdentityError):
                    await identify_certificate(store, forged_leaf(victim.subject, aki), username)
            checked.clear()
            parses["n"] = 0
            for _round in range(5):
                for aki, username in attempts:
                    with pytest.raises(IdentityError):
                        await identify_certificate(
                            store, forged_leaf(victim.subject, aki), username
                        )
            # Each CONNECT parses its own certificate only, never the 200 CAs again...
            assert parses["n"] == 5 * len(attempts)
            # ... and hands the verifier a few of them, never 200.
            assert checked and max(checked) <= identity.MAX_CANDIDATES
            assert sum(checked) <= 5 * len(attempts) * identity.MAX_CANDIDATES
            # The victim's device, with its CA's key identifier, still gets in without naming
            # its tenant: the attacker's 200 CAs of the name do not crowd its CA out.
            device = x509.CertificateBuilder(
                subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sensor-1")]),
                issuer_name=victim.subject,
                public_key=ec.generate_private_key(ec.SECP256R1()).public_key(),
                serial_number=x509.random_serial_number(),
                not_valid_before=datetime.now(UTC) - timedelta(days=1),
                not_valid_after=datetime.now(UTC) + timedelta(days=30),
            ).add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(victim_key.public_key()), False
            )
            der = device.sign(victim_key, hashes.SHA256()).public_bytes(Encoding.DER)
            who = await identify_certificate(store, der)
            assert (who.tenant, who.device) == ("acme", "sensor-1")
            who = await identify_certificate(store, der, "acme/sensor-1")
            assert who.tenant == "acme"

    asyncio.run(main())


def test_checks_may_run_in_processes_of_their_own(monkeypatch):
    """MQTT_CERT_VERIFY_PROCESSES: the verifier holds the GIL, so a flood's checks may run in
    processes instead of threads; the verdicts are the same."""
    monkeypatch.setattr(chain_verification, "VERIFY_PROCESSES", 1)
    ca, ca_key = make_ca(SUBJECT)
    device, _ = make_leaf("sensor-1", ca, ca_key)
    forged = x509.load_der_x509_certificate(forged_leaf(ca.subject, None))
    try:
        path = asyncio.run(chain_verification.verify_off_loop(device, [ca], [], 30))
        assert path == [device, ca]
        with pytest.raises(IdentityError, match="refused"):
            asyncio.run(chain_verification.verify_off_loop(forged, [ca], [], 30))
    finally:
        chain_verification.reset_process_pool()
