"""Device secrets and API tokens: generation, salted hashing, verification.

Pure Python (no Django) so the broker verifies MQTT passwords with the very same code.
Secrets are platform-generated with >= 128 random bits, so a fast salted SHA-256 is the right
hash: slow password hashes defend low-entropy human passwords and would cap connects/s.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_BYTES = 24  # 192 bits
ALGORITHM = "sha256"


def generate_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def hash_secret(secret: str, salt: str | None = None) -> str:
    """`sha256$<salt>$<hex digest>` of the salt and secret."""
    salt = salt if salt is not None else secrets.token_hex(8)
    digest = hashlib.sha256(f"{salt}${secret}".encode()).hexdigest()
    return f"{ALGORITHM}${salt}${digest}"


def verify_secret(secret: str | bytes, stored: str) -> bool:
    if isinstance(secret, bytes):
        try:
            secret = secret.decode()
        except UnicodeDecodeError:
            return False
    try:
        algorithm, salt, _digest = stored.split("$", 2)
    except ValueError:
        return False
    if algorithm != ALGORITHM:
        return False
    return hmac.compare_digest(hash_secret(secret, salt), stored)


SCRAM_ITERATIONS = 4096  # RFC 7677's minimum; the secrets have >= 128 random bits


def scram_verifier(
    secret: str, iterations: int = SCRAM_ITERATIONS, salt: bytes | None = None
) -> str:
    """The SCRAM-SHA-256 verifier of a secret (RFC 5802: salt, StoredKey, ServerKey, iteration
    count), as `scram-sha-256$<iterations>$<salt b64>$<stored b64>$<server b64>`: what MQTT 5.0
    enhanced authentication needs, from which the secret cannot be recovered.

    `salt`: a rotated secret reuses its predecessor's salt and iteration count, so during the
    grace period the broker can send one server-first message and accept a proof from either
    secret (the salt defends against precomputation across devices, not between the two secrets
    of one device)."""
    from scramp import ScramMechanism

    salt, stored, server, count = ScramMechanism("SCRAM-SHA-256").make_auth_info(
        secret, iteration_count=iterations, salt=salt
    )
    parts = [base64.b64encode(x).decode() for x in (salt, stored, server)]
    return "$".join(["scram-sha-256", str(count), *parts])


def parse_scram_verifier(stored: str) -> tuple[bytes, bytes, bytes, int] | None:
    """(salt, stored key, server key, iterations) as scramp takes them; None if not one."""
    try:
        name, count, salt, stored_key, server_key = stored.split("$")
        if name != "scram-sha-256":
            return None
        decoded = [base64.b64decode(x, validate=True) for x in (salt, stored_key, server_key)]
        return decoded[0], decoded[1], decoded[2], int(count)
    except (ValueError, TypeError):
        return None


def generate_api_token() -> str:
    return "mqp_" + secrets.token_urlsafe(32)


def api_token_digest(token: str) -> str:
    """API tokens are looked up by digest, so they carry no salt (they have 256 random bits)."""
    return hashlib.sha256(token.encode()).hexdigest()
