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

import ipaddress
import re
import secrets
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

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
        article = "an" if kind in ("s3", "sqs", "mqtt_bridge", "http_batch") else "a"  # as said
        raise RuleActionError(index, f"{article} {kind} action needs {', '.join(missing)}.")
    if kind == "republish":
        return _republish(index, action)
    if kind == "webhook":
        return _webhook(index, action, known_secrets)
    if kind == "dataset":
        return _dataset(index, action)
    return normalize_sink(index, action, known_secrets)


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


def _known_secrets(previous: Any) -> dict[Any, Any]:
    """The secrets the rule holds now, by what they may be kept for (`secret_identity`)."""
    known: dict[Any, Any] = {}
    for stored in previous or []:  # stored actions: checked when saved, still JSON
        if not isinstance(stored, dict):
            continue
        for field in SECRET_FIELDS:
            value = stored.get(field)
            identity = secret_identity(stored, field) if value else None
            try:
                if identity is not None:
                    known.setdefault(identity, value)
            except TypeError:  # a stored value no check would take now (unhashable): not kept
                continue
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
    hidden = dict(action)
    for field in fields:
        if field not in hidden:
            continue
        if field == "dsn":  # where it goes stays readable; its password does not
            hidden["dsn"] = dsn_redacted(hidden["dsn"])
        else:
            hidden[field] = REDACTED
    return hidden


# -- sinks (issue 47) -----------------------------------------------------------------------------
# The save-time check of the sink actions (`normalize_sink`, called by `_normalize` for these
# types). Each error names the action (1-based) and the field in words. What each keeps and
# refuses, so the writers (`common.sinks`) and the rules job get only what they can use:
#
# - an endpoint the platform connects to is vetted like a webhook's URL (`url_problem`,
#   `WEBHOOK_ALLOW`): `endpoint_url`, `queue_url`, `url`, a bridge's host and port, a dsn's host and
#   port (a dsn names one host, no socket directory and no option that would point it elsewhere);
# - names have the shape their service takes: an S3 bucket's (3-63 lowercase letters, digits, '-'
#   and '.'), a Kinesis stream's, an SQS queue's (the last segment of `queue_url`), a table's and a
#   column's (a Postgres identifier, unquoted, optionally `schema.table`);
# - templates (`partition_key`, a bridge's `topic`, `columns`' values) are checked as a republish
#   topic's are; a bridge's topic, placeholders filled with a plain fragment, must be a valid
#   PUBLISH topic (the far broker decides what its `$` topics allow);
# - credentials go in pairs where they must (`access_key_id` with `secret_access_key`) and are kept
#   from the stored action for the same destination when left out (`secret_identity`).

# S3's bucket naming rules (general purpose buckets): 3-63 characters, lowercase letters,
# digits, '.' and '-', beginning and ending with a letter or digit; not an IP address; no '..'.
S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
KINESIS_STREAM = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
SQS_QUEUE = re.compile(r"^[A-Za-z0-9_-]{1,80}(\.fifo)?$")
# An unquoted Postgres identifier (at most 63 bytes): what needs no quoting cannot inject.
PG_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")
AWS_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,30}[a-z0-9]$")
HOST_NAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,62})(?:\.[A-Za-z0-9_-]{1,63})*\.?$"
)
PG_SCHEMES = ("postgresql", "postgres")
# What a dsn may say beyond user, password, host, port and database: nothing that points the
# connection at another host or a file of the platform's (host, hostaddr, service, passfile,
# sslrootcert, options...).
PG_OPTIONS = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "connect_timeout": None,
    "application_name": None,
}
MAX_PREFIX = 512
MAX_COLUMNS = 256
MAX_PARTITION_KEY = 256
MAX_CREDENTIAL = 1024
MAX_NAME = 256


def normalize_sink(index: int, action: dict[str, Any], known: dict[Any, Any]) -> dict[str, Any]:
    """A sink action as stored, its fields checked (RuleActionError naming the field);
    `known` holds the rule's stored secrets by `secret_identity`."""
    kind = action["type"]
    if kind == "http_batch":
        url = webhook_url(index, action["url"])
        checked = {"type": kind, "url": url}
        return {**checked, "secret": signing_secret(index, {**action, **checked}, known)}
    if kind == "s3":
        return _s3(index, action, known)
    if kind == "sqs":
        return _sqs(index, action, known)
    if kind == "kinesis":
        return _kinesis(index, action, known)
    if kind == "postgres":
        return _postgres(index, action, known)
    return _mqtt_bridge(index, action, known)


# -- what a stored secret may be kept for -------------------------------------------------------


def _origin(url: Any) -> str:
    if not isinstance(url, str):
        return ""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def secret_identity(action: dict[str, Any], field: str) -> tuple[Any, ...] | None:
    """What a stored secret is kept for when the action is saved again without it: every field
    that decides where it is sent. None for a field that is no secret of this action type."""
    kind = action.get("type")
    if field == "secret" and kind in ("webhook", "http_batch"):
        return (kind, field, action.get("url"))
    if field == "secret_access_key" and kind in ("s3", "sqs", "kinesis"):
        queue = _origin(action.get("queue_url")) if kind == "sqs" else ""
        return (
            "aws",
            field,
            _origin(action.get("endpoint_url")),
            queue,
            action.get("access_key_id"),
        )
    if field == "password" and kind == "mqtt_bridge":
        host = action.get("host")
        host = host.lower() if isinstance(host, str) else host
        return (
            kind,
            field,
            host,
            action.get("port"),
            bool(action.get("tls")),
            action.get("username"),
        )
    if field == "dsn" and kind == "postgres":
        parsed = _dsn_parts(action.get("dsn"))
        if parsed is None:
            return None
        return (kind, field, *parsed)
    return None


def _dsn_parts(dsn: Any) -> tuple[str, int, str, str] | None:
    """(host, port, user, database) of a dsn, for `secret_identity`; None if it is no URL."""
    if not isinstance(dsn, str):
        return None
    try:
        parts = urlsplit(dsn)
        port = parts.port or 5432
    except ValueError:
        return None
    return ((parts.hostname or "").lower(), port, unquote(parts.username or ""), parts.path)


def _kept(index: int, action: dict[str, Any], field: str, known: dict[Any, Any]) -> Any:
    """The value of a secret field: the one given, or (left out, empty or `REDACTED`) the one
    stored for the same destination, else None."""
    value = action.get(field)
    if value is None or value == "" or value == REDACTED:
        identity = secret_identity(action, field)
        found = known.get(identity) if identity is not None else None
        if value == REDACTED and found is None:
            raise RuleActionError(
                index,
                f"{field} is hidden ({REDACTED}) but no stored one is kept for this destination: "
                "give it again (a credential stays with the endpoint and name it was given for).",
            )
        return found
    return value


# -- the checks ----------------------------------------------------------------------------------


def _text(index: int, action: dict[str, Any], field: str, limit: int = MAX_NAME) -> str:
    value = action[field]
    if not isinstance(value, str) or not value or len(value) > limit:
        raise RuleActionError(
            index, f"{field} must be a non-empty string of at most {limit} characters."
        )
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise RuleActionError(index, f"{field} must not hold control characters.")
    return value


def _aws(index: int, action: dict[str, Any], known: dict[Any, Any]) -> dict[str, Any]:
    """The credential fields S3, SQS and Kinesis share."""
    result: dict[str, Any] = {}
    if "endpoint_url" in action:
        result["endpoint_url"] = webhook_url(index, action["endpoint_url"], "endpoint_url")
    if "region" in action:
        region = action["region"]
        if not isinstance(region, str) or not AWS_REGION.match(region):
            raise RuleActionError(
                index,
                "region must be a region name such as 'eu-west-1' (lowercase letters, "
                "digits and '-').",
            )
        result["region"] = region
    if "access_key_id" in action:
        key_id = _text(index, action, "access_key_id", 128)
        if any(ch.isspace() for ch in key_id):
            raise RuleActionError(index, "access_key_id must have no spaces.")
        result["access_key_id"] = key_id
    secret = _kept(index, action, "secret_access_key", known)
    if secret is not None:
        if not isinstance(secret, str) or len(secret) > MAX_CREDENTIAL or "\x00" in secret:
            raise RuleActionError(
                index, f"secret_access_key must be a string of at most {MAX_CREDENTIAL} characters."
            )
        if "access_key_id" not in result:
            raise RuleActionError(index, "secret_access_key needs its access_key_id.")
        result["secret_access_key"] = secret
    elif "access_key_id" in result:
        raise RuleActionError(
            index,
            "access_key_id needs its secret_access_key (a stored one is kept only for the same "
            "access key and endpoint).",
        )
    return result


def _s3(index: int, action: dict[str, Any], known: dict[Any, Any]) -> dict[str, Any]:
    bucket = action["bucket"]
    if (
        not isinstance(bucket, str)
        or not S3_BUCKET.match(bucket)
        or ".." in bucket
        or _is_ip(bucket)
        or bucket.startswith("xn--")
    ):
        raise RuleActionError(
            index,
            "bucket must be an S3 bucket name: 3-63 lowercase letters, digits, '.' or '-', "
            "starting and ending with a letter or digit, not an IP address.",
        )
    result: dict[str, Any] = {"type": "s3", "bucket": bucket}
    if "prefix" in action:
        prefix = action["prefix"]
        if not isinstance(prefix, str) or len(prefix) > MAX_PREFIX:
            raise RuleActionError(
                index, f"prefix must be a string of at most {MAX_PREFIX} characters."
            )
        if prefix.startswith("/") or any(ord(ch) < 32 or ord(ch) == 127 for ch in prefix):
            raise RuleActionError(
                index, "prefix must not start with '/' nor hold control characters."
            )
        if prefix:
            result["prefix"] = prefix
    fmt = action.get("format", "jsonl")
    if fmt not in S3_FORMATS:
        raise RuleActionError(index, "format must be 'jsonl' or 'parquet'.")
    result["format"] = fmt
    return {**result, **_aws(index, action, known)}


def _sqs(index: int, action: dict[str, Any], known: dict[Any, Any]) -> dict[str, Any]:
    queue_url = webhook_url(index, action["queue_url"], "queue_url")
    parts = urlsplit(queue_url)
    name = parts.path.rstrip("/").rsplit("/", 1)[-1]
    if parts.query or parts.fragment or not SQS_QUEUE.match(name):
        raise RuleActionError(
            index,
            "queue_url must be a queue's URL, ending in its name (1-80 letters, digits, '-' or "
            "'_', '.fifo' for a FIFO queue), e.g. "
            "https://sqs.eu-west-1.amazonaws.com/123456789012/q.",
        )
    return {"type": "sqs", "queue_url": queue_url, **_aws(index, action, known)}


def _kinesis(index: int, action: dict[str, Any], known: dict[Any, Any]) -> dict[str, Any]:
    stream = action["stream"]
    if not isinstance(stream, str) or not KINESIS_STREAM.match(stream):
        raise RuleActionError(
            index, "stream must be a Kinesis stream name: 1-128 letters, digits, '_', '.' or '-'."
        )
    result: dict[str, Any] = {"type": "kinesis", "stream": stream}
    if "partition_key" in action:
        key = action["partition_key"]
        if not isinstance(key, str) or not key or len(key) > MAX_PARTITION_KEY:
            raise RuleActionError(
                index,
                f"partition_key must be a template of 1 to {MAX_PARTITION_KEY} characters, e.g. "
                "'${clientid}'.",
            )
        check_template(index, "partition_key", key)
        result["partition_key"] = key
    return {**result, **_aws(index, action, known)}


def _postgres(index: int, action: dict[str, Any], known: dict[Any, Any]) -> dict[str, Any]:
    dsn = _pg_dsn(index, action["dsn"], known)
    table = action["table"]
    parts = table.split(".") if isinstance(table, str) else []
    if not 1 <= len(parts) <= 2 or not all(PG_IDENTIFIER.match(p) for p in parts):
        raise RuleActionError(
            index,
            "table must be a table's name, optionally with its schema ('readings' or "
            "'iot.readings'): letters, digits, '_' or '$', starting with a letter or '_', at "
            "most 63 characters each.",
        )
    result: dict[str, Any] = {"type": "postgres", "dsn": dsn, "table": table}
    if "columns" in action:
        columns = action["columns"]
        if not isinstance(columns, dict) or not columns or len(columns) > MAX_COLUMNS:
            raise RuleActionError(
                index,
                f"columns must be an object of 1 to {MAX_COLUMNS} columns, each a template: "
                '{"device": "${clientid}", "temp": "${payload.temp}"}.',
            )
        for column, template in columns.items():
            if not PG_IDENTIFIER.match(column):
                raise RuleActionError(
                    index,
                    f"columns: {column[:80]!r} is not a column name (letters, digits, '_' or "
                    "'$', starting with a letter or '_', at most 63 characters).",
                )
            if not isinstance(template, str):
                raise RuleActionError(
                    index, f"columns: {column} must be a string template, e.g. '${{payload.temp}}'."
                )
            check_template(index, f"columns: {column}", template)
        result["columns"] = dict(columns)
    return result


def _pg_dsn(index: int, dsn: Any, known: dict[Any, Any]) -> str:
    """A dsn the writers may connect with: a postgresql:// URL to one vetted host."""
    example = "postgresql://user:password@db.example.com:5432/telemetry"
    if dsn == REDACTED:
        raise RuleActionError(index, f"dsn is hidden ({REDACTED}): give it again.")
    if not isinstance(dsn, str) or not dsn or len(dsn) > 2048:
        raise RuleActionError(index, f"dsn must be a connection URL such as {example}.")
    if not dsn.startswith(tuple(f"{scheme}://" for scheme in PG_SCHEMES)):
        raise RuleActionError(index, f"dsn must be a postgresql:// URL, such as {example}.")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in dsn):
        raise RuleActionError(index, "dsn must have no spaces or control characters.")
    try:
        parts = urlsplit(dsn)
        port = parts.port or 5432
    except ValueError:
        raise RuleActionError(index, "dsn: the port is not a number from 0 to 65535.") from None
    if parts.scheme not in PG_SCHEMES:
        raise RuleActionError(index, f"dsn must be a postgresql:// URL, such as {example}.")
    host = parts.hostname or ""
    if not host or "," in parts.netloc or "%" in host:
        raise RuleActionError(
            index, f"dsn must name one host (no socket directory, no host list): {example}."
        )
    if parts.fragment:
        raise RuleActionError(index, "dsn must have no '#' fragment.")
    database = parts.path.lstrip("/")
    if "/" in database:
        raise RuleActionError(index, "dsn: the database name must not hold '/'.")
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name not in PG_OPTIONS:
            allowed = ", ".join(sorted(PG_OPTIONS))
            raise RuleActionError(
                index, f"dsn: option {name[:40]!r} is not allowed (only {allowed})."
            )
        choices = PG_OPTIONS[name]
        if choices is not None and value not in choices:
            raise RuleActionError(index, f"dsn: {name} must be one of {', '.join(choices)}.")
        if name == "connect_timeout" and not (value.isdigit() and 1 <= int(value) <= 300):
            raise RuleActionError(index, "dsn: connect_timeout must be 1 to 300 seconds.")
    problem = url_problem(urlunsplit(("tcp", _netloc(host, port), "", "", "")))
    if problem is not None:
        raise RuleActionError(index, f"dsn's host {host}:{port}: {problem}.")
    if unquote(parts.password or "") == REDACTED:
        # Saved again as it was shown: the stored dsn of the same host, port, user and database
        # holds the password; the rest (the options) is as given now.
        stored = known.get(secret_identity({"type": "postgres", "dsn": dsn}, "dsn"))
        if stored is None:
            raise RuleActionError(
                index,
                f"dsn's password is hidden ({REDACTED}) but no stored one is kept for this host, "
                "port, user and database: give it again.",
            )
        netloc = (
            f"{parts.username or ''}:{urlsplit(stored).password or ''}@{_netloc(host, parts.port)}"
        )
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    return dsn


def dsn_redacted(dsn: Any) -> Any:
    """The dsn with its password as `REDACTED` (where it connects stays readable); a value that
    is no dsn URL is hidden whole."""
    if not isinstance(dsn, str):
        return dsn
    try:
        parts = urlsplit(dsn)
        password = parts.password
        host, port = parts.hostname, parts.port
    except ValueError:
        return REDACTED
    if parts.scheme not in PG_SCHEMES:
        return REDACTED
    if password is None:
        return dsn
    user = parts.username or ""
    netloc = f"{user}:{REDACTED}@{_netloc(host or '', port)}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _netloc(host: str, port: int | None) -> str:
    bracketed = f"[{host}]" if ":" in host else host
    return f"{bracketed}:{port}" if port else bracketed


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _mqtt_bridge(index: int, action: dict[str, Any], known: dict[Any, Any]) -> dict[str, Any]:
    host = action["host"]
    if not isinstance(host, str) or not (HOST_NAME.match(host) or _is_ip(host)):
        raise RuleActionError(
            index, "host must be the far broker's host name or IP address (no scheme, no port)."
        )
    port = action["port"]
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise RuleActionError(index, "port must be a number from 1 to 65535.")
    problem = url_problem(urlunsplit(("mqtt", _netloc(host, port), "", "", "")))
    if problem is not None:
        raise RuleActionError(index, f"host {host}:{port}: {problem}.")
    result: dict[str, Any] = {"type": "mqtt_bridge", "host": host, "port": port}
    if "tls" in action:
        if not isinstance(action["tls"], bool):
            raise RuleActionError(index, "tls must be true or false.")
        result["tls"] = action["tls"]
    if "username" in action:
        result["username"] = _text(index, action, "username", MAX_CREDENTIAL)
    password = _kept(index, {**action, **result}, "password", known)
    if password is not None:
        if not isinstance(password, str) or len(password) > MAX_CREDENTIAL or "\x00" in password:
            raise RuleActionError(
                index, f"password must be a string of at most {MAX_CREDENTIAL} characters."
            )
        result["password"] = password
    topic = action["topic"]
    if not isinstance(topic, str) or not topic.strip():
        raise RuleActionError(index, "topic must be a non-empty template, e.g. 'site/${clientid}'.")
    check_template(index, "topic", topic)
    try:
        validate_topic_name(_PLACEHOLDER.sub("x", topic))
    except MQTTError as exc:
        raise RuleActionError(index, f"topic {topic!r} is not a valid topic: {exc}.") from None
    result["topic"] = topic
    if "qos" in action:
        qos = action["qos"]
        if isinstance(qos, bool) or not isinstance(qos, int) or qos not in QOS_LEVELS:
            raise RuleActionError(index, "qos must be 0, 1 or 2.")
        result["qos"] = qos
    return result
