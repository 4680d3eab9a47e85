"""The rule-action contract: the shape of a rule's actions, decided here once for the control
plane that stores them and the rule jobs that run them.

`normalize_actions(actions, previous)` returns the actions as they are stored (a webhook without a
secret gets one) or raises `RuleActionError` naming the action (1-based, as users count) and the
field: the control plane's save-time check. `republish_topic_problem(topic)` says why a topic,
once its placeholders are filled, cannot be republished to: the jobs ask it of every rendered
topic, the save-time check of the template. Pure Python, no Django.

    {"type": "republish", "topic": template, "payload"?: template, "qos"?: 0..2, "retain"?: bool}
    {"type": "webhook", "url": "http(s)://…", "secret"?: str}
    {"type": "dataset", "name": slug}

Sinks (issue 47: the rules job keeps their outputs in a durable outbox and delivers them):

    {"type": "s3", "bucket", "prefix"?, "format"?: "jsonl"|"parquet" (stored, default jsonl),
     "endpoint_url"?, "region"?, "access_key_id"?, "secret_access_key"?}
    {"type": "sqs", "queue_url", …the s3 credential fields (endpoint_url, region, keys)}
    {"type": "kinesis", "stream", "partition_key"?: template, …the credential fields}
    {"type": "postgres", "dsn": "postgresql://user:password@host:port/db", "table": "[schema.]name",
     "columns"?: {column: template}}
    {"type": "mqtt_bridge", "host", "port", "tls"?, "username"?, "password"?, "topic": template,
     "qos"?: 0..2}
    {"type": "http_batch", "url": "http(s)://…", "secret"?: str (signs as a webhook's does)}

Every endpoint (`endpoint_url`, `queue_url`, `url`, the bridge's host, the dsn's host) is vetted
like a webhook's URL (`common.webhooks.destinations.url_problem`, `WEBHOOK_ALLOW`). Secrets
(`SECRET_FIELDS`: a webhook's or batch's signing `secret`, `secret_access_key`, a bridge's
`password`, the whole `dsn`) are sealed at rest (`common.security.sealed`). A tenant's own
credentials (`CREDENTIAL_FIELDS`) are shown to nobody once saved (`redact_credentials`; a signing
secret still to members who may write), and an action saved again without one, or with it as
`REDACTED` (what a reader was shown), keeps the one stored for the same destination: the same
URL for a signing secret, the same endpoint and access key for `secret_access_key`, the same
host, port, TLS and username for a bridge's password, the same host, port, user and database for
a dsn's password. A changed destination needs the credential again, so no one who may edit a
rule can send a stored credential somewhere new.

Templates use `${field}` placeholders (`${clientid}`, `${payload.temp}`), filled from the rule's
output when the action runs; the topic must already be a valid publish topic with every
placeholder standing for a plain level fragment, so only the filled values can still go wrong.
"""

from __future__ import annotations

import re
import secrets
from typing import Any
from urllib.parse import urlsplit

from common.mqtt.errors import MQTTError
from common.mqtt.topics import validate_topic_name
from common.webhooks.destinations import url_problem

# 32 bytes = 256 random bits; the jobs sign each webhook body with it (X-Signature-256).
WEBHOOK_SECRET_BYTES = 32
MAX_ACTIONS = 16
MAX_TEMPLATE = 4096
_PLACEHOLDER = re.compile(r"\$\{([^{}]*)\}")
# What `common.rules.render_template` reads: `${.}`, `${clientid}`, `${payload.a[1]}`,
# `${pub_props.'User-Property'}`, spaces around the path allowed.
_PLACEHOLDER_NAME = re.compile(r"""^\s*(?:\.|[A-Za-z_'"][^${}]*)\s*$""")
# A dataset's name is a folder of the tenant's object-store prefix: nothing that climbs out.
DATASET_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9_-]{0,62}[a-z0-9])?$")

QOS_LEVELS = (0, 1, 2)

_AWS_FIELDS = {"endpoint_url", "region", "access_key_id", "secret_access_key"}
FIELDS = {
    "republish": ({"topic"}, {"payload", "qos", "retain"}),
    "webhook": ({"url"}, {"secret"}),
    "dataset": ({"name"}, set()),
    "s3": ({"bucket"}, {"prefix", "format"} | _AWS_FIELDS),
    "sqs": ({"queue_url"}, set(_AWS_FIELDS)),
    "kinesis": ({"stream"}, {"partition_key"} | _AWS_FIELDS),
    "postgres": ({"dsn", "table"}, {"columns"}),
    "mqtt_bridge": ({"host", "port", "topic"}, {"tls", "username", "password", "qos"}),
    "http_batch": ({"url"}, {"secret"}),
}
# The actions whose outputs go through the durable outbox (`GET /api/v1/sinks` lists them).
SINK_TYPES = ("s3", "sqs", "kinesis", "postgres", "mqtt_bridge", "http_batch")
S3_FORMATS = ("jsonl", "parquet")
# Fields sealed at rest; of them, the tenant's own credentials are never shown again.
SECRET_FIELDS = ("secret", "secret_access_key", "password", "dsn")
CREDENTIAL_FIELDS = ("secret_access_key", "password", "dsn")


class RuleActionError(ValueError):
    def __init__(self, index: int, message: str):
        self.index = index
        super().__init__(f"Action {index + 1}: {message}")


def normalize_actions(
    actions: Any, previous: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The actions as stored, or RuleActionError. `previous` (the rule's stored actions) lets a
    webhook re-sent without its secret keep the one already issued for the same URL."""
    if not isinstance(actions, list):
        raise RuleActionError(-1, "actions must be a list of objects.")
    if len(actions) > MAX_ACTIONS:
        raise RuleActionError(MAX_ACTIONS, f"at most {MAX_ACTIONS} actions per rule.")
    known_secrets = _known_secrets(previous)
    return [_normalize(index, action, known_secrets) for index, action in enumerate(actions)]


def _normalize(index: int, action: Any, known_secrets: dict[Any, Any]) -> dict[str, Any]:
    if not isinstance(action, dict):
        raise RuleActionError(index, "must be an object with a 'type'.")
    kind = action.get("type")
    if kind not in FIELDS:
        names = ", ".join(repr(name) for name in FIELDS)
        raise RuleActionError(index, f"unknown type {kind!r}: use one of {names}.")
    required, optional = FIELDS[kind]
    unknown = sorted(set(action) - required - optional - {"type"})
    if unknown:
        allowed = ", ".join(sorted(required | optional))
        raise RuleActionError(
            index, f"unknown field(s) {', '.join(unknown)} for {kind} (allowed: {allowed})."
        )
    missing = sorted(required - set(action))
    if missing:
        raise RuleActionError(index, f"a {kind} action needs {', '.join(missing)}.")
    if kind == "republish":
        return _republish(index, action)
    if kind == "webhook":
        return _webhook(index, action, known_secrets)
    if kind == "dataset":
        return _dataset(index, action)
    from common.contracts import sink_actions  # the sinks' checks, beside these

    return sink_actions.normalize_sink(index, action, known_secrets)


def _republish(index: int, action: dict[str, Any]) -> dict[str, Any]:
    topic = action["topic"]
    if not isinstance(topic, str) or not topic.strip():
        raise RuleActionError(index, "topic must be a non-empty string.")
    check_template(index, "topic", topic)
    if topic.startswith("$"):
        raise RuleActionError(index, "topic must not start with '$' (reserved for the broker).")
    # Every placeholder stands for one plain fragment: what is left must be a publish topic.
    problem = republish_topic_problem(_PLACEHOLDER.sub("x", topic))
    if problem is not None:
        raise RuleActionError(index, f"topic {topic!r} is not a valid topic: {problem}.")
    result: dict[str, Any] = {"type": "republish", "topic": topic}
    if "payload" in action:
        payload = action["payload"]
        if not isinstance(payload, str):
            raise RuleActionError(index, "payload must be a string template, e.g. '${payload}'.")
        check_template(index, "payload", payload)
        result["payload"] = payload
    if "qos" in action:
        qos = action["qos"]
        if isinstance(qos, bool) or not isinstance(qos, int) or qos not in QOS_LEVELS:
            raise RuleActionError(index, "qos must be 0, 1 or 2.")
        result["qos"] = qos
    if "retain" in action:
        if not isinstance(action["retain"], bool):
            raise RuleActionError(index, "retain must be true or false.")
        result["retain"] = action["retain"]
    return result


def republish_topic_problem(topic: str) -> str | None:
    """Why a republish topic (placeholders filled) cannot be published to, or None: it must be a
    valid PUBLISH topic (MQTT-4.7: no wildcards, no U+0000, not empty) outside the broker's `$`
    topics, which the rules identity may never reach."""
    if topic.startswith("$"):
        return "a '$' topic is reserved for the broker"
    try:
        validate_topic_name(topic)
    except MQTTError as exc:
        return str(exc)
    return None


def _known_secrets(previous: list[dict[str, Any]] | None) -> dict[Any, Any]:
    """The secrets the rule holds now, by what they may be kept for (`secret_identity`)."""
    from common.contracts.sink_actions import secret_identity

    known: dict[Any, Any] = {}
    for stored in previous or []:  # stored actions: checked when saved, still JSON
        if not isinstance(stored, dict):
            continue
        for field in SECRET_FIELDS:
            value = stored.get(field)
            identity = secret_identity(stored, field) if value else None
            if identity is not None:
                known.setdefault(identity, value)
    return known


def _webhook(index: int, action: dict[str, Any], known_secrets: dict[Any, Any]) -> dict[str, Any]:
    url = webhook_url(index, action["url"])
    return {"type": "webhook", "url": url, "secret": signing_secret(index, action, known_secrets)}


def webhook_url(index: int, url: Any, field: str = "url") -> str:
    """A URL the platform may call (a webhook's, a batch's, an AWS endpoint's): http(s), a
    host, no credentials, no spaces, vetted as `url_problem` says; else RuleActionError."""
    if not isinstance(url, str):
        raise RuleActionError(index, f"{field} must be a string.")
    parts = urlsplit(url)
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url) or len(url) > 2048:
        raise RuleActionError(index, f"{field} must have no spaces and at most 2048 characters.")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RuleActionError(
            index, f"{field} must be an http:// or https:// URL with a host: {url!r}."
        )
    if parts.username or parts.password:
        credentials = "the secret signs requests" if field == "url" else "give them as fields"
        raise RuleActionError(index, f"{field} must not carry credentials; {credentials}.")
    problem = url_problem(url)
    if problem is not None:
        raise RuleActionError(index, f"{field} {url!r}: {problem}.")
    return url


def signing_secret(index: int, action: dict[str, Any], known_secrets: dict[Any, Any]) -> str:
    """A webhook's (or batch's) signing secret: the one given, else the one this URL had, else
    a new one (the tenant reads it to check signatures)."""
    secret = action.get("secret")
    if secret is None or secret == "" or secret == REDACTED:
        known = known_secrets.get((action["type"], "secret", action["url"]))
        return known or secrets.token_urlsafe(WEBHOOK_SECRET_BYTES)
    if not isinstance(secret, str) or not 16 <= len(secret) <= 256:
        raise RuleActionError(index, "secret must be a string of 16 to 256 characters.")
    return secret


def _dataset(index: int, action: dict[str, Any]) -> dict[str, Any]:
    name = action["name"]
    if not isinstance(name, str) or not DATASET_NAME.match(name):
        raise RuleActionError(
            index,
            "name must be a slug: 1-64 lowercase letters, digits, '-' or '_', "
            "starting and ending with a letter or digit.",
        )
    return {"type": "dataset", "name": name}


def check_template(index: int, field: str, template: str) -> None:
    """A `${field}` template's placeholders each name a field, and each is closed."""
    if len(template) > MAX_TEMPLATE:
        raise RuleActionError(index, f"{field} is longer than {MAX_TEMPLATE} characters.")
    for match in _PLACEHOLDER.finditer(template):
        if not _PLACEHOLDER_NAME.match(match.group(1)):
            raise RuleActionError(
                index,
                f"{field}: placeholder {match.group(0)!r} at character {match.start() + 1} "
                "must name a field, e.g. ${clientid} or ${payload.temp}.",
            )
    closed = {match.start() for match in _PLACEHOLDER.finditer(template)}
    for opening in re.finditer(r"\$\{", template):
        if opening.start() not in closed:
            raise RuleActionError(
                index, f"{field}: '${{' at character {opening.start() + 1} is never closed."
            )


REDACTED = "********"


def redact_secrets(actions: Any) -> list[Any]:
    """The actions with every secret hidden: for readers who may not sign (viewers, dead
    letters), since a signing secret lets its holder forge the platform's webhook signatures,
    and a credential opens the tenant's own systems."""
    return [_redacted(a, SECRET_FIELDS) for a in actions or []]


def redact_credentials(actions: Any) -> list[Any]:
    """The actions with the tenant's own credentials hidden (`CREDENTIAL_FIELDS`) and signing
    secrets left: for members who may write, who need the signing secret to check signatures
    but never need a credential they gave back (saving `REDACTED` keeps it)."""
    return [_redacted(a, CREDENTIAL_FIELDS) for a in actions or []]


def _redacted(action: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(action, dict) or not any(field in action for field in fields):
        return action
    from common.contracts.sink_actions import dsn_redacted

    hidden = dict(action)
    for field in fields:
        if field not in hidden:
            continue
        if field == "dsn":  # where it goes stays readable; its password does not
            hidden["dsn"] = dsn_redacted(hidden["dsn"])
        else:
            hidden[field] = REDACTED
    return hidden
