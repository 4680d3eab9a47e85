"""A sink's outputs through its durable outbox to the real far end, with the way to it cut
mid-stream (issue 47's "done when"): every output is there once it returns, none lost;
duplicates only as the sink's at-least-once allows, counted; the sink's state says what
happened in words meanwhile; the same key's outputs keep their order where the sink has one.
The outbox and the sender are the live job's (`spark.rules.outbox`, `spark.rules.sink_sender`),
on the platform's Postgres."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from django.db.models import F

from spark.rules import sink_sender
from spark.rules.actions import Job
from spark.rules.ledger import ActionKey
from spark.rules.outbox import SinkOutbox
from spark.rules.sink_sender import SinkSender
from tenants.models import Rule, RuleDeadLetter, SinkState
from tenants.models import SinkOutbox as OutboxRow
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.sinks.conftest import Mosquitto, Outage, Receiver
from tests.spark.conftest import database_url
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

KEYS = ("dev-1", "dev-2", "dev-3")


class FarEnd:
    """A sink type's far end: the action (through `outage`'s port) and what arrived there, in
    the order the far end keeps it."""

    def __init__(
        self,
        action: dict[str, Any],
        read: Callable[[], list[dict]],
        outage: Outage,
        close: Callable[[], None] = lambda: None,
    ):
        self.action, self.read, self.outage, self.close = action, read, outage, close


def _aws(port: int) -> dict[str, Any]:
    return {"endpoint_url": f"http://127.0.0.1:{port}", "region": "us-east-1",
            "access_key_id": "sinktest", "secret_access_key": "sinktest-secret"}  # fmt: skip


def _moto_port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1].strip("/"))


def s3_end(s3_endpoint, boto, tmp_path, tenant_dsn) -> FarEnd:
    s3, bucket = boto("s3"), f"sink-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    outage = Outage(_moto_port(s3_endpoint))

    def read() -> list[dict]:
        found = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        lines = []
        for item in sorted(found, key=lambda o: o["Key"]):
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode()
            lines += [json.loads(line) for line in body.splitlines() if line]
        return lines

    action = {"type": "s3", "bucket": bucket, "prefix": "out", "format": "jsonl",
              **_aws(outage.port)}  # fmt: skip
    return FarEnd(action, read, outage)


def sqs_end(s3_endpoint, boto, tmp_path, tenant_dsn) -> FarEnd:
    sqs = boto("sqs")
    url = sqs.create_queue(
        QueueName=f"q-{uuid.uuid4().hex[:8]}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    outage = Outage(_moto_port(s3_endpoint))
    got: list[dict] = []

    def read() -> list[dict]:
        while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
            "Messages", []
        ):
            for message in batch:
                got.append(json.loads(message["Body"]))
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return got

    return FarEnd({"type": "sqs", "queue_url": url, **_aws(outage.port)}, read, outage)


def kinesis_end(s3_endpoint, boto, tmp_path, tenant_dsn) -> FarEnd:
    kinesis, stream = boto("kinesis"), f"s-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    outage = Outage(_moto_port(s3_endpoint))

    def read() -> list[dict]:
        shard = kinesis.describe_stream(StreamName=stream)["StreamDescription"]["Shards"][0]
        iterator = kinesis.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records = kinesis.get_records(ShardIterator=iterator, Limit=10000)["Records"]
        return [json.loads(r["Data"]) for r in records]

    return FarEnd({"type": "kinesis", "stream": stream, **_aws(outage.port)}, read, outage)


def postgres_end(s3_endpoint, boto, tmp_path, tenant_dsn) -> FarEnd:
    table = f"readings_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(tenant_dsn, autocommit=True) as conn:
        conn.execute(
            f"CREATE TABLE {table} (id bigserial, ts timestamptz, key text, payload jsonb)"
        )
    user, rest = tenant_dsn.split("://", 1)[1].split("@", 1)
    port, database = int(rest.split(":", 1)[1].split("/", 1)[0]), rest.split("/", 1)[1]
    outage = Outage(port)

    def read() -> list[dict]:
        with psycopg.connect(tenant_dsn) as conn:
            rows = conn.execute(f"SELECT payload FROM {table} ORDER BY id").fetchall()
        return [r[0] for r in rows]

    dsn = f"postgresql://{user}@127.0.0.1:{outage.port}/{database}"
    return FarEnd({"type": "postgres", "dsn": dsn, "table": table}, read, outage)


def bridge_end(s3_endpoint, boto, tmp_path, tenant_dsn) -> FarEnd:
    import paho.mqtt.client as mqtt

    broker = Mosquitto(tmp_path)
    got: list[dict] = []
    reader = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"r-{uuid.uuid4().hex[:6]}")
    reader.on_message = lambda c, u, m: got.append(json.loads(m.payload))
    reader.connect("127.0.0.1", broker.port)
    reader.subscribe("ok/#", qos=1)
    reader.loop_start()
    time.sleep(0.3)
    outage = Outage(broker.port)
    action = {"type": "mqtt_bridge", "host": "127.0.0.1", "port": outage.port,
              "topic": "ok/${key}", "qos": 1}  # fmt: skip

    def close() -> None:
        reader.loop_stop()
        broker.stop()

    return FarEnd(action, lambda: list(got), outage, close)


def http_end(s3_endpoint, boto, tmp_path, tenant_dsn) -> FarEnd:
    receiver = Receiver()
    outage = Outage(receiver.port)

    def read() -> list[dict]:
        return [o for call in list(receiver.calls) for o in json.loads(call["body"])]

    action = {"type": "http_batch", "url": f"http://127.0.0.1:{outage.port}/batches"}
    return FarEnd(action, read, outage, receiver.close)


ENDS = {"s3": s3_end, "sqs": sqs_end, "kinesis": kinesis_end, "postgres": postgres_end,
        "mqtt_bridge": bridge_end, "http_batch": http_end}  # fmt: skip
ORDERED = {"sqs", "kinesis", "postgres", "mqtt_bridge", "http_batch"}  # arrival order readable


def _jobs(rule: Rule, action: dict[str, Any], first: int, count: int) -> list[Job]:
    jobs = []
    for n in range(first, first + count):
        key = KEYS[n % len(KEYS)]
        ts_ms = int(time.time() * 1000)
        jobs.append(
            Job(
                rule.id,
                rule.tenant.slug,
                f"$rules-{rule.id}-",
                action,
                {"n": n, "key": key, "temp": 20 + n % 7},
                ts_ms,
                key=ActionKey(rule.id, 1, f"m{n}", 0, 0, ts_ms),
                topic=f"plant/{key}/temp",
                client_id=key,
                rule_name=rule.name,
                action_index=0,
            )  # fmt: skip
        )
    return jobs


def _seen(rule: Rule, end: FarEnd) -> str:
    """What the test saw, for a failure's message."""
    states = list(SinkState.objects.filter(rule=rule).values("state", "last_error", "delivered"))
    waiting = OutboxRow.objects.filter(rule=rule).count()
    return f"states {states}, {waiting} in the outbox, {len(end.read())} at the far end"


@pytest.mark.parametrize("kind", sorted(ENDS))
def test_a_sink_cut_off_mid_stream_gets_every_output_once_it_returns(
    kind, s3_endpoint, boto, tmp_path, tenant_dsn, monkeypatch
):
    monkeypatch.setattr(sink_sender, "S3_FLUSH_SECONDS", 0.2)
    end = ENDS[kind](s3_endpoint, boto, tmp_path, tenant_dsn)
    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "plant/#"',
                                     actions=[end.action])  # fmt: skip
    dsn = database_url()
    outbox = SinkOutbox(dsn)
    sender = SinkSender(dsn, workers=2, poll=0.05, backoff=0.2, max_backoff=0.5)
    outbox.on_append = sender.wake
    sender.start()
    try:
        assert all(o.ok for o in outbox.append(_jobs(rule, end.action, 0, 30)))
        until(lambda: len(end.read()) >= 30, 30, "the first 30 at the far end")

        end.outage.down()  # the far end away, the rule goes on producing
        assert all(o.ok for o in outbox.append(_jobs(rule, end.action, 30, 10)))
        state = until(
            lambda: SinkState.objects.filter(rule=rule, state__in=["retrying", "failing"]).first(),
            30,
            lambda: f"the sink said it is retrying ({_seen(rule, end)})",
        )
        # More while the first wait out their back-off: none may overtake an older one
        for first in (40, 50):
            assert all(o.ok for o in outbox.append(_jobs(rule, end.action, first, 10)))
            time.sleep(0.6)
        assert state.last_error and "secret" not in state.last_error.lower()
        waiting = OutboxRow.objects.filter(rule=rule).count()
        assert waiting > 0

        end.outage.up()
        until(lambda: not OutboxRow.objects.filter(rule=rule).exists(), 60, "the outbox drained")
        got = until(lambda: (r := end.read()) and len(r) >= 60 and r, 30, "all 60 arrived")
    finally:
        sender.stop()
        outbox.close()
        end.outage.down()
        end.close()

    numbers = [o["n"] for o in got]
    assert set(numbers) == set(range(60)), "every output arrived"
    duplicated = {n for n in numbers if numbers.count(n) > 1}  # outputs there more than once
    state = SinkState.objects.get(rule=rule)
    assert state.state == "ok" and state.dead == 0
    assert state.delivered == 60
    assert (state.waiting, state.waiting_bytes) == (0, 0)  # what waits, counted, none left
    assert 0 <= state.lag_ms < 120_000  # the last delivery: an output's message to its arrival
    assert len(duplicated) <= state.resent  # at least once: each output that may be twice counted
    assert not RuleDeadLetter.objects.filter(rule=rule).exists()
    if kind in ORDERED:
        for key in KEYS:
            mine = [o["n"] for o in got if o["key"] == key]
            firsts = [n for i, n in enumerate(mine) if n not in mine[:i]]
            assert firsts == sorted(firsts), f"{key}'s outputs in order"


def test_an_output_over_the_outbox_quota_is_a_dead_letter_in_words_and_counted(receiver):
    """A sink away for long: its outbox keeps what the plan allows; what comes beyond is kept
    as a dead letter saying why (replayable), counted on the quota page — never dropped."""
    from tenants.models import Usage

    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    tenant_services.tenant_set_quota(tenant, {"max_sink_outbox_messages": 5})
    action = {"type": "http_batch", "url": receiver.url}
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "plant/#"',
                                     actions=[action])  # fmt: skip
    outbox = SinkOutbox(database_url())
    try:
        outcomes = outbox.append(_jobs(rule, action, 0, 8))
    finally:
        outbox.close()
    assert [o.ok for o in outcomes] == [True] * 5 + [False] * 3
    assert all(o.dead and "outbox is full" in o.error for o in outcomes[5:])
    assert "max_sink_outbox_messages" in outcomes[5].error
    assert OutboxRow.objects.filter(rule=rule).count() == 5
    (minute,) = Usage.objects.filter(tenant=tenant)
    assert minute.dropped == {"quota_sink_outbox": 3}
    state = SinkState.objects.get(rule=rule)  # the sink's own count says so too
    assert state.dead == 3 and "outbox is full" in state.last_error
    waiting = OutboxRow.objects.filter(rule=rule)
    assert (state.waiting, state.waiting_bytes) == (5, sum(len(r.body) for r in waiting))
    assert not receiver.calls  # nothing sent: no sender here


def test_a_sinks_dead_letter_replayed_goes_back_to_its_outbox_and_is_delivered(receiver):
    """A dead letter of a sink (its far end refused it, or was away past every attempt), replayed
    from the rule's page: back in that sink's outbox, delivered by the sender; one whose sink
    the rule no longer has stays, orphaned."""
    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    action = {"type": "http_batch", "url": receiver.url}
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "plant/#"',
                                     actions=[{"type": "webhook", "url": receiver.url}, action])  # fmt: skip
    kept = {k: v for k, v in rule.actions[1].items() if k != "secret"}  # as dead letters keep it
    RuleDeadLetter.objects.create(rule=rule, action=kept, output={"n": 7, "clientid": "dev-1"},
                                  body='{"n":7,"clientid":"dev-1"}', error="refused", attempts=10)  # fmt: skip
    gone = {"type": "s3", "bucket": "not-any-more"}
    RuleDeadLetter.objects.create(rule=rule, action=gone, output={"n": 8}, error="x", attempts=1)
    answer = rule_services.rule_dead_letters_replay(rule)
    assert (answer["queued"], answer["orphaned"], answer["remaining"]) == (1, 1, 1)
    (row,) = OutboxRow.objects.filter(rule=rule)
    assert (row.action_index, row.key, row.body) == (1, "dev-1", '{"n":7,"clientid":"dev-1"}')
    dsn = database_url()
    sender = SinkSender(dsn, poll=0.05)
    sender.start()
    try:
        until(lambda: not OutboxRow.objects.filter(rule=rule).exists(), 20, "delivered")
    finally:
        sender.stop()
    (call,) = receiver.calls
    assert json.loads(call["body"]) == [{"n": 7, "clientid": "dev-1"}]


_CLAIMS_AND_HANGS = """
import sys, time
from spark.rules.sink_sender import Sink, SinkSender
sender = SinkSender(sys.argv[1])
claimed = sender._claim(sender._connection(), Sink(int(sys.argv[2]), 0), 500, 1 << 20)
print(len(claimed.records), flush=True)
time.sleep(120)  # mid-send, as far as anyone can tell: killed here
"""


def test_a_killed_senders_claims_are_sent_at_once_by_the_next_not_after_their_lease(receiver):
    """A sender process killed -9 between taking outputs and settling them: while it lives
    another sender leaves its claims alone; once it is gone the next sender takes them back at
    its start and delivers them, each counted as possibly sent twice — not 120 s later."""
    import subprocess
    import sys

    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    action = {"type": "http_batch", "url": receiver.url}
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "plant/#"',
                                     actions=[action])  # fmt: skip
    dsn = database_url()
    outbox = SinkOutbox(dsn)
    try:
        assert all(o.ok for o in outbox.append(_jobs(rule, action, 0, 6)))
    finally:
        outbox.close()
    first = subprocess.Popen([sys.executable, "-c", _CLAIMS_AND_HANGS, dsn, str(rule.id)],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    other = SinkSender(dsn, poll=0.05)
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "6"
        assert other.take_back_orphans() == 0  # its sender lives: not another's to take
        other.round()
        time.sleep(0.5)
        assert not receiver.calls  # nothing sent: all six are out in its send
        first.kill()
        first.wait(10)
        started = time.monotonic()
        other.start()
        until(lambda: not OutboxRow.objects.filter(rule=rule).exists(), 20, "delivered")
        took = time.monotonic() - started
    finally:
        other.stop()
        if first.poll() is None:
            first.kill()
    assert took < 10  # at the next sender's start, not at the claim's lease (120 s)
    delivered = [o["n"] for call in receiver.calls for o in json.loads(call["body"])]
    assert sorted(delivered) == list(range(6))
    state = SinkState.objects.get(rule=rule)
    assert (state.state, state.delivered, state.resent) == ("ok", 6, 6)


def test_a_sinks_throughput_and_bytes_are_counted_per_clock_minute(receiver):
    """What `GET /api/v1/sinks` shows as `last_minute` and `delivered_bytes`: the sender counts
    each clock minute's deliveries as it settles and rolls the minute over."""
    from tenants.sinks.selectors import last_minute_delivered

    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    action = {"type": "http_batch", "url": receiver.url}
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "plant/#"',
                                     actions=[action])  # fmt: skip
    dsn = database_url()
    outbox, sender = SinkOutbox(dsn), SinkSender(dsn, poll=0.05)
    sink = sink_sender.Sink(rule.id, 0)
    rule_row = (rule.id, rule.actions, rule.name, tenant.slug)
    try:
        outbox.append(_jobs(rule, action, 0, 7))
        assert sender.deliver(sink, rule_row) == 7
        # A minute on, as the clock would have it: the seven are the last minute's
        SinkState.objects.filter(rule=rule).update(minute_at=F("minute_at") - timedelta(minutes=1))
        outbox.append(_jobs(rule, action, 7, 3))
        assert sender.deliver(sink, rule_row) == 3
    finally:
        sender.stop()
        outbox.close()
    state = SinkState.objects.get(rule=rule)
    sent = [o for call in receiver.calls for o in json.loads(call["body"])]
    assert state.delivered == 10 == len(sent)
    assert state.delivered_bytes == sum(len(json.dumps(o, separators=(",", ":"))) for o in sent)
    assert (state.previous_minute_delivered, state.minute_delivered) == (7, 3)
    now = state.minute_at + timedelta(seconds=30)  # in the minute it last settled in
    assert last_minute_delivered(state, now) == 7  # this minute: the last whole one had seven
    assert last_minute_delivered(state, now + timedelta(minutes=1)) == 3
    assert last_minute_delivered(state, now + timedelta(minutes=2)) == 0  # nothing since


def test_an_output_is_given_up_only_after_its_retry_window_in_words(receiver):
    """A far end away: its outputs are retried for `retry_for` since they were queued, however
    many attempts that takes, then kept as dead letters saying how long and why."""
    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    cut = Outage(receiver.port)
    cut.down()
    action = {"type": "http_batch", "url": f"http://127.0.0.1:{cut.port}/batches"}
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "plant/#"',
                                     actions=[action])  # fmt: skip
    dsn = database_url()
    outbox = SinkOutbox(dsn)
    sender = SinkSender(dsn, poll=0.05, backoff=0.1, max_backoff=0.2, retry_for=2.0)
    outbox.on_append = sender.wake
    sender.start()
    try:
        outbox.append(_jobs(rule, action, 0, 4))
        time.sleep(1.0)  # several attempts in, inside its window: all still waiting
        assert OutboxRow.objects.filter(rule=rule).count() == 4
        assert not RuleDeadLetter.objects.filter(rule=rule).exists()
        until(lambda: not OutboxRow.objects.filter(rule=rule).exists(), 20, "given up")
    finally:
        sender.stop()
        outbox.close()
        cut.down()
    letters = list(RuleDeadLetter.objects.filter(rule=rule))
    assert sorted(x.output["n"] for x in letters) == [0, 1, 2, 3]
    assert all(x.error.startswith("not delivered in 2 s of retrying") for x in letters)
    assert all(x.error.endswith("HTTP batch: connection refused") for x in letters)
    assert all(x.attempts > 1 for x in letters) and not receiver.calls
    assert SinkState.objects.get(rule=rule).dead == 4


def test_one_tenants_hostile_output_fails_no_other_tenants_append(receiver):
    """The outbox's append carries every tenant's outputs in one transaction: a NUL, a lone
    surrogate or NaN is stored escaped, and a value Postgres still refuses fails only its own
    output (a dead letter in words) while the other tenant's are all appended."""
    action = {"type": "http_batch", "url": receiver.url}
    good_tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    evil_tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    good = rule_services.rule_create(tenant=good_tenant, name="out", sql='SELECT * FROM "p/#"',
                                     actions=[action])  # fmt: skip
    evil = rule_services.rule_create(tenant=evil_tenant, name="out", sql='SELECT * FROM "p/#"',
                                     actions=[action])  # fmt: skip
    escaped, refused = _jobs(evil, action, 100, 2)
    escaped = Job(evil.id, evil_tenant.slug, "", action, {"s": "\ud800\x00", "v": float("nan")},
                  escaped.ts_ms, key=escaped.key, topic="p/\ud800", client_id="dev\x00x",
                  rule_name=evil.name, action_index=0)  # fmt: skip
    refused = Job(evil.id, evil_tenant.slug, "", action, {"n": 101}, 2**70, key=refused.key,
                  client_id="dev-2", rule_name=evil.name, action_index=0)  # fmt: skip
    first, rest = _jobs(good, action, 0, 1), _jobs(good, action, 1, 2)
    outbox = SinkOutbox(database_url())
    try:
        outcomes = outbox.append([*first, escaped, refused, *rest])
    finally:
        outbox.close()
    assert [o.ok for o in outcomes] == [True, True, False, True, True]
    assert outcomes[2].dead and "refused this output" in outcomes[2].error
    assert sorted(json.loads(r.body)["n"] for r in OutboxRow.objects.filter(rule=good)) == [0, 1, 2]
    (stored,) = OutboxRow.objects.filter(rule=evil)
    assert (stored.key, stored.client_id, stored.topic) == (
        "dev\\u0000x",
        "dev\\u0000x",
        "p/\\ud800",
    )
    assert stored.body == '{"s":"\\ud800\\u0000","v":NaN}'  # as JSON writes it, escaped


def test_a_tenants_silent_far_ends_hold_only_its_own_share_of_the_senders(receiver):
    """An attacker's four sinks to far ends that accept and never answer (each send held up to
    its time-out) beside another tenant's sink: the attacker gets at most its share of the
    workers, and the other tenant's outputs arrive at once."""
    from bench.rules_live import Tarpit

    tarpit = Tarpit()
    evil = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    good = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    held = {"type": "http_batch", "url": tarpit.url}
    evil_rules = [
        rule_services.rule_create(
            tenant=evil, name=f"out{i}", sql='SELECT * FROM "p/#"', actions=[held]
        )  # fmt: skip
        for i in range(4)
    ]
    action = {"type": "http_batch", "url": receiver.url}
    rule = rule_services.rule_create(tenant=good, name="out", sql='SELECT * FROM "p/#"',
                                     actions=[action])  # fmt: skip
    dsn = database_url()
    outbox = SinkOutbox(dsn)
    sender = SinkSender(dsn, workers=4, per_tenant=2, poll=0.05)
    try:
        for evil_rule in evil_rules:  # older: the sender looks at them first
            outbox.append(_jobs(evil_rule, held, 0, 5))
        sender.start()
        until(lambda: len(tarpit.held) >= 2, 10, "the attacker's sends under way")
        outbox.append(_jobs(rule, action, 0, 5))
        started = time.monotonic()
        until(lambda: receiver.calls, 10, "the other tenant's outputs delivered")
        took = time.monotonic() - started
        assert len(tarpit.held) == 2  # its share: two sends at once, the other two sinks wait
    finally:
        tarpit.close()  # the held sends fail now, not at their time-out
        sender.stop()
        outbox.close()
    assert took < 3.0
    assert sorted(o["n"] for o in json.loads(receiver.calls[0]["body"])) == list(range(5))


def test_an_http_batch_whose_answer_was_lost_is_sent_again_as_the_same_batch():
    """The receiver takes a batch and its answer is lost (the connection closes unanswered),
    while more outputs are queued: the next attempt is the same batch, with the same
    X-Batch-Id, so a receiver that took it can drop the copy; the later outputs follow."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    seen: list[tuple[str, list[int]]] = []
    unanswered = [2]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            seen.append((self.headers["X-Batch-Id"], [o["n"] for o in json.loads(body)]))
            if unanswered[0] > 0:
                unanswered[0] -= 1
                self.close_connection = True  # taken, its answer lost
                return
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=server.serve_forever, daemon=True).start()
    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    action = {"type": "http_batch", "url": f"http://127.0.0.1:{server.server_port}/b"}
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "p/#"',
                                     actions=[action])  # fmt: skip
    dsn = database_url()
    outbox = SinkOutbox(dsn)
    sender = SinkSender(dsn, poll=0.05, backoff=0.2, max_backoff=0.3)
    try:
        outbox.append(_jobs(rule, action, 0, 5))
        sender.start()
        until(lambda: len(seen) >= 1, 10, "the first batch sent")
        outbox.append(_jobs(rule, action, 5, 5))  # queued while the first waits for its retry
        until(lambda: not OutboxRow.objects.filter(rule=rule).exists(), 20, "all delivered")
    finally:
        sender.stop()
        outbox.close()
        server.shutdown()
    first_id, first = seen[0]
    assert first == list(range(5))
    assert seen[1] == (first_id, first) and seen[2] == (first_id, first)  # the same batch again
    assert sorted({n for _, ns in seen[3:] for n in ns}) == list(range(5, 10))
