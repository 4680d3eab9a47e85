"""The functions that read the message itself (`topic()`, `clientid()`, `payload()`, ...,
registered as context functions: they get the row first), and those about topics and missing
values (`null`, `coalesce`, `contains_topic`).
"""

from __future__ import annotations

from common.rules.errors import RuleRuntimeError
from common.rules.functions.registry import _bad, _get_path, _int, _register
from common.rules.topics import topic_match
from common.rules.values import compare_eq, to_str


@_register("topic", context=True)
def _topic(env, n=None):
    topic = env.column("topic")
    if n is None or topic is None:
        return topic
    _int("topic", n)
    levels = topic.split("/")
    if n < 1 or n > len(levels):
        raise _bad("topic", n)
    return levels[n - 1]


@_register("clientid", context=True)
def _clientid(env):
    return env.column("clientid")


@_register("username", context=True)
def _username(env):
    return env.column("username")


@_register("qos", context=True)
def _qos(env):
    return env.column("qos")


@_register("msgid", context=True)
def _msgid(env):
    return env.column("id")


@_register("flags", context=True)
def _flags(env):
    return env.column("flags") or {}


@_register("flag", context=True)
def _flag(env, name):
    return (env.column("flags") or {}).get(to_str(name))


@_register("peerhost", "clientip", context=True)
def _peerhost(env):
    return env.column("peerhost")


@_register("payload", context=True)
def _payload(env, path=None):
    if path is None:
        return env.column("payload")
    try:
        data = env.payload_json()
    except RuleRuntimeError:
        return None
    return _get_path(data, to_str(path))


@_register("null")
def _null():
    return None


@_register("coalesce")
def _coalesce(*values):
    if len(values) == 1 and isinstance(values[0], list):
        values = tuple(values[0])
    for value in values:
        if value is not None:
            return value
    return None


@_register("coalesce_ne")
def _coalesce_ne(*values):
    if len(values) == 1 and isinstance(values[0], list):
        values = tuple(values[0])
    for value in values:
        if value is not None and value != "":
            return value
    return None


@_register("contains_topic")
def _contains_topic(filters, topic, qos=None):
    return _find_filter(filters, topic, lambda t, f: t == f, qos)


@_register("contains_topic_match")
def _contains_topic_match(filters, topic, qos=None):
    return _find_filter(filters, topic, lambda f, t: topic_match(t, f), qos)


def _find_filter(filters, topic, match, qos):
    if not isinstance(filters, list):
        raise _bad("contains_topic", filters, topic)
    for item in filters:
        filt = item.get("topic") if isinstance(item, dict) else item
        if isinstance(filt, str) and isinstance(topic, str) and match(filt, topic):
            if qos is None:
                return True
            return isinstance(item, dict) and compare_eq(item.get("qos"), qos)
    return False
