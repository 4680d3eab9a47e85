"""AWS's shadow semantics, unit by unit (`common.shadow`): every `rejected` case AWS documents,
the merge (null deletes, objects field by field, arrays whole), metadata per field, versions,
the delta and the documents; and who may touch which thing's reserved topics (`common.access.acl`)."""

from __future__ import annotations

import json

import pytest

from common import json_input
from common.access.acl import AclEntry, AclPolicy, explain
from common.shadow import document as doc
from common.shadow.topics import ShadowTopic, parse

NOW = 1_700_000_000


def request(body, operation: str = "update", max_size: int = doc.DEFAULT_MAX_SIZE):
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return doc.parse_request(operation, payload, max_size)


def updated(shadow: doc.Shadow, body: dict, now: int = NOW) -> doc.Outcome:
    return doc.update(shadow, request(body), now)


NUL, SURROGATE, NAN = json_input.NUL, json_input.SURROGATE, json_input.NOT_A_NUMBER
DEEP = {"a": {"b": {"c": {"d": {"e": {"f": {"g": 1}}}}}}}  # 7 levels inside `desired`

# (operation, payload, code, message): each error AWS documents for shadow requests.
REJECTED = [
    ("update", b"{not json", 400, "Invalid JSON"),
    ("update", b"[1, 2]", 400, "Invalid JSON"),
    ("update", b"", 400, "Invalid JSON"),
    ("get", b"{nope", 400, "Invalid JSON"),
    ("update", {"clientToken": "t"}, 400, "Missing required node: state"),
    ("update", {"state": "on"}, 400, "State node must be an object"),
    ("update", {"state": {"desired": 5}}, 400, "Desired node must be an object"),
    ("update", {"state": {"reported": ["a"]}}, 400, "Reported node must be an object"),
    ("update", {"state": {"desired": {}}, "version": "7"}, 400, "Invalid version"),
    ("update", {"state": {"desired": {}}, "version": -1}, 400, "Invalid version"),
    ("update", {"state": {"desired": {}}, "version": True}, 400, "Invalid version"),
    ("update", {"state": {}, "clientToken": "x" * 65}, 400, "Invalid clientToken"),
    ("get", {"clientToken": 12}, 400, "Invalid clientToken"),
    (
        "update",
        {"state": {"desired": DEEP}},
        400,
        "JSON contains too many levels of nesting; maximum is 6",
    ),
    ("update", {"state": {"delta": {"a": 1}}}, 400, "State contains an invalid node"),
    ("update", {"state": {"desired": {"a": [None, 1]}}}, 400, "State contains an invalid node"),
    ("update", {"state": {"desired": {"a": "\u0000"}}}, 400, f"Invalid JSON: {NUL}"),
    ("update", b'{"state": {"desired": {"a": "\\ud800"}}}', 400, f"Invalid JSON: {SURROGATE}"),
    # What Postgres would refuse, and the whole batch of every tenant's requests with it:
    ("update", b'{"state": {"reported": {"t": NaN}}}', 400, f"Invalid JSON: {NAN}"),
    ("update", b'{"state": {"reported": {"t": Infinity}}}', 400, f"Invalid JSON: {NAN}"),
    ("update", b'{"state": {"desired": {"t": [-Infinity]}}}', 400, f"Invalid JSON: {NAN}"),
    ("update", b'{"state": {"desired": {"\\u0000": 1}}}', 400, f"Invalid JSON: {NUL}"),
    ("update", {"state": {}, "clientToken": "a\u0000"}, 400, f"Invalid JSON: {NUL}"),
    ("get", b'{"clientToken": "\\udc00"}', 400, f"Invalid JSON: {SURROGATE}"),
    # Deeper than the parser recurses (it raised RecursionError: a traceback, a disconnect):
    ("update", b"[" * 8000, 400, doc.TOO_DEEP),
    ("update", b'{"state": {"desired": ' + b'{"a":' * 1200 + b"1" + b"}" * 1202, 400, doc.TOO_DEEP),
    ("update", b'{"state": {"desired": {"a": "\xff"}}}', 415, doc.UNSUPPORTED_ENCODING),
    ("update", {"state": {"desired": {"a": "x" * 9000}}}, 413, doc.TOO_LARGE),
]


@pytest.mark.parametrize(("operation", "payload", "code", "message"), REJECTED)
def test_each_documented_rejection(operation, payload, code, message):
    with pytest.raises(doc.ShadowError) as caught:
        request(payload, operation)
    assert (caught.value.code, caught.value.message) == (code, message)
    body = doc.error_document(caught.value, NOW)
    assert body["code"] == code and body["message"] == message and body["timestamp"] == NOW


def test_rejections_that_need_the_shadow():
    """409 (a stale version), 404 (no such shadow; a delete of none), 413 (the state would
    outgrow the limit), each echoing the client token."""
    first = updated(doc.Shadow(), {"state": {"desired": {"a": 1}}}).after
    with pytest.raises(doc.ShadowError) as stale:
        updated(first, {"state": {"desired": {"a": 2}}, "version": 0, "clientToken": "c1"})
    assert doc.error_document(stale.value, NOW) == {
        "code": 409,
        "message": "Version conflict",
        "timestamp": NOW,
        "clientToken": "c1",
    }
    with pytest.raises(doc.ShadowError) as none:
        doc.delete(doc.Shadow(), request({"clientToken": "c2"}, "delete"), "lamp", "", NOW)
    assert (none.value.code, none.value.message) == (404, "No shadow exists with name: 'lamp'")
    with pytest.raises(doc.ShadowError) as named:
        doc.delete(doc.Shadow(), request(b"", "delete"), "lamp", "config", NOW)
    assert named.value.message == "No shadow exists with name: 'config'"
    growing = doc.Shadow()
    for key in range(2):  # each request is small; together they outgrow 2 KiB
        growing = doc.update(
            growing, request({"state": {"reported": {f"k{key}": "v" * 800}}}), NOW, 2048
        ).after
    with pytest.raises(doc.ShadowError) as large:
        doc.update(growing, request({"state": {"reported": {"k9": "v" * 800}}}), NOW, 2048)
    assert (large.value.code, large.value.message) == (413, doc.TOO_LARGE)
    assert doc.thing_not_found("t").message == "Thing not found"
    assert doc.too_many_requests().code == 429 and doc.internal_failure().code == 500


def test_update_merges_deletes_with_null_and_stamps_each_field():
    one = updated(
        doc.Shadow(),
        {"state": {"desired": {"color": "red", "led": {"r": 1, "g": 2}, "list": [1, 2]}}},
    )
    assert one.after.version == 1 and one.after.present
    assert one.accepted == {
        "state": {"desired": {"color": "red", "led": {"r": 1, "g": 2}, "list": [1, 2]}},
        "metadata": {
            "desired": {
                "color": {"timestamp": NOW},
                "led": {"r": {"timestamp": NOW}, "g": {"timestamp": NOW}},
                "list": {"timestamp": NOW},
            }
        },
        "version": 1,
        "timestamp": NOW,
    }
    two = updated(
        one.after,
        {"state": {"desired": {"led": {"g": None, "b": 3}, "list": [9], "color": None}}},
        NOW + 5,
    )
    assert two.after.state == {"desired": {"led": {"r": 1, "b": 3}, "list": [9]}}
    assert two.after.metadata == {
        "desired": {
            "led": {"r": {"timestamp": NOW}, "b": {"timestamp": NOW + 5}},
            "list": {"timestamp": NOW + 5},
        }
    }
    three = updated(two.after, {"state": {"desired": None, "reported": {"on": True}}})
    assert three.after.state == {"reported": {"on": True}}  # a section set to null goes
    cleared = updated(three.after, {"state": None})
    assert cleared.after.state == {} and cleared.after.present and cleared.after.version == 4


def test_delta_is_what_desired_wants_that_reported_does_not_say():
    shadow = updated(
        doc.Shadow(),
        {
            "state": {
                "desired": {"color": "red", "led": {"r": 1, "g": 2}, "mode": "eco"},
                "reported": {"color": "green", "led": {"r": 1, "g": 0}, "extra": 1, "mode": "eco"},
            },
            "clientToken": "tok",
        },
    )
    assert shadow.delta == {
        "version": 1,
        "timestamp": NOW,
        "state": {"color": "red", "led": {"g": 2}},
        "metadata": {"color": {"timestamp": NOW}, "led": {"g": {"timestamp": NOW}}},
        "clientToken": "tok",
    }
    synced = updated(shadow.after, {"state": {"reported": {"color": "red", "led": {"g": 2}}}})
    assert synced.delta is None  # in step again: no delta message
    got = doc.get_document(shadow.after, NOW, "g1")
    assert got["state"]["delta"] == {"color": "red", "led": {"g": 2}}
    assert got["clientToken"] == "g1" and got["version"] == 1


def test_documents_carry_previous_and_current_and_deletion_keeps_the_version():
    first = updated(doc.Shadow(), {"state": {"reported": {"t": 20}}})
    assert first.documents["previous"] is None
    second = updated(first.after, {"state": {"reported": {"t": 21}}})
    assert second.documents["previous"]["version"] == 1
    assert second.documents["current"]["state"] == {"reported": {"t": 21}}
    deleted = doc.delete(second.after, request(b"", "delete"), "lamp", "", NOW)
    assert deleted.version == 2 and not deleted.present
    assert doc.delete_document(2, NOW, "d") == {"version": 2, "timestamp": NOW, "clientToken": "d"}
    again = updated(deleted, {"state": {"reported": {"t": 5}}})
    assert again.after.version == 3 and again.documents["previous"] is None
    assert again.after.state == {"reported": {"t": 5}}
    with pytest.raises(doc.ShadowError):  # the version check counts the deleted one's version
        updated(deleted, {"state": {"reported": {}}, "version": 0})


def test_a_field_named_timestamp_is_state_not_metadata():
    one = updated(doc.Shadow(), {"state": {"reported": {"s": {"timestamp": 5}}}})
    two = updated(one.after, {"state": {"reported": {"s": {"x": 1}}}}, NOW + 1)
    assert two.after.state == {"reported": {"s": {"timestamp": 5, "x": 1}}}
    assert two.after.metadata["reported"]["s"] == {
        "timestamp": {"timestamp": NOW},
        "x": {"timestamp": NOW + 1},
    }


@pytest.mark.parametrize(
    ("topic", "parsed"),
    [
        ("$aws/things/lamp/shadow/get", ShadowTopic("lamp", "", "get")),
        ("$aws/things/lamp/shadow/update/delta", ShadowTopic("lamp", "", "update", "delta")),
        ("$aws/things/lamp/shadow/name/cfg/delete", ShadowTopic("lamp", "cfg", "delete")),
        (
            "$aws/things/lamp/shadow/name/cfg/get/accepted",
            ShadowTopic("lamp", "cfg", "get", "accepted"),
        ),
        ("$aws/things/lamp/shadow/get/delta", None),  # get has no delta
        ("$aws/things/lamp/shadow/name/a b/get", None),  # not a shadow name
        ("$aws/things/lamp/shadow/list", None),
        ("$aws/things/lamp/jobs/get", None),
        ("aws/things/lamp/shadow/get", None),
    ],
)
def test_topics(topic, parsed):
    assert parse(topic) == parsed


def test_a_things_reserved_topics_are_its_own_unless_a_rule_grants_more():
    def policy(*entries, default_allow=True):
        return AclPolicy(list(entries), tenant="t", device="lamp", default_allow=default_allow)

    for default_allow in (True, False):  # the tenant's default does not decide these
        mine = policy(AclEntry("both", True, "#"), default_allow=default_allow)
        assert mine.can_publish("$aws/things/lamp/shadow/update")
        assert mine.can_subscribe("$aws/things/lamp/shadow/get/+")
        assert mine.can_receive("$aws/things/lamp/shadow/update/delta")
        # `#` (a leading wildcard) never names `$aws`: no other thing's shadow through it
        assert not mine.can_publish("$aws/things/door/shadow/update")
        assert not mine.can_subscribe("$aws/things/+/shadow/update/delta")
        assert not mine.can_subscribe("$aws/#")
        assert not mine.can_receive("$aws/things/door/shadow/update/delta")
    granted = policy(AclEntry("both", True, "$aws/things/door/shadow/#"))
    assert granted.can_publish("$aws/things/door/shadow/update")
    assert granted.can_subscribe("$aws/things/+/shadow/update/delta")
    assert granted.filters_reads  # a wildcard thing then carries only what is granted
    assert granted.can_receive("$aws/things/door/shadow/update/delta")
    assert not granted.can_receive("$aws/things/gate/shadow/update/delta")
    denied = policy(AclEntry("publish", False, "$aws/things/${client}/shadow/delete"))
    assert not denied.can_publish("$aws/things/lamp/shadow/delete")
    assert denied.can_publish("$aws/things/lamp/shadow/update")
    verdict = explain(
        [],
        tenant="t",
        device="lamp",
        default_allow=False,
        action="publish",
        topic="$aws/things/lamp/shadow/update",
    )
    assert verdict.allowed and verdict.rule is None


def test_brackets_inside_strings_are_no_nesting():
    """The depth is counted before parsing (the parser recurses): brackets and escaped quotes
    inside strings are text, not levels."""
    text = '[{"\\"' * 20 + "}"
    body = {"state": {"desired": {"a": text, "b": "[" * 50}}, "clientToken": "{[{["}
    parsed = request(body)
    assert parsed.state["desired"]["a"] == text and parsed.client_token == "{[{["
    assert json_input.loads(b'{"a": "\\\\", "b": [[["]"]]]}') == {"a": "\\", "b": [[["]"]]]}
