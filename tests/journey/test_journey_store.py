"""The journey's files without a broker: what the writer writes, the reader finds (filters,
pages, tenants apart), compaction keeps every row once, retention deletes whole hours."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from common.journey.files import compact_due, delete_before, journey_files
from common.journey.schema import MESSAGES
from common.stores.object_store import LocalObjectStore
from data_plane.broker.ports import Published
from data_plane.observability.journey import JourneyRecorder
from data_plane.observability.journey_writer import JourneyWriter
from tenants.journey.selectors import JourneyQueryError, JourneyReader, topic_filter_regex
from tenants.journey.words import describe_outcome


def _message(tenant, client, topic, origin, qos=1, payload=b"{}"):
    return SimpleNamespace(
        tenant=tenant, publisher=client, topic=topic, qos=qos, payload=payload, origin=origin
    )


@pytest.fixture
def store(tmp_path):
    return LocalObjectStore(tmp_path)


def _write(store, recorder):
    writer = JourneyWriter(recorder, store, writer_id="w1")
    writer.write(*recorder.take())
    return writer


@pytest.mark.parametrize("use_c", [True, False], ids=["c-recorder", "python-recorder"])
def test_rows_found_by_topic_client_and_outcome_and_never_across_tenants(store, use_c):
    recorder = JourneyRecorder("node-a", use_c=use_c)
    mine, theirs = object(), object()
    for n in range(5):
        recorder.published(_message("acme", "pub", f"s/{n}/temp", mine), n + 1, Published(2, ()))
    recorder.published(_message("acme", "pub", "lonely", mine, qos=0), None, Published(0, ()))
    recorder.published(_message("evil", "pub", "s/1/temp", theirs), 7, Published(1, (), (), 1))
    recorder.published(_message("evil", "will", "ünï/çødé", None), None, Published(0, ()))
    recorder.message("acme", "pub", "big", 1, 999, "too_large", "over 100 bytes", packet_id=9)
    writer = _write(store, recorder)
    reader = JourneyReader(store)
    now = datetime.now(UTC)
    window = {"start": now - timedelta(minutes=5), "end": now + timedelta(minutes=1)}

    rows = reader.messages("acme", topic="s/+/temp", **window).rows
    assert sorted(r["topic"] for r in rows) == [f"s/{n}/temp" for n in range(5)]
    assert {(r["outcome"], r["sessions"], r["queued"]) for r in rows} == {("delivered", 2, 0)}
    assert {r["packet_id"] for r in rows} == {1, 2, 3, 4, 5}
    assert [
        r["topic"] for r in reader.messages("acme", outcome="no_subscribers", **window).rows
    ] == ["lonely"]
    assert reader.messages("acme", outcome="no_subscribers", **window).rows[0]["packet_id"] is None
    big = reader.messages("acme", outcome="too_large", **window).rows
    assert [(r["topic"], r["reason"], r["packet_id"]) for r in big] == [
        ("big", "over 100 bytes", 9)
    ]
    # The other tenant's same topic, by wildcard or by client id: never acme's, and back.
    assert all(r["tenant"] == "acme" for r in reader.messages("acme", topic="#", **window).rows)
    evil = reader.messages("evil", topic="#", **window).rows
    assert sorted((r["topic"], r["queued"], r["client_id"]) for r in evil) == [
        ("s/1/temp", 1, "pub"),
        ("ünï/çødé", 0, "will"),
    ]
    assert writer.outcomes[("acme", "delivered", "")] == 5

    # Pages: newest first, each row once, however many share a millisecond.
    seen, cursor = [], None
    while True:
        page = reader.messages("acme", limit=2, cursor=cursor, **window)
        seen += page.rows
        cursor = page.cursor
        if cursor is None:
            break
    assert len(seen) == 7
    assert len({(r["topic"], r["outcome"]) for r in seen}) == 7
    assert [r["ts"] for r in seen] == sorted((r["ts"] for r in seen), reverse=True)


def test_compaction_keeps_every_row_once_and_retention_deletes_whole_hours(store):
    recorder = JourneyRecorder("node-a", use_c=False)  # whose columns a test may rewrite
    three_hours_ago = datetime.now(UTC) - timedelta(hours=3)
    recorder.published(_message("acme", "pub", "t/routed", object()), 3, Published(1, ()))
    for tenant in ("acme", "evil"):
        for n in range(3):
            recorder.message(tenant, "pub", f"t/{n}", 0, 10, "acl_denied", "not authorized")
    recorder.client("acme", "pub", "connected")
    columns, others, events = recorder.take()
    old_ms = int(three_hours_ago.timestamp() * 1000)
    for row in [*others, *events]:
        row["ts"] = old_ms
    columns.ts[0] = old_ms / 1000
    JourneyWriter(recorder, store, writer_id="w1").write(columns, others, events)
    start, end = three_hours_ago - timedelta(minutes=1), datetime.now(UTC)
    reader = JourneyReader(store)
    before = reader.messages("acme", start=start, end=end).rows
    assert len(before) == 4 and all(
        f[1] for f in journey_files(store, MESSAGES, "acme", start, end)
    )

    # Routed publishes, other outcomes and client events: a segment each.
    assert compact_due(store, datetime.now(UTC)) == 3
    files = journey_files(store, MESSAGES, "acme", start, end)
    assert files and not any(shared for _, shared in files)  # acme's own file now
    after = reader.messages("acme", start=start, end=end).rows
    assert sorted(r["topic"] for r in after) == sorted(r["topic"] for r in before)
    assert len(reader.client_events("acme", "pub", start=start, end=end).rows) == 1
    assert compact_due(store, datetime.now(UTC)) == 0  # nothing twice

    assert delete_before(store, "acme", datetime.now(UTC) - timedelta(hours=1)) == 2
    assert reader.messages("acme", start=start, end=end).rows == []
    assert len(reader.messages("evil", start=start, end=end).rows) == 3  # not evil's


@pytest.mark.parametrize(
    ("topic_filter", "matches", "misses"),
    [
        ("a/+/c", ["a/b/c", "a//c"], ["a/b/c/d", "a/c"]),
        ("a/#", ["a", "a/b", "a/b/c"], ["ab", "b/a"]),
        ("#", ["a", "a/b"], ["$SYS/x"]),
        ("+/x", ["a/x"], ["$SYS/x"]),
        ("a.b/(c)", ["a.b/(c)"], ["aXb/(c)", "a.b/c"]),
    ],
)
def test_topic_filters_as_mqtt_matches_them(topic_filter, matches, misses):
    import re

    pattern = re.compile(topic_filter_regex(topic_filter))
    assert all(pattern.fullmatch(t) for t in matches)
    assert not any(pattern.fullmatch(t) for t in misses)


def test_a_bad_filter_names_the_parameter():
    with pytest.raises(JourneyQueryError) as info:
        topic_filter_regex("a/#/b")
    assert info.value.field == "topic"


def test_the_open_hour_is_compacted_in_rounds_then_merged_into_one_file(store, monkeypatch):
    from common.journey import files as journey_io

    monkeypatch.setattr(journey_io, "OPEN_HOUR_SEGMENTS", 1)
    reader = JourneyReader(store)
    writer = JourneyWriter(JourneyRecorder("n"), store, writer_id="w1")
    now = datetime.now(UTC)
    window = {"start": now - timedelta(hours=1), "end": now + timedelta(minutes=1)}
    for round_ in range(3):
        writer.recorder.message("acme", "pub", f"r/{round_}", 1, 5, "acl_denied", "no")
        writer.write(*writer.recorder.take())
        assert compact_due(store, now) == 1  # the open hour: one more part each round
    files = journey_files(store, MESSAGES, "acme", **window)
    assert len(files) == 3 and not any(shared for _, shared in files)
    assert sorted(r["topic"] for r in reader.messages("acme", **window).rows) == [
        "r/0",
        "r/1",
        "r/2",
    ]
    hour = now.replace(minute=0, second=0, microsecond=0)
    journey_io.compact_hour(store, MESSAGES, hour, merge=True)  # as once the hour closes
    assert len(journey_files(store, MESSAGES, "acme", **window)) == 1
    assert len(reader.messages("acme", **window).rows) == 3


def test_topic_rates_count_a_tenants_recent_publishes_per_minute(store):
    from tenants.journey.selectors import topic_rates

    recorder = JourneyRecorder("n")
    origin = object()
    for n in range(10):
        recorder.published(_message("acme", "pub", "a/b", origin), n + 1, Published(1, ()))
    recorder.published(_message("acme", "pub", "c", origin), 11, Published(0, ()))
    recorder.published(_message("evil", "pub", "a/b", object()), 1, Published(1, ()))
    _write(store, recorder)
    assert topic_rates("acme", minutes=5, store=store) == {"a/b": 2.0, "c": 0.2}


def test_a_slow_qos0_subscriber_drops_and_a_full_queue_refuses_each_named(store):
    recorder = JourneyRecorder("n")
    message = _message("acme", "pub", "a/b", None, qos=1)
    online = SimpleNamespace(client_id="slow", connection=object())
    offline = SimpleNamespace(client_id="asleep", connection=None)
    recorder.dropped(online, SimpleNamespace(message=message, qos=0), "queue_full")
    recorder.dropped(offline, SimpleNamespace(message=message, qos=1), "queue_full")
    recorder.dropped(offline, SimpleNamespace(message=message, qos=0), "offline_qos0")
    rows = {(r["subscriber"], r["outcome"]): r["reason"] for r in recorder.others}
    assert "slow subscriber" in rows[("slow", "dropped")]
    assert "max_queued_messages" in rows[("asleep", "queue_full")]
    assert "offline" in rows[("asleep", "dropped")]


@pytest.mark.parametrize("use_c", [True, False], ids=["c-recorder", "python-recorder"])
def test_a_message_its_offline_subscriber_dropped_on_arrival_says_so_on_its_own_row(store, use_c):
    """Issue 41: the row said "delivered to 1 session (1 offline: kept in its queue)" for a
    message the offline session's full queue refused. As the broker does it: the drop during
    routing, then the message's row."""
    recorder = JourneyRecorder("node-a", use_c=use_c)
    origin = object()
    asleep = SimpleNamespace(client_id="asleep", connection=None)
    older = _message("acme", "pub", "q/0", origin)
    # A drop of an earlier message (it expired in the queue) while another is routed: not this
    # message's fate, and not linked to its row.
    recorder.dropped(asleep, SimpleNamespace(message=older, qos=1), "expired")
    kept = _message("acme", "pub", "q/1", origin)
    recorder.published(kept, 1, Published(1, (), (), 1))
    refused = _message("acme", "pub", "q/2", origin)
    recorder.dropped(asleep, SimpleNamespace(message=refused, qos=1), "queue_full")
    recorder.published(refused, 2, Published(1, (), (), 1))
    _write(store, recorder)
    now = datetime.now(UTC)
    rows = (
        JourneyReader(store)
        .messages("acme", start=now - timedelta(minutes=5), end=now + timedelta(minutes=1))
        .rows
    )
    described = {(r["topic"], r["outcome"]): describe_outcome(r) for r in rows}

    mine = described[("q/2", "delivered")]
    assert mine["reason"].startswith("delivered to 0 of 1 session: dropped by 1 subscriber")
    assert "queue_full" in mine["reason"] and "kept in its queue" not in mine["reason"]
    assert (mine["sessions"], mine["queued"], mine["lost"]) == (1, 0, 1)
    drop = described[("q/2", "queue_full")]
    assert drop["message_id"] == mine["message_id"] is not None
    assert (drop["subscriber"], drop["packet_id"]) == ("asleep", 2)
    assert "dropped as it arrived at subscriber asleep" in drop["reason"]

    other = described[("q/1", "delivered")]
    assert other["reason"] == "delivered to 1 session (1 offline: kept in its queue)"
    assert other["message_id"] is None and other["lost"] is None
    assert described[("q/0", "expired")]["message_id"] is None


def test_one_tenants_unwritable_row_costs_no_other_tenant_its_journey(store):
    """Issue 44, point 3: a journey segment holds every tenant's rows. A reason quoting a lone
    surrogate (UTF-8, so Arrow, cannot hold one) is written with it escaped; a row Arrow still
    refuses (a reason code beyond int16) is left out alone: the other tenant's rows, beside them
    in the same segment, are all there."""
    recorder = JourneyRecorder("n")
    recorder.message("vic", "c1", "a/b", 1, 10, "quota_exceeded", "over", quota="publish_rate")
    recorder.message("atk", "c2", "a/b", 1, 10, "acl_denied", "bad \ud800 text")
    recorder.message("atk", "c2", "a/b", 1, 10, "acl_denied", "too big", reason_code=70_000)
    recorder.message("vic", "c1", "a/c", 1, 10, "acl_denied", "denied")
    recorder.client("vic", "c1", "connect_failed", reason="r", detail="d")
    recorder.client("atk", "c2", "connect_failed", reason="\udfff", detail="\ud800x")
    recorder.client("atk", "c2", "disconnected", reason_code=1 << 20)
    recorder.client("vic", "c1", "disconnected", reason="bye")
    _write(store, recorder)
    reader = JourneyReader(store)
    now = datetime.now(UTC)
    span = {"start": now - timedelta(hours=1), "end": now + timedelta(minutes=1)}
    victim = reader.messages("vic", **span).rows
    assert sorted(r["reason"] for r in victim) == ["denied", "over"]
    [attacker] = reader.messages("atk", **span).rows
    assert attacker["reason"] == "bad \\ud800 text"
    assert [r["event"] for r in reader.client_events("vic", "c1", **span).rows] == [
        "disconnected",
        "connect_failed",
    ]
    [event] = reader.client_events("atk", "c2", **span).rows
    assert (event["reason"], event["detail"]) == ("\\udfff", "\\ud800x")
