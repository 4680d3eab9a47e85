"""The dialect, case by case: (SQL, message, expected outputs or no match), in the manner of
EMQX's rule engine documentation and its test suites (emqx_rule_engine_SUITE t_sqlparse_*,
t_sqlselect_*). Pure Python, no services."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from common.rules import RuleRuntimeError, compile_rule, dry_run

NO_MATCH = None
FAILS = "the message fails"  # evaluation raises, as EMQX's does (counted failed)
RULE_ID = "dialect-rule"
TS = 1_700_000_000_123  # 2023-11-14T22:13:20.123Z


def row(payload="", topic="t/a", **extra):
    if not isinstance(payload, (str, bytes)):
        payload = json.dumps(payload)
    if isinstance(payload, str):
        payload = payload.encode()
    base = {
        "event": "message.publish",
        "tenant": "acme",
        "ts": TS,
        "client_id": "c1",
        "username": "acme/dev1",
        "topic": topic,
        "qos": 1,
        "retain": False,
        "payload": payload,
        "user_properties": [],
        "peer": "10.0.0.7:51234",
    }
    base.update(extra)
    return base


def outputs(sql, message):
    result = compile_rule(sql).apply(message, rule_id=RULE_ID)
    if result.error is not None:
        return FAILS
    return result.outputs if result.matched else NO_MATCH


def event(name, **columns):
    """A lifecycle event row as the broker archives it."""
    return {"event": name, "tenant": "acme", "ts": TS, "client_id": "c9", **columns}


# What EMQX 5 does that an independent run of its own rule-engine assertions (emqx_rule_engine
# SUITE, emqx_rule_funcs SUITE) found the dialect doing differently (issue 31). The dry run
# (`test_emqx5_cases_through_the_dry_run`) and the Spark plan (tests/spark/test_native.py) run
# them too.
EMQX5_CASES = [
    # A path selected without AS reads the output so far, then the message when the whole path
    # is missing there (emqx_rule_runtime: eval(Field, [Action, Columns])).
    (
        'SELECT payload.a, payload.b FROM "t/#"',
        row({"a": 1, "b": 2}),
        [{"payload": {"a": 1, "b": 2}}],
    ),
    (
        'SELECT payload.a, payload.b.c, payload.d FROM "t/#"',
        row({"a": 1, "b": {"c": 2, "x": 0}, "d": [3]}),
        [{"payload": {"a": 1, "b": {"c": 2}, "d": [3]}}],
    ),
    (
        'SELECT payload.a, upper(payload.s) AS u, payload.s FROM "t/#"',
        row({"a": 1, "s": "x"}),
        [{"payload": {"a": 1, "s": "x"}, "u": "X"}],
    ),
    (
        'SELECT payload.a, payload.b + 1 AS n FROM "t/#"',
        row({"a": 1, "b": 2}),
        [{"payload": {"a": 1}, "n": 3}],
    ),
    (
        'FOREACH payload.xs AS x DO payload.a, payload.b, x AS v FROM "t/#"',
        row({"xs": [7], "a": 1, "b": 2}),
        [{"payload": {"a": 1, "b": 2}, "v": 7}],
    ),
    # ... while WHERE reads the message merged with the output (maps:merge(Columns, Selected)):
    # the selected payload hides the message's
    ('SELECT payload.a FROM "t/#" WHERE payload.b = 2', row({"a": 1, "b": 2}), NO_MATCH),
    (
        'SELECT payload.a FROM "t/#" WHERE payload.a = 1',
        row({"a": 1, "b": 2}),
        [{"payload": {"a": 1}}],
    ),
    # EMQX 5's event topic names, beside the older ones
    (
        'SELECT clientid, event FROM "$events/client/connected"',
        event("client.connected", peer="1.2.3.4:5"),
        [{"clientid": "c9", "event": "client.connected"}],
    ),
    (
        'SELECT clientid, reason FROM "$events/client/disconnected"',
        event("client.disconnected", reason="keepalive_timeout"),
        [{"clientid": "c9", "reason": "keepalive_timeout"}],
    ),
    (
        'SELECT topic, qos FROM "$events/session/subscribed"',
        event("session.subscribed", topic="t/x", qos=1),
        [{"topic": "t/x", "qos": 1}],
    ),
    (
        'SELECT topic FROM "$events/session/unsubscribed"',
        event("session.unsubscribed", topic="t/x"),
        [{"topic": "t/x"}],
    ),
    ('SELECT clientid FROM "$events/client/connected"', event("client.disconnected"), NO_MATCH),
    # An `$events/…` source the platform has no rows for is no match, not an error
    ('SELECT clientid FROM "$events/message_delivered"', row("x"), NO_MATCH),
    ('SELECT clientid FROM "$events/message/delivered"', event("client.connected"), NO_MATCH),
    (
        'SELECT clientid FROM "t/#", "$events/message_dropped"',
        row("x"),
        [{"clientid": "c1"}],
    ),
    # clientip() and peerhost() are the peer's host
    (
        'SELECT clientip() AS ip, peerhost() AS h FROM "t/#"',
        row("x", peer="[2001:db8::1]:8883"),
        [{"ip": "2001:db8::1", "h": "2001:db8::1"}],
    ),
    # map_get's key is a dotted path of a string; anything else fails the message (EMQX's
    # t_failed_rule_metrics: `select map_get(1, 1)` counts failed.exception)
    ('SELECT map_get(1, 1) AS v FROM "t/#"', row("x"), FAILS),
    ('SELECT map_get(payload.k, payload) AS v FROM "t/#"', row({"a": 1}), FAILS),
    ("SELECT map_get('a', 1, 'd') AS v FROM \"t/#\"", row("x"), [{"v": "d"}]),
    ("SELECT map_get('a.b', payload) AS v FROM \"t/#\"", row({"a": {"b": 5}}), [{"v": 5}]),
    # subbits(…, 'bits') keeps the bit string; bin2hexstr pads it at the front, as EMQX's
    # t_subbits_not_even_bytes does (9F4E58: the first 6 bits 100111 are 0x27)
    (
        "SELECT bin2hexstr(subbits(hexstr2bin('9F4E58'), 1, 6, 'bits', 'unsigned', 'big')) AS h,"
        " bitsize(subbits(hexstr2bin('9F4E58'), 1, 6, 'bits')) AS n FROM \"t/#\"",
        row("x"),
        [{"h": "27", "n": 6}],
    ),
    (
        "SELECT bin2hexstr(subbits(hexstr2bin('9F4E58'), 1, 4, 'bits')) AS a,"
        " bin2hexstr(subbits(hexstr2bin('9F4E58'), 1, 12, 'bits')) AS b,"
        " bin2hexstr(subbits(hexstr2bin('9F4E58'), 5, 16, 'bits')) AS c,"
        " subbits(subbits(hexstr2bin('9F4E58'), 1, 6, 'bits'), 3, 4) AS d FROM \"t/#\"",
        row("x"),
        [{"a": "9", "b": "9F4", "c": "F4E5", "d": 7}],
    ),
    # metadata.rule_id: the rule's id (its name; the dry run's is sql_tester:…, as EMQX's)
    ('SELECT metadata.rule_id AS id FROM "t/#"', row("x"), [{"id": RULE_ID}]),
    ('SELECT metadata.rule_id FROM "t/#"', row("x"), [{"metadata": {"rule_id": RULE_ID}}]),
    (
        f"SELECT clientid FROM \"$events/client/connected\" WHERE metadata.rule_id = '{RULE_ID}'",
        event("client.connected"),
        [{"clientid": "c9"}],
    ),
]


CASES = [
    # -- SELECT, FROM, WHERE -------------------------------------------------------------------
    ('SELECT payload.temp AS t FROM "s/+/temp"', row({"temp": 21}, "s/1/temp"), [{"t": 21}]),
    ('SELECT payload.temp AS t FROM "s/+/temp"', row({"temp": 21}, "s/1/hum"), NO_MATCH),
    (
        'SELECT clientid FROM "s/#" WHERE payload.temp > 30',
        row({"temp": 31}, "s/a/b"),
        [{"clientid": "c1"}],
    ),
    ('SELECT clientid FROM "s/#" WHERE payload.temp > 30', row({"temp": 30}, "s/a/b"), NO_MATCH),
    ('SELECT clientid FROM "a", "b/#"', row("x", "b/c"), [{"clientid": "c1"}]),
    ("SELECT clientid FROM 't/#'", row("x"), [{"clientid": "c1"}]),
    ('select clientid from "t/#" where qos = 1', row("x"), [{"clientid": "c1"}]),
    ('SELECT "topic" FROM "t/#"', row("x"), [{"topic": "t/a"}]),
    (
        'SELECT topic AS tp, qos, username FROM "t/#"',
        row("x"),
        [{"tp": "t/a", "qos": 1, "username": "acme/dev1"}],
    ),
    ('SELECT payload FROM "t/#"', row("abc"), [{"payload": "abc"}]),
    ('SELECT payload FROM "t/#"', row('{"a": 1}'), [{"payload": '{"a": 1}'}]),
    (
        'SELECT timestamp, publish_received_at FROM "t/#"',
        row("x"),
        [{"timestamp": TS, "publish_received_at": TS}],
    ),
    (
        'SELECT timestamp FROM "t/#"',
        row("x", ts=datetime.fromtimestamp(TS / 1000, UTC)),
        [{"timestamp": TS}],
    ),
    (
        'SELECT flags.retain AS r, retain FROM "t/#"',
        row("x", retain=True),
        [{"r": True, "retain": True}],
    ),
    ('SELECT peerhost FROM "t/#"', row("x"), [{"peerhost": "10.0.0.7"}]),
    (
        "SELECT pub_props.'User-Property'.k AS k, user_properties.k AS k2 FROM \"t/#\"",
        row("x", user_properties=[{"key": "k", "value": "v"}]),
        [{"k": "v", "k2": "v"}],
    ),
    (
        'SELECT user_properties FROM "t/#"',
        row("x", user_properties=[("a", "1"), ("b", "2")]),
        [{"user_properties": {"a": "1", "b": "2"}}],
    ),
    ('SELECT topic(1) AS a, topic(3) AS c FROM "x/#"', row("x", "x/y/z"), [{"a": "x", "c": "z"}]),
    (
        'SELECT topic() AS t, clientid() AS c, qos() AS q FROM "t/#"',
        row("x"),
        [{"t": "t/a", "c": "c1", "q": 1}],
    ),
    ('SELECT * FROM "t/#" WHERE payload.x = 1', row({"x": 2}), NO_MATCH),
    (
        '-- a comment\nSELECT clientid -- the device\nFROM "t/#" -- any\n',
        row("x"),
        [{"clientid": "c1"}],
    ),
    ('SELECT clientid FROM "t/#";', row("x"), [{"clientid": "c1"}]),
    ("SELECT 'abc' FROM \"t/#\"", row("x"), [{"abc": "abc"}]),
    ('SELECT 1 + 2 AS n FROM "t/#"', row("x"), [{"n": 3}]),
    # -- comparison semantics ------------------------------------------------------------------
    ("SELECT 1 AS ok FROM \"t/#\" WHERE '2' = 2", row("x"), [{"ok": 1}]),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE payload.n = '2'", row({"n": 2}), [{"ok": 1}]),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE payload.n = '2.5'", row({"n": 2.5}), [{"ok": 1}]),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE payload.n > '10'", row({"n": 9}), NO_MATCH),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.n = 1.0', row({"n": 1}), [{"ok": 1}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.missing = 1', row({"n": 1}), NO_MATCH),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.missing != 1', row({"n": 1}), NO_MATCH),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.missing < 1', row({"n": 1}), NO_MATCH),
    ('SELECT 1 AS ok FROM "t/#" WHERE a = b', row({}), [{"ok": 1}]),
    ('SELECT a < b AS c FROM "t/#"', row({"b": 1}), [{"c": False}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.flag = true', row({"flag": True}), [{"ok": 1}]),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE payload.flag = 'true'", row({"flag": True}), [{"ok": 1}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.flag = 1', row({"flag": True}), NO_MATCH),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE payload.s > 'abc'", row({"s": "abd"}), [{"ok": 1}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.x <> 2', row({"x": 3}), [{"ok": 1}]),
    (
        'SELECT 1 AS ok FROM "t/#" WHERE payload.x >= 3 AND payload.x <= 3',
        row({"x": 3}),
        [{"ok": 1}],
    ),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.x = 1 OR payload.y = 2', row({"y": 2}), [{"ok": 1}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE NOT payload.x = 1', row({"x": 2}), [{"ok": 1}]),
    (
        'SELECT 1 AS ok FROM "t/#" WHERE NOT (payload.x = 1 OR payload.x = 2)',
        row({"x": 2}),
        NO_MATCH,
    ),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE topic =~ 't/+'", row("x"), [{"ok": 1}]),
    ("SELECT 1 AS ok FROM \"#\" WHERE topic =~ 'sensors/#'", row("x", "sensors/a/b"), [{"ok": 1}]),
    ("SELECT 1 AS ok FROM \"#\" WHERE topic =~ 'sensors/+'", row("x", "sensors/a/b"), NO_MATCH),
    (
        "SELECT 1 AS ok FROM \"t/#\" WHERE payload.c IN ('red', 'blue')",
        row({"c": "blue"}),
        [{"ok": 1}],
    ),
    (
        "SELECT 1 AS ok FROM \"t/#\" WHERE payload.c NOT IN ('red', 'blue')",
        row({"c": "blue"}),
        NO_MATCH,
    ),
    (
        "SELECT 1 AS ok FROM \"t/#\" WHERE payload.c NOT IN ('red', 'blue')",
        row({"c": "g"}),
        [{"ok": 1}],
    ),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.n IN (1, 2, 3)', row({"n": 2}), [{"ok": 1}]),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE clientid IN ('c1')", row("x"), [{"ok": 1}]),
    # JSON null is EMQX's atom null, not a missing value
    (
        'SELECT is_null(payload.x) AS a, is_null_var(payload.x) AS b FROM "t/#"',
        row('{"x": null}'),
        [{"a": False, "b": True}],
    ),
    (
        'SELECT is_null(payload.y) AS a, is_null_var(payload.y) AS b FROM "t/#"',
        row('{"x": null}'),
        [{"a": True, "b": True}],
    ),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.x != 1', row('{"x": null}'), [{"ok": 1}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.x = 1', row('{"x": null}'), NO_MATCH),
    ("SELECT 1 AS ok FROM \"t/#\" WHERE payload.x = 'null'", row('{"x": null}'), [{"ok": 1}]),
    (
        'SELECT payload.x AS x, str(payload.x) AS s, payload FROM "t/#"',
        row('{"x": null}'),
        [{"x": None, "s": "null", "payload": '{"x": null}'}],
    ),
    ('SELECT payload.a AS a FROM "t/#"', row('{"a": {"b": null}}'), [{"a": {"b": None}}]),
    ("SELECT coalesce(payload.x, 'd') AS c FROM \"t/#\"", row('{"x": null}'), [{"c": None}]),
    (
        'SELECT is_null(payload.l[1]) AS a, payload.l AS l FROM "t/#"',
        row('{"l": [null, 1]}'),
        [{"a": False, "l": [None, 1]}],
    ),
    (
        'FOREACH payload.l AS i DO i AS v INCASE is_not_null(i) FROM "t/#"',
        row('{"l": [null, 1]}'),
        [{"v": None}, {"v": 1}],
    ),
    (
        'FOREACH payload.l AS i DO i AS v INCASE is_not_null_var(i) FROM "t/#"',
        row('{"l": [null, [null], 1]}'),
        [{"v": [None]}, {"v": 1}],
    ),
    # -- arithmetic ----------------------------------------------------------------------------
    ('SELECT payload.a + payload.b AS s FROM "t/#"', row({"a": 1, "b": 2.5}), [{"s": 3.5}]),
    ("SELECT 'a' + 1 AS s, 1 + 'b' AS t FROM \"t/#\"", row("x"), [{"s": "a1", "t": "1b"}]),
    (
        'SELECT 7 / 2 AS q, 7 div 2 AS d, 7 mod 2 AS m, -7 div 2 AS nd, -7 mod 2 AS nm FROM "t/#"',
        row("x"),
        [{"q": 3.5, "d": 3, "m": 1, "nd": -3, "nm": -1}],
    ),
    (
        'SELECT 2 * 3 - 1 AS a, 2 * (3 - 1) AS b, -payload.x AS c FROM "t/#"',
        row({"x": 4}),
        [{"a": 5, "b": 4, "c": -4}],
    ),
    ('SELECT payload.t * 1.8 + 32 AS f FROM "t/#"', row({"t": 100}), [{"f": 212.0}]),
    (
        'SELECT payload.x mod 4 AS m, mod(payload.x, 4) AS f FROM "t/#"',
        row({"x": 7}),
        [{"m": 3, "f": 3}],
    ),
    (
        'SELECT 2 mod 2 AS mod1, mod(3, 2) AS mod2, 4 div 2 AS div1, div(7, 2) AS div2 FROM "t/#"',
        row({"what": 4}),
        [{"mod1": 0, "mod2": 1, "div1": 2, "div2": 3}],
    ),
    (
        'SELECT 1-1 AS a, -1 + 1 AS b, 1 + 1 AS c, +1 AS d FROM "t/#"',
        row("x"),
        [{"a": 0, "b": 0, "c": 2, "d": 1}],
    ),
    (
        "SELECT payload.cmd AS cmd, cmd.info AS meta.info FROM \"t/#\" WHERE cmd.info = 'tt' AND meta.info = 'tt'",
        row({"cmd": {"info": "tt"}}),
        [{"cmd": {"info": "tt"}, "meta": {"info": "tt"}}],
    ),
    (
        'SELECT payload.model AS model FROM "t/#" WHERE payload.x div 2 = 3',
        row({"x": 7, "model": 1}),
        [{"model": 1}],
    ),
    ('SELECT 1 AS ok FROM "t/#" WHERE is_null(payload.x)', row({}), [{"ok": 1}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE NOT is_null(payload.x)', row({}), NO_MATCH),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.on', row({"on": True}), [{"ok": 1}]),
    ('SELECT 1 AS ok FROM "t/#" WHERE payload.on', row({"on": "yes"}), NO_MATCH),
    # -- AS targets ----------------------------------------------------------------------------
    ('SELECT payload.x y, clientid c FROM "t/#"', row({"x": 7}), [{"y": 7, "c": "c1"}]),
    ('SELECT CASE WHEN payload.x > 1 THEN 1 END z FROM "t/#"', row({"x": 7}), [{"z": 1}]),
    ('SELECT payload.x AS a$b FROM "t/#"', row({"x": 7}), [{"a$b": 7}]),
    ("SELECT payload.'end' AS e FROM \"t/#\"", row({"end": 2}), [{"e": 2}]),
    ('SELECT payload.x AS a.b FROM "t/#"', row({"x": 1}), [{"a": {"b": 1}}]),
    ('SELECT 1 AS c[-0], 2 AS c[-0], 0 AS c[0] FROM "t/#"', row("x"), [{"c": [0, 1, 2]}]),
    (
        'SELECT payload.x AS b, 1 AS c[-0], 2 AS c[-0], b AS c[0] FROM "t/#"',
        row({"x": 0}),
        [{"b": 0, "c": [0, 1, 2]}],
    ),
    ('SELECT [] AS c, 1 AS c[-0] FROM "t/#"', row("x"), [{"c": [1]}]),
    (
        'SELECT [payload.a, "topic", \'c\'] AS c, 1 AS c[-0], 0 AS c[0] FROM "t/#"',
        row({"a": 11}),
        [{"c": [0, 11, "t/a", "c", 1]}],
    ),
    (
        'SELECT true AS a, false AS b, false AS x.y, true AS c[-0] FROM "t/#"',
        row("x"),
        [{"a": True, "b": False, "x": {"y": False}, "c": [True]}],
    ),
    (
        'SELECT map_new() AS a, map_new() AS x.y, map_new() AS c[-0] FROM "t/#"',
        row("x"),
        [{"a": {}, "x": {"y": {}}, "c": [{}]}],
    ),
    (
        "SELECT payload, 'STEVE' AS payload.data[1].name FROM \"t/#\"",
        row({"f1": "f1", "data": [{"name": "n1", "idx": 1}, {"name": "n2", "idx": 2}]}),
        [
            {
                "payload": {
                    "f1": "f1",
                    "data": [{"name": "STEVE", "idx": 1}, {"name": "n2", "idx": 2}],
                }
            }
        ],
    ),
    (
        "SELECT payload, map_get('engineWorkTime', payload.params, -1) AS payload.params.engineWorkTime FROM \"t/#\"",
        row({"msgId": 1002, "params": {"convertTemp": 20}}),
        [{"payload": {"msgId": 1002, "params": {"convertTemp": 20, "engineWorkTime": -1}}}],
    ),
    ('SELECT payload.x AS y, y + 1 AS z FROM "t/#"', row({"x": 1}), [{"y": 1, "z": 2}]),
    (
        'SELECT payload AS p, p.a.b AS c FROM "t/#"',
        row({"a": {"b": 0}}),
        [{"p": '{"a": {"b": 0}}', "c": 0}],
    ),
    ('SELECT payload.x AS y FROM "t/#" WHERE y > 1', row({"x": 2}), [{"y": 2}]),
    ('SELECT payload.x AS y FROM "t/#" WHERE y > 1', row({"x": 1}), NO_MATCH),
    ('SELECT payload.a.b FROM "t/#"', row({"a": {"b": 5, "c": 6}}), [{"payload": {"a": {"b": 5}}}]),
    (
        'SELECT 0 AS payload.x[2].y FROM "t/#"',
        row({"x": [1, {"y": [1, 2]}, 3]}),
        [{"payload": {"x": [{"y": 0}]}}],
    ),
    (
        'SELECT payload, payload.x[2].y FROM "t/#"',
        row({"x": [1, {"y": [1, 2]}, 3]}),
        [{"payload": {"x": [1, {"y": [1, 2]}, 3]}}],
    ),
    (
        'SELECT payload.x, 0 AS payload.x[2].y FROM "t/#"',
        row({"x": [1, {"y": [1, 2]}, 3]}),
        [{"payload": {"x": [1, {"y": 0}, 3]}}],
    ),
    # -- paths, indexes, ranges ----------------------------------------------------------------
    ('SELECT payload.x[2].y AS b FROM "t/#"', row({"x": [1, {"y": 3}, 4]}), [{"b": 3}]),
    ('SELECT payload.x[-2].y AS b FROM "t/#"', row({"x": [1, {"y": 3}, 4]}), [{"b": 3}]),
    (
        'SELECT payload.x[-1] AS b, payload.x[1] AS a FROM "t/#"',
        row({"x": [1, 2, 3]}),
        [{"b": 3, "a": 1}],
    ),
    ('SELECT payload.x[9] AS b FROM "t/#"', row({"x": [1, 2, 3]}), [{"b": None}]),
    ('SELECT payload.x[2] FROM "t/#"', row({"x": [1, 3, 4]}), [{"payload": {"x": [3]}}]),
    (
        'SELECT payload.x[2].y AS b.c FROM "t/#"',
        row({"x": [1, {"y": [1, 2]}, 3]}),
        [{"b": {"c": [1, 2]}}],
    ),
    (
        'SELECT payload.a[1..4] AS c FROM "t/#"',
        row({"a": [0, 1, 2, 3, 4, 5]}),
        [{"c": [0, 1, 2, 3]}],
    ),
    ('SELECT payload.a[2..-1] AS c FROM "t/#"', row({"a": [0, 1, 2, 3]}), [{"c": [1, 2, 3]}]),
    (
        'SELECT payload.a[1..4] FROM "t/#"',
        row({"a": [0, 1, 2, 3, 4, 5]}),
        [{"payload": {"a": [0, 1, 2, 3]}}],
    ),
    ('SELECT [1..4] AS c, 5 AS c[-0], 0 AS c[0] FROM "t/#"', row("x"), [{"c": [0, 1, 2, 3, 4, 5]}]),
    (
        'SELECT json_decode(payload) AS p, p[1] AS a FROM "t/#"',
        row([{"x": 1}]),
        [{"p": [{"x": 1}], "a": {"x": 1}}],
    ),
    (
        'SELECT [21 + 21, abs(-abs(-2)), [1 + 1], 4] AS l FROM "t/#"',
        row("x"),
        [{"l": [42, 2, [2], 4]}],
    ),
    ('SELECT payload.a.b.c AS v FROM "t/#"', row({"a": {"b": "x"}}), [{"v": None}]),
    ('SELECT payload."odd key" AS v FROM "t/#"', row({"odd key": 1}), [{"v": 1}]),
    ('SELECT payload.d.e AS v FROM "t/#"', row({"d": '{"e": 7}'}), [{"v": 7}]),
    # -- CASE ----------------------------------------------------------------------------------
    *[
        (
            'SELECT CASE WHEN payload.x < 0 THEN 0 WHEN payload.x > 7 THEN 7 ELSE payload.x END AS y FROM "t/#"',
            row({"x": x}),
            [{"y": y}],
        )
        for x, y in [(1, 1), (0, 0), (-1, 0), (7, 7), (8, 7)]
    ],
    *[
        (
            'SELECT CASE payload.x WHEN 1 THEN 2 WHEN 2 THEN 3 ELSE 4 END AS y FROM "t/#"',
            row({"x": x}),
            [{"y": y}],
        )
        for x, y in [(1, 2), (2, 3), (4, 4), (7, 4)]
    ],
    ('SELECT CASE WHEN payload.x < 0 THEN 0 END AS y FROM "t/#"', row({"x": 5}), [{"y": None}]),
    (
        "SELECT CASE clientid WHEN 'c1' THEN 'first' ELSE 'other' END AS who FROM \"t/#\"",
        row("x"),
        [{"who": "first"}],
    ),
    # -- FOREACH -------------------------------------------------------------------------------
    ('FOREACH payload.sensors AS s FROM "t/#"', row({"sensors": [1, 2]}), "S_ITEMS_12"),
    (
        'FOREACH payload.sensors AS s DO s.cmd AS msg_type FROM "t/#"',
        row({"sensors": [{"cmd": "1"}, {"cmd": "2"}]}),
        [{"msg_type": "1"}, {"msg_type": "2"}],
    ),
    (
        'FOREACH payload.sensors DO item.cmd AS msg_type FROM "t/#"',
        row({"sensors": [{"cmd": "1"}, {"cmd": "2"}]}),
        [{"msg_type": "1"}, {"msg_type": "2"}],
    ),
    (
        'FOREACH payload.sensors DO item AS item FROM "t/#"',
        row({"sensors": [1, 2]}),
        [{"item": 1}, {"item": 2}],
    ),
    (
        'FOREACH payload.sensors AS s DO s.cmd AS c INCASE s.cmd != 1 FROM "t/#"',
        row({"sensors": [{"cmd": 1}, {"cmd": 2}, {"cmd": 3}]}),
        [{"c": 2}, {"c": 3}],
    ),
    (
        'FOREACH payload.sensors AS s DO s.cmd AS msg_type, s.name AS name INCASE is_not_null(s.cmd) FROM "t/#"',
        row({"sensors": [{"cmd": "1", "name": "n1"}, {"cmd": "2"}, {"name": "n3"}]}),
        [{"msg_type": "1", "name": "n1"}, {"msg_type": "2", "name": None}],
    ),
    ('FOREACH payload.sensors AS s DO s.cmd AS m FROM "t/#"', row({"sensors": 1}), []),
    ('FOREACH payload.sensors AS s DO s.cmd AS m FROM "t/#"', row({"sensors": []}), []),
    (
        'FOREACH payload.sensors AS s DO s AS v FROM "t/#" WHERE payload.on = true',
        row({"sensors": [1], "on": False}),
        NO_MATCH,
    ),
    (
        'FOREACH json_decode(payload) DO item.id AS zid, clientid AS c FROM "t/#"',
        row([{"id": 5}, {"id": 15}]),
        [{"zid": 5, "c": "c1"}, {"zid": 15, "c": "c1"}],
    ),
    (
        'FOREACH payload AS p DO p.ts AS ts FROM "t/#"',
        row([{"ts": 1451649600512}]),
        [{"ts": 1451649600512}],
    ),
    (
        "FOREACH json_decode(payload) AS p, p.sensors AS s, s.collection AS c, c.info AS info "
        "DO info.cmd AS msg_type, info.name AS name INCASE is_not_null(info.cmd) FROM \"t/#\" WHERE s.page = '2'",
        row(
            {
                "sensors": {
                    "page": 2,
                    "collection": {"info": [{"name": "cmd1", "cmd": "1"}, {"cmd": "2"}]},
                }
            }
        ),
        [{"msg_type": "1", "name": "cmd1"}, {"msg_type": "2", "name": None}],
    ),
    (
        "FOREACH json_decode(payload) AS p, p.sensors AS s, s.collection AS c, c.info AS info "
        "DO info.cmd AS msg_type FROM \"t/#\" WHERE s.page = '3'",
        row({"sensors": {"page": 2, "collection": {"info": [{"cmd": "1"}]}}}),
        NO_MATCH,
    ),
    (
        "FOREACH json_decode(payload) AS p, p.sensors AS s, s.collection AS c, sublist(2, 1, c.info) AS info "
        'DO info.cmd AS msg_type, info.name AS name FROM "t/#"',
        row({"sensors": {"collection": {"info": ["haha", {"name": "cmd1", "cmd": "1"}]}}}),
        [{"msg_type": "1", "name": "cmd1"}],
    ),
    (
        'FOREACH payload.xs AS x DO x * 2 AS d FROM "t/#"',
        row({"xs": [1, 2, 3]}),
        [{"d": 2}, {"d": 4}, {"d": 6}],
    ),
    # -- lifecycle events ----------------------------------------------------------------------
    (
        'SELECT clientid, reason FROM "$events/client_disconnected"',
        {
            "event": "client.disconnected",
            "tenant": "acme",
            "ts": TS,
            "client_id": "c9",
            "reason": "keepalive_timeout",
        },
        [{"clientid": "c9", "reason": "keepalive_timeout"}],
    ),
    (
        'SELECT clientid FROM "$events/client_connected"',
        {"event": "client.disconnected", "tenant": "acme", "ts": TS, "client_id": "c9"},
        NO_MATCH,
    ),
    (
        'SELECT clientid, proto_ver, keepalive, clean_start, expiry_interval, connected_at, peername FROM "$events/client_connected"',
        {
            "event": "client.connected",
            "tenant": "acme",
            "ts": TS,
            "client_id": "c9",
            "proto_ver": 5,
            "keepalive": 30,
            "clean_start": True,
            "session_expiry": 60,
            "peer": "1.2.3.4:5",
        },
        [
            {
                "clientid": "c9",
                "proto_ver": 5,
                "keepalive": 30,
                "clean_start": True,
                "expiry_interval": 60,
                "connected_at": TS,
                "peername": "1.2.3.4:5",
            }
        ],
    ),
    (
        'SELECT topic AS tp, qos FROM "$events/session_subscribed"',
        {
            "event": "session.subscribed",
            "tenant": "acme",
            "ts": TS,
            "client_id": "c9",
            "topic": "t/tt",
            "qos": 1,
        },
        [{"tp": "t/tt", "qos": 1}],
    ),
    (
        'SELECT clientid, topic AS tp FROM "t/tt", "$events/client_connected"',
        row("x", "t/tt"),
        [{"clientid": "c1", "tp": "t/tt"}],
    ),
    (
        'SELECT event FROM "$events/session_unsubscribed"',
        {
            "event": "session.unsubscribed",
            "tenant": "acme",
            "ts": TS,
            "client_id": "c9",
            "topic": "t/x",
        },
        [{"event": "session.unsubscribed"}],
    ),
    (
        'SELECT event FROM "$events/client_connected"',
        row("x", "$events/client_connected"),
        NO_MATCH,
    ),
    *EMQX5_CASES,
]


@pytest.mark.parametrize(
    "sql, message, expected", CASES, ids=[f"{i}:{c[0][:60]}" for i, c in enumerate(CASES)]
)
def test_dialect_case(sql, message, expected):
    got = outputs(sql, message)
    if expected == "S_ITEMS_12":  # FOREACH without DO: every column plus the item
        assert [o["s"] for o in got] == [1, 2]
        assert all(o["clientid"] == "c1" and o["topic"] == "t/a" for o in got)
        return
    assert got == expected


def dry_run_context(message: dict) -> dict:
    """The dry run's context (POST /api/v1/rules/test) describing an archive row."""
    names = {"client_id": "clientid", "peer": "peername", "session_expiry": "expiry_interval"}
    context = {names.get(k, k): v for k, v in message.items() if k not in ("tenant", "ts")}
    context["timestamp"] = TS
    if isinstance(context.get("payload"), bytes):
        context["payload"] = context["payload"].decode()
    return context


@pytest.mark.parametrize(
    "sql, message, expected", EMQX5_CASES, ids=[c[0][:60] for c in EMQX5_CASES]
)
def test_emqx5_cases_through_the_dry_run(sql, message, expected):
    try:
        answer = dry_run(sql, dry_run_context(message), rule_id=RULE_ID)
    except RuleRuntimeError:
        assert expected is FAILS
        return
    assert answer.get("outputs", NO_MATCH) == expected


def test_select_star_returns_the_message_columns():
    (out,) = outputs('SELECT * FROM "t/#"', row('{"a":1}', retain=True))
    assert out["payload"] == '{"a":1}' and out["topic"] == "t/a" and out["clientid"] == "c1"
    assert out["flags"] == {"retain": True, "dup": False} and out["timestamp"] == TS
    assert out["event"] == "message.publish" and out["qos"] == 1 and len(out["id"]) == 32
    assert out["metadata"] == {"rule_id": RULE_ID}
    json.dumps(out)  # JSON-able


def test_ephemeral_names_for_unaliased_expressions_are_their_text():
    (out,) = outputs('SELECT upper(clientid), 1 + 1 FROM "t/#"', row("x"))
    assert out == {"upper(clientid)": "C1", "1 + 1": 2}


def test_bad_json_payload_is_an_error_not_a_match():
    rule = compile_rule('SELECT payload.a[1..4] AS c FROM "t/#"')
    result = rule.apply(row('{"x":[0,1,2,3,}'))
    assert not result.matched and result.outputs == []
    assert "payload is not valid JSON" in result.error


def test_range_of_a_non_list_is_an_error():
    result = compile_rule('SELECT payload.a[1..4] AS c FROM "t/#"').apply(row({"x": [1]}))
    assert result.error and "array" in result.error


def test_foreach_with_bad_json_is_an_error():
    result = compile_rule('FOREACH payload.sensors DO item.cmd AS t FROM "t/#"').apply(
        row('{"sensors": [{"cmd":"1"} {"cmd":}]}')
    )
    assert result.error and not result.matched


def test_number_against_non_numeric_string_fails_as_in_emqx():
    result = compile_rule("SELECT 1 AS ok FROM \"t/#\" WHERE payload.n = 'abc'").apply(
        row({"n": 1})
    )
    assert result.error and "not a number" in result.error


def test_payload_not_decoded_when_no_path_needs_it():
    # A non-JSON payload is fine as long as nothing looks inside it.
    assert outputs('SELECT payload, clientid FROM "t/#" WHERE qos = 1', row("\x00not json")) == [
        {"payload": "\x00not json", "clientid": "c1"}
    ]


def test_payload_decoded_once_per_row(monkeypatch):
    import common.rules.values as values

    calls = []
    real = values.json.loads

    def counting(text, *a, **k):
        calls.append(text)
        return real(text, *a, **k)

    monkeypatch.setattr(values.json, "loads", counting)
    rule = compile_rule(
        'SELECT payload.a AS a, payload.b AS b, payload.c.d AS d FROM "t/#" WHERE payload.a > 0'
    )
    assert rule.apply(row({"a": 1, "b": 2, "c": {"d": 3}})).outputs == [{"a": 1, "b": 2, "d": 3}]
    assert len(calls) == 1


def test_binary_payload_survives_base64_and_hashing():
    raw = bytes(range(256))
    (out,) = outputs(
        'SELECT base64_encode(payload) AS b, md5(payload) AS h, bytesize(payload) AS n FROM "t/#"',
        row(raw),
    )
    import base64
    import hashlib

    assert out == {
        "b": base64.b64encode(raw).decode(),
        "h": hashlib.md5(raw).hexdigest(),
        "n": 256,
    }


def test_reads_says_which_rows_from_takes():
    rule = compile_rule('SELECT * FROM "s/+/temp", "$events/client_connected"')
    assert rule.sources == ("s/+/temp", "$events/client_connected")
    assert rule.topic_filters == ("s/+/temp",)
    assert rule.events == ("client.connected",)
    assert rule.reads("message.publish", "s/1/temp")
    assert not rule.reads("message.publish", "s/1/hum")
    assert rule.reads("client.connected", None)
    assert not rule.reads("client.disconnected", None)
    # `$` topics are not matched by a leading wildcard (MQTT 4.7.2)
    assert not compile_rule('SELECT * FROM "#"').reads("message.publish", "$SYS/x")


def test_outputs_are_json_serialisable_and_independent_between_rows():
    rule = compile_rule('SELECT payload, 1 AS payload.added FROM "t/#"')
    first = rule.apply(row({"a": 1})).outputs
    second = rule.apply(row({"a": 2})).outputs
    assert first == [{"payload": {"a": 1, "added": 1}}]
    assert second == [{"payload": {"a": 2, "added": 1}}]
    json.dumps(first + second)


def test_compiled_rules_pickle_as_their_sql():
    import pickle

    rule = compile_rule('SELECT payload.t AS t FROM "s/#" WHERE payload.t > 1')
    again = pickle.loads(pickle.dumps(rule))
    assert again.sql == rule.sql and again.topic_filters == rule.topic_filters
    assert again.apply(row({"t": 2}, "s/x")).outputs == [{"t": 2}]


def test_evaluation_is_thread_safe():
    from concurrent.futures import ThreadPoolExecutor

    rule = compile_rule('SELECT payload.n AS n, topic FROM "t/#" WHERE payload.n >= 0')

    def run(n):
        return rule.apply(row({"n": n}, f"t/{n % 7}")).outputs

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(2000)))
    assert results == [[{"n": n, "topic": f"t/{n % 7}"}] for n in range(2000)]


def test_apply_takes_a_pyspark_row():
    from pyspark.sql import Row

    rule = compile_rule('SELECT payload.t AS t, clientid FROM "s/#"')
    spark_row = Row(**row({"t": 5}, "s/1"))
    assert rule.apply(spark_row).outputs == [{"t": 5, "clientid": "c1"}]


def test_apply_takes_archive_rows_as_pyarrow_gives_them():
    import pyarrow as pa

    from common.archive.schema import ARCHIVE_SCHEMA

    message = row({"t": 5}, "s/1", user_properties=[{"key": "k", "value": "v"}])
    message["ts"] = datetime.fromtimestamp(TS / 1000, UTC)
    table = pa.Table.from_pylist([message], schema=ARCHIVE_SCHEMA)
    (as_read,) = table.to_pylist()
    rule = compile_rule('SELECT payload.t AS t, timestamp, user_properties.k AS k FROM "s/#"')
    assert rule.apply(as_read).outputs == [{"t": 5, "timestamp": TS, "k": "v"}]


def test_deeply_nested_payload_fails_the_message_not_the_job():
    nested = "[" * 100_000 + "]" * 100_000
    result = compile_rule('SELECT payload.a AS a FROM "t/#"').apply(row(nested))
    assert not result.matched and result.error


def test_any_failure_inside_a_function_is_reported_not_raised(monkeypatch):
    from common.rules import functions

    def broken(value):
        raise KeyError("boom")

    monkeypatch.setitem(functions.FUNCTIONS, "upper", broken)
    result = compile_rule('SELECT upper(clientid) AS u FROM "t/#"').apply(row("x"))
    assert not result.matched and "boom" in result.error


@pytest.mark.parametrize(
    "sql, columns",
    [
        ('SELECT clientid FROM "t/#"', {"event", "topic", "client_id"}),
        (
            'SELECT payload.t AS t FROM "t/#" WHERE timestamp > 0',
            {"event", "topic", "payload", "ts"},
        ),
        (
            "SELECT pub_props.'User-Property'.k AS k FROM \"t/#\"",
            {
                "event",
                "topic",
                "user_properties",
                "payload_format",
                "content_type",
                "message_expiry",
                "response_topic",
                "correlation_data",
            },
        ),
        ('SELECT topic(1) AS a, upper(username()) AS u FROM "t/#"', {"event", "topic", "username"}),
        (
            'SELECT reason, peername FROM "$events/client_disconnected"',
            {"event", "topic", "reason", "peer"},
        ),
        ('SELECT * FROM "t/#"', "all"),
        ('FOREACH payload.xs FROM "t/#"', "all"),
        (
            'FOREACH payload.xs AS x DO x.v AS v INCASE retain FROM "t/#"',
            {"event", "topic", "payload", "retain"},
        ),
    ],
)
def test_archive_columns_a_rule_reads(sql, columns):
    from common.archive.schema import ARCHIVE_COLUMNS

    rule = compile_rule(sql)
    expected = set(ARCHIVE_COLUMNS) if columns == "all" else columns
    assert set(rule.archive_columns) == expected
    # Pruning to those columns changes nothing in the outputs
    full = row({"t": 1, "xs": [{"v": 1}]}, "t/a", user_properties=[{"key": "k", "value": "v"}])
    pruned = {k: v for k, v in full.items() if k in rule.archive_columns}
    if not rule.events:
        assert rule.apply(pruned).outputs == rule.apply(full).outputs


@pytest.mark.parametrize(
    "event, source, columns",
    [
        (
            "client.connected",
            "$events/client_connected",
            {
                "clientid",
                "username",
                "peername",
                "proto_ver",
                "keepalive",
                "clean_start",
                "expiry_interval",
                "connected_at",
                "conn_props",
                "timestamp",
                "node",
            },
        ),
        (
            "client.disconnected",
            "$events/client_disconnected",
            {
                "clientid",
                "username",
                "reason",
                "peername",
                "disconnected_at",
                "disconn_props",
                "timestamp",
                "node",
            },
        ),
        (
            "session.subscribed",
            "$events/session_subscribed",
            {"clientid", "username", "topic", "qos", "sub_props", "timestamp", "node"},
        ),
        (
            "session.unsubscribed",
            "$events/session_unsubscribed",
            {"clientid", "username", "topic", "qos", "unsub_props", "timestamp", "node"},
        ),
    ],
)
def test_select_star_on_events_has_emqx_columns(event, source, columns):
    message = {
        "event": event,
        "tenant": "acme",
        "ts": TS,
        "client_id": "c9",
        "username": "acme/d",
        "topic": "t/x",
        "qos": 1,
        "reason": "normal",
        "peer": "1.2.3.4:5",
        "proto_ver": 5,
        "keepalive": 60,
        "clean_start": True,
        "session_expiry": 0,
    }
    (out,) = outputs(f'SELECT * FROM "{source}"', message)
    assert columns <= set(out) and out["event"] == event and out["timestamp"] == TS
