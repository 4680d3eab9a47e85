"""The dry run (POST /api/v1/rules/test) and `${...}` templates, as EMQX's rule tester and
republish templates behave."""

from __future__ import annotations

import time

import pytest

from common.rules import (
    RuleRuntimeError,
    RuleSyntaxError,
    compile_rule,
    dry_run,
    render_template,
)


def test_select_answers_one_output():
    answer = dry_run(
        'SELECT payload.temp AS t, clientid FROM "s/+/temp" WHERE payload.temp > 30',
        {"topic": "s/1/temp", "payload": '{"temp": 31}', "clientid": "dev1"},
    )
    assert answer == {"match": True, "outputs": [{"t": 31, "clientid": "dev1"}]}


def test_where_false_is_no_match():
    answer = dry_run(
        'SELECT payload.temp AS t FROM "s/+/temp" WHERE payload.temp > 30',
        {"topic": "s/1/temp", "payload": '{"temp": 3}'},
    )
    assert answer == {"match": False}


def test_from_must_take_the_context_topic():
    assert dry_run('SELECT 1 AS x FROM "other/#"', {"topic": "s/1/temp"}) == {"match": False}


def test_foreach_answers_zero_to_n_outputs():
    sql = 'FOREACH payload.sensors AS s DO s.cmd AS c INCASE s.cmd > 1 FROM "t/#"'
    ctx = {"topic": "t/a", "payload": {"sensors": [{"cmd": 1}, {"cmd": 2}, {"cmd": 3}]}}
    assert dry_run(sql, ctx) == {"match": True, "outputs": [{"c": 2}, {"c": 3}]}
    ctx["payload"] = {"sensors": []}
    assert dry_run(sql, ctx) == {"match": True, "outputs": []}


def test_missing_fields_get_example_values():
    (out,) = dry_run('SELECT * FROM "t/#"', {})["outputs"]
    assert out["topic"] == "t/a" and out["clientid"] == "c_emqx" and out["username"] == "u_emqx"
    assert out["payload"] == '{"msg": "hello"}' and out["qos"] == 1
    assert abs(out["timestamp"] - time.time() * 1000) < 5000


def test_context_fields_reach_the_columns():
    (out,) = dry_run(
        "SELECT qos, username, timestamp, user_properties.k AS k, "
        "pub_props.'User-Property'.k AS k2 FROM \"t/#\"",
        {
            "topic": "t/b",
            "qos": 2,
            "username": "acme/dev",
            "timestamp": 1_700_000_000_000,
            "user_properties": {"k": "v"},
        },
    )["outputs"]
    assert out == {
        "qos": 2,
        "username": "acme/dev",
        "timestamp": 1_700_000_000_000,
        "k": "v",
        "k2": "v",
    }


def test_events_are_tested_by_name():
    sql = 'SELECT clientid, reason FROM "$events/client_disconnected"'
    answer = dry_run(sql, {"event": "client.disconnected", "clientid": "d1", "reason": "normal"})
    assert answer == {"match": True, "outputs": [{"clientid": "d1", "reason": "normal"}]}
    assert dry_run(sql, {"event": "$events/client_disconnected"})["match"] is True
    assert dry_run(sql, {"topic": "t/a"}) == {"match": False}


def test_context_peerhost_is_what_clientip_and_peerhost_give():
    sql = 'SELECT clientip() AS ip, peerhost() AS h, peerhost FROM "t/#"'
    (out,) = dry_run(sql, {"peerhost": "10.9.8.7"})["outputs"]
    assert out == {"ip": "10.9.8.7", "h": "10.9.8.7", "peerhost": "10.9.8.7"}
    (out,) = dry_run(sql, {"peerhost": "2001:db8::1"})["outputs"]
    assert out == {"ip": "2001:db8::1", "h": "2001:db8::1", "peerhost": "2001:db8::1"}
    (out,) = dry_run(sql + " WHERE peerhost = '192.168.0.10'", {})["outputs"]
    assert out["ip"] == "192.168.0.10"  # EMQX's example when the context has none


def test_dry_run_rule_id_is_a_sql_testers_as_in_emqx():
    sql = 'SELECT metadata.rule_id AS id FROM "t/#"'
    (first,) = dry_run(sql, {})["outputs"]
    assert first["id"].startswith("sql_tester:") and len(first["id"]) == len("sql_tester:") + 16
    assert dry_run(sql, {}, rule_id="hot")["outputs"] == [{"id": "hot"}]


def test_unknown_event_sources_do_not_match():
    assert dry_run('SELECT * FROM "$events/message_dropped"', {}) == {"match": False}
    sql = 'SELECT clientid FROM "$events/client/connected"'
    assert dry_run(sql, {"event": "$events/client/connected", "clientid": "d1"}) == {
        "match": True,
        "outputs": [{"clientid": "d1"}],
    }


def test_bad_sql_raises_syntax_error_with_position():
    with pytest.raises(RuleSyntaxError) as caught:
        dry_run('SELECT * FROM "t/#" WHERE payload.x >', {})
    assert caught.value.line == 1


def test_evaluation_error_raises_runtime_error():
    with pytest.raises(RuleRuntimeError, match="payload is not valid JSON"):
        dry_run('SELECT payload.x AS x FROM "t/#"', {"payload": "{not json"})
    with pytest.raises(RuleRuntimeError, match="unknown event"):
        dry_run('SELECT * FROM "t/#"', {"event": "bogus"})
    assert issubclass(RuleRuntimeError, ValueError) and issubclass(RuleSyntaxError, ValueError)


def test_dry_run_and_jobs_share_semantics():
    """The dry run is compile_rule + apply on the row the context describes: same answer."""
    from common.rules.dry_run import context_row

    sql = "SELECT upper(clientid) AS c, payload.a[-1] AS last FROM \"t/#\" WHERE payload.a[1] = '1'"
    ctx = {"topic": "t/x", "payload": {"a": [1, 2, 3]}, "clientid": "dev"}
    assert dry_run(sql, ctx)["outputs"] == compile_rule(sql).apply(context_row(ctx)).outputs


def test_warm_dry_run_is_fast():
    sql = 'SELECT payload.temp AS t FROM "s/+/temp" WHERE payload.temp > 30'
    dry_run(sql, {"topic": "s/1/temp", "payload": '{"temp": 31}'})
    started = time.perf_counter()
    for _ in range(50):
        dry_run(sql, {"topic": "s/1/temp", "payload": '{"temp": 31}'})
    assert (time.perf_counter() - started) / 50 < 0.2


# -- templates -----------------------------------------------------------------------------


OUTPUT = {
    "clientid": "dev1",
    "t": 31.5,
    "ok": True,
    "payload": '{"a": {"b": 7}, "list": [1, 2, 3]}',
    "m": {"x": 1},
    "arr": ["p", "q"],
    "pub_props": {"User-Property": {"k": "v"}, "Content-Type": "text/plain"},
}


@pytest.mark.parametrize(
    "template, expected",
    [
        ("alerts/${clientid}", "alerts/dev1"),
        ("${clientid}:${t}:${ok}", "dev1:31.5:true"),
        ("${payload.a.b}", "7"),
        ("${payload.list[2]}", "2"),
        ("${payload.list[-1]}", "3"),
        ("${arr[1]}", "p"),
        ("${m}", '{"x":1}'),
        ("${ m.x }", "1"),
        ("${missing.var}", "undefined"),
        ("no placeholders", "no placeholders"),
        ('{"temp": ${t}, "dev": "${clientid}"}', '{"temp": 31.5, "dev": "dev1"}'),
        ("${payload}", '{"a": {"b": 7}, "list": [1, 2, 3]}'),
        ("${pub_props.'User-Property'}", '{"k":"v"}'),
        ("${pub_props.'User-Property'.k}", "v"),
        ('${pub_props."Content-Type"}', "text/plain"),
    ],
)
def test_render_template(template, expected):
    assert render_template(template, OUTPUT) == expected


def test_template_renders_json_null_as_null():
    from common.rules import compile_rule
    from tests.rules.test_dialect import row

    (out,) = compile_rule('SELECT payload FROM "t/#"').apply(row('{"x": null}')).outputs
    assert render_template("${payload.x}|${payload.y}", out) == "null|undefined"


def test_template_whole_output():
    assert render_template("${.}", {"a": 1}) == '{"a":1}'
