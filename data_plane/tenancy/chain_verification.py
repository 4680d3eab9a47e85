"""A device's certificate chain checked by `cryptography`'s X.509 verifier, off the event loop
(`identity` decides whose the certificate is; this module only says whether a path from it to
one of the given anchors holds).

`verify_client_chain`: RFC 5280 path validation with the web PKI profile for clients, loosened
where devices' certificates (AWS's among them) do without, then key sizes. `verify_off_loop`:
the same in a thread (`_VERIFIERS`) or, with `MQTT_CERT_VERIFY_PROCESSES=N`, in N processes of
their own, within a deadline; refused with `IdentityError` when no path holds or when it takes
too long.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from datetime import UTC, datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)

from common.security.device_credentials import IdentityError

# Intermediates between a device certificate and its tenant's registered CA, at most.
MAX_INTERMEDIATES = 4
MIN_RSA_BITS = 2048
EC_CURVES = frozenset({"secp256r1", "secp384r1", "secp521r1"})
# Checks run here, off the event loop; a flood of chains queues here, not on the loop.
_VERIFIERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="x509-verify")
# `cryptography`'s verifier holds the GIL while it checks (its policy calls back into Python), so
# a flood of failing chains in threads still takes the event loop's turns. With
# MQTT_CERT_VERIFY_PROCESSES=N (N > 0) the checks run in N processes of their own instead
# (spawned at the first check; certificates cross as DER): the loop loses only the hand-off.
VERIFY_PROCESSES = int(os.environ.get("MQTT_CERT_VERIFY_PROCESSES") or 0)
_processes: ProcessPoolExecutor | None = None
# The web PKI profile, less what devices' certificates (AWS's among them) do without.
_EE_POLICY = (
    ExtensionPolicy.webpki_defaults_ee()
    .may_be_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
    .may_be_present(x509.AuthorityKeyIdentifier, Criticality.AGNOSTIC, None)
)


def _may_sign_certificates(_policy: Any, _cert: x509.Certificate, usage: Any) -> None:
    if usage is not None and not usage.key_cert_sign:
        raise ValueError("keyUsage.keyCertSign must be asserted in a CA certificate")


def _is_ca(_policy: Any, _cert: x509.Certificate, constraints: Any) -> None:
    if not constraints.ca:
        raise ValueError("basicConstraints.cA must be asserted in a CA certificate")


# CAs as `openssl req -x509` makes them (no keyUsage; if stated, it allows signing
# certificates) and as older ones are (basicConstraints not marked critical), as OpenSSL takes
# them; path lengths are the verifier's own check.
_CA_POLICY = (
    ExtensionPolicy.webpki_defaults_ca()
    .may_be_present(x509.AuthorityKeyIdentifier, Criticality.AGNOSTIC, None)
    .may_be_present(x509.KeyUsage, Criticality.AGNOSTIC, _may_sign_certificates)
    .require_present(x509.BasicConstraints, Criticality.AGNOSTIC, _is_ca)
)


async def verify_off_loop(
    leaf: x509.Certificate,
    anchors: list[x509.Certificate],
    intermediates: list[x509.Certificate],
    deadline: float,
) -> list[x509.Certificate]:
    """The path from `leaf` to one of `anchors` that `cryptography`'s verifier builds, checked
    in a thread (signatures cost CPU the event loop must not lose), within `deadline` seconds:
    refused (IdentityError) when there is none, or when it takes longer."""
    loop = asyncio.get_running_loop()
    if VERIFY_PROCESSES > 0:
        ders = [[c.public_bytes(Encoding.DER) for c in group] for group in (anchors, intermediates)]
        work = loop.run_in_executor(
            _process_pool(),
            verify_client_chain_der,
            leaf.public_bytes(Encoding.DER),
            *ders,
            datetime.now(UTC),
        )
        try:
            path = await asyncio.wait_for(work, deadline)
        except TimeoutError:
            raise IdentityError("the certificate check took too long") from None
        except BrokenProcessPool:
            reset_process_pool()
            raise IdentityError("the certificate check failed; try again") from None
        return [x509.load_der_x509_certificate(der) for der in path]
    work = loop.run_in_executor(
        _VERIFIERS, verify_client_chain, leaf, anchors, intermediates, datetime.now(UTC)
    )
    try:
        return await asyncio.wait_for(work, deadline)
    except TimeoutError:
        raise IdentityError("the certificate check took too long") from None


def _process_pool() -> ProcessPoolExecutor:
    global _processes
    if _processes is None:
        context = multiprocessing.get_context("spawn")  # the broker has threads: never fork it
        _processes = ProcessPoolExecutor(max_workers=VERIFY_PROCESSES, mp_context=context)
    return _processes


def reset_process_pool() -> None:
    global _processes
    if _processes is not None:
        _processes.shutdown(wait=False, cancel_futures=True)
    _processes = None


def start_processes() -> None:
    """Start the verifier processes now (with `MQTT_CERT_VERIFY_PROCESSES`), not at the first
    CONNECT that needs one."""
    if VERIFY_PROCESSES > 0:
        _process_pool().submit(_ready)


def _ready() -> bool:
    return True


def verify_client_chain_der(
    leaf: bytes, anchors: list[bytes], intermediates: list[bytes], at: datetime
) -> list[bytes]:
    """`verify_client_chain` over DER, as a verifier process runs it: the path, as DER."""
    path = verify_client_chain(
        x509.load_der_x509_certificate(leaf),
        [x509.load_der_x509_certificate(der) for der in anchors],
        [x509.load_der_x509_certificate(der) for der in intermediates],
        at,
    )
    return [cert.public_bytes(Encoding.DER) for cert in path]


def verify_client_chain(
    leaf: x509.Certificate,
    anchors: list[x509.Certificate],
    intermediates: list[x509.Certificate],
    at: datetime,
) -> list[x509.Certificate]:
    """RFC 5280 path validation of a TLS client's chain by `cryptography` (its web PKI profile,
    for clients): signatures, validity at `at`, basic constraints (a leaf is no CA, a CA's path
    length holds), key usages, extended key usage (client authentication, if stated), name
    constraints, signature algorithms; then key sizes (RSA at least 2048 bits, EC on P-256,
    P-384 or P-521). A device certificate needs no subjectAltName (AWS's have a CN only) and no
    Authority Key Identifier. The path, the leaf first and the anchor last."""
    if not anchors:
        raise IdentityError("no registered CA to check the certificate against")
    builder = (
        PolicyBuilder()
        .store(Store(anchors))
        .time(at)
        .max_chain_depth(MAX_INTERMEDIATES + 1)
        .extension_policies(ca_policy=_CA_POLICY, ee_policy=_EE_POLICY)
    )
    try:
        verified = builder.build_client_verifier().verify(leaf, intermediates)
    except VerificationError as exc:
        raise IdentityError(f"certificate chain refused: {exc}") from None
    for cert in verified.chain:
        _check_key(cert)
    return list(verified.chain)


def _check_key(cert: x509.Certificate) -> None:
    key = cert.public_key()
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < MIN_RSA_BITS:
            raise IdentityError(f"an RSA key of {key.key_size} bits (at least {MIN_RSA_BITS})")
    elif isinstance(key, ec.EllipticCurvePublicKey):
        if key.curve.name not in EC_CURVES:
            raise IdentityError(f"an EC key on {key.curve.name} (P-256, P-384 or P-521 only)")
    elif not isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        raise IdentityError("a key of a type not accepted for devices")
