"""Device secrets and API tokens: generation, salted hashing, verification.

Pure Python (no Django) so the broker verifies MQTT passwords with the very same code.
Secrets are platform-generated with >= 128 random bits, so a fast salted SHA-256 is the right
hash: slow password hashes defend low-entropy human passwords and would cap connects/s.
"""

from __future__ import annotations

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


def generate_api_token() -> str:
    return "mqp_" + secrets.token_urlsafe(32)


def api_token_digest(token: str) -> str:
    """API tokens are looked up by digest, so they carry no salt (they have 256 random bits)."""
    return hashlib.sha256(token.encode()).hexdigest()
