"""Secrets the platform keeps in its database to use again, sealed at rest.

A rule's webhook signing secret is one: the rule jobs sign every call with it, so it cannot be
stored as a hash the way device secrets are; a sink's credentials are others (`SEALED_FIELDS`).
In the database each is `sealed:v1:<Fernet token>` (AES-128-CBC with HMAC-SHA256,
`cryptography`) under a key that is not in the database: `SEALING_KEY` (any long random string;
the Fernet key is derived from it with HKDF), else the embedded default file `.data/sealing-key`,
created once. A copy of the database alone (a backup, a replica, a query that reads more than it
should) then yields no secret that forges the platform's webhook signatures, nor a credential
to a tenant's own systems.

Rotation: the new key in `SEALING_KEY`, the old one in `SEALING_KEY_PREVIOUS`; roll the processes
(both keys unseal, the new one seals); `manage.py reseal_secrets` re-seals what is stored; then drop
the previous key.

Here (not in `tenants`) because the Spark jobs unseal too and import no Django.
"""

from __future__ import annotations

import base64
import logging
import os
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from common.security.key_files import DATA_DIR, shared_key

log = logging.getLogger(__name__)

PREFIX = "sealed:v1:"
DEFAULT_KEY_FILE = DATA_DIR / "sealing-key"


class SealError(ValueError):
    """A sealed value no key of this process opens (sealed under a key since dropped)."""


def _fernet(material: bytes) -> Fernet:
    key = HKDF(algorithm=SHA256(), length=32, salt=None, info=b"mqtt-platform sealed v1")
    return Fernet(base64.urlsafe_b64encode(key.derive(material)))


def _keys() -> list[Fernet]:
    """The current key first (it seals), then the previous one while a rotation runs."""
    keys = [_fernet(shared_key("SEALING_KEY", DEFAULT_KEY_FILE))]
    previous = os.environ.get("SEALING_KEY_PREVIOUS")
    if previous:
        keys.append(_fernet(previous.encode()))
    return keys


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def seal(secret: str) -> str:
    """`secret` sealed under the current key; a value already sealed is kept as it is."""
    if is_sealed(secret):
        return secret
    return PREFIX + _keys()[0].encrypt(secret.encode()).decode()


def unseal(value: str) -> str:
    """The secret inside a sealed value (a value stored before sealing existed is returned as it
    is); SealError if no key of this process opens it."""
    if not is_sealed(value):
        return value
    try:
        return MultiFernet(_keys()).decrypt(value[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise SealError(
            "a sealed secret no key of this process opens (SEALING_KEY, SEALING_KEY_PREVIOUS)"
        ) from None


def reseal(value: str) -> str:
    """`value` sealed under the current key (after a rotation; SealError if no key opens it)."""
    if is_sealed(value):
        try:
            _keys()[0].decrypt(value[len(PREFIX) :].encode())
            return value  # the current key's already
        except InvalidToken:
            pass
    return PREFIX + _keys()[0].encrypt(unseal(value).encode()).decode()


# -- a rule's actions (a JSON list of objects; webhooks carry a "secret", sinks credentials) ------

# Every field of an action that is sealed at rest: a webhook's or an HTTP batch's signing
# "secret", and a sink's credentials (S3/SQS/Kinesis "secret_access_key", an MQTT bridge's
# "password", a Postgres sink's whole "dsn", which holds its password). The same names as
# `common.contracts.rule_actions.SECRET_FIELDS` (a test holds them equal).
SEALED_FIELDS = ("secret", "secret_access_key", "password", "dsn")


def without_secrets(action: dict[str, Any]) -> dict[str, Any]:
    """An action with none of its secret fields (SEALED_FIELDS): as the retry queue and dead
    letters keep it (the job takes the secrets from the rule when it runs it again)."""
    return {k: v for k, v in action.items() if k not in SEALED_FIELDS}


def seal_actions(actions: Any) -> Any:
    """The actions as the database keeps them: each secret field (SEALED_FIELDS) sealed."""
    if not isinstance(actions, list):
        return actions
    return [_sealed(a) if isinstance(a, dict) else a for a in actions]


def _sealed(action: dict[str, Any]) -> dict[str, Any]:
    fields = [f for f in SEALED_FIELDS if isinstance(action.get(f), str)]
    if not fields:
        return action
    return {**action, **{f: seal(action[f]) for f in fields}}


def open_actions(actions: Any) -> Any:
    """The actions as stored, each secret field opened for the code that signs or connects
    with it, or shows it to members who may write. One no key opens stays sealed, and is
    logged: the call then fails without being made (`spark.rules.actions`), and a member sees
    it must be replaced."""
    if not isinstance(actions, list):
        return actions
    opened = []
    for action in actions:
        if isinstance(action, dict) and any(is_sealed(action.get(f)) for f in SEALED_FIELDS):
            action = dict(action)
            for field in SEALED_FIELDS:
                if not is_sealed(action.get(field)):
                    continue
                try:
                    action[field] = unseal(action[field])
                except SealError as exc:
                    log.warning("%s of a %s action not opened: %s", field, action.get("type"), exc)
        opened.append(action)
    return opened
