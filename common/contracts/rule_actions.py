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

FIELDS = {
    "republish": ({"topic"}, {"payload", "qos", "retain"}),
    "webhook": ({"url"}, {"secret"}),
    "dataset": ({"name"}, set()),
}


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
    known_secrets: dict[Any, Any] = {  # stored actions: checked when saved, still JSON
        a.get("url"): a.get("secret")
        for a in previous or []
        if isinstance(a, dict) and a.get("type") == "webhook" and a.get("secret")
    }
    return [_normalize(index, action, known_secrets) for index, action in enumerate(actions)]


def _normalize(index: int, action: Any, known_secrets: dict[Any, Any]) -> dict[str, Any]:
    if not isinstance(action, dict):
        raise RuleActionError(index, "must be an object with a 'type'.")
    kind = action.get("type")
    if kind not in FIELDS:
        raise RuleActionError(
            index, f"unknown type {kind!r}: use 'republish', 'webhook' or 'dataset'."
        )
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
    return _dataset(index, action)


def _republish(index: int, action: dict[str, Any]) -> dict[str, Any]:
    topic = action["topic"]
    if not isinstance(topic, str) or not topic.strip():
        raise RuleActionError(index, "topic must be a non-empty string.")
    _check_template(index, "topic", topic)
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
        _check_template(index, "payload", payload)
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


def _webhook(index: int, action: dict[str, Any], known_secrets: dict[Any, Any]) -> dict[str, Any]:
    url = action["url"]
    if not isinstance(url, str):
        raise RuleActionError(index, "url must be a string.")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RuleActionError(
            index, f"url must be an http:// or https:// URL with a host: {url!r}."
        )
    if parts.username or parts.password:
        raise RuleActionError(index, "url must not carry credentials; the secret signs requests.")
    if any(ch.isspace() for ch in url) or len(url) > 2048:
        raise RuleActionError(index, "url must have no spaces and at most 2048 characters.")
    problem = url_problem(url)
    if problem is not None:
        raise RuleActionError(index, f"url {url!r}: {problem}.")
    secret = action.get("secret")
    if secret is None or secret == "":
        secret = known_secrets.get(url) or secrets.token_urlsafe(WEBHOOK_SECRET_BYTES)
    elif not isinstance(secret, str) or not 16 <= len(secret) <= 256:
        raise RuleActionError(index, "secret must be a string of 16 to 256 characters.")
    return {"type": "webhook", "url": url, "secret": secret}


def _dataset(index: int, action: dict[str, Any]) -> dict[str, Any]:
    name = action["name"]
    if not isinstance(name, str) or not DATASET_NAME.match(name):
        raise RuleActionError(
            index,
            "name must be a slug: 1-64 lowercase letters, digits, '-' or '_', "
            "starting and ending with a letter or digit.",
        )
    return {"type": "dataset", "name": name}


def _check_template(index: int, field: str, template: str) -> None:
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
    """The actions with webhook secrets hidden: for readers who may not sign (viewers, dead
    letters), since a secret lets its holder forge the platform's webhook signatures."""
    return [
        {**a, "secret": REDACTED} if isinstance(a, dict) and "secret" in a else a
        for a in actions or []
    ]
