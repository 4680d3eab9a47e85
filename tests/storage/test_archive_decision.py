"""The archive's decision, unit by unit: what a tenant's policies, plan default, setting and rules
ask the broker to keep (`common.archive.history_policy`), the per-topic cache and its bounds
(`archive_decision`), and the tap recording only what is needed (`archive_hook`)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from common.archive.history_policy import (
    RULE_FEED_DAYS,
    ArchiveNeeds,
    archive_needs,
    policy_filter_problem,
    retention_days,
)
from common.stores.object_store import LocalObjectStore
from data_plane.broker.message import Message
from data_plane.storage.archive_decision import (
    ArchiveDecisions,
    TopicDecisions,
    _Room,
    rule_sources,
)
from data_plane.storage.archive_hook import ArchiveTap
from data_plane.storage.parquet_archive import ParquetArchiveWriter


def test_what_a_tenant_needs_archived():
    none = archive_needs(policy_filters=[], default_days=0, archive_enabled=True)
    assert not none
    default = archive_needs(policy_filters=[], default_days=7, archive_enabled=True)
    assert default.filters == ("#",) and not default.events
    own = archive_needs(policy_filters=["a/+", "$events/#"], default_days=7, archive_enabled=True)
    assert own.filters == ("a/+",)  # the tenant's policies replace the plan's default
    assert own.events == {  # every event source: the lifecycle and the device shadows'
        "client.connected",
        "client.disconnected",
        "session.subscribed",
        "session.unsubscribed",
        "shadow.updated",
        "shadow.delta",
        "shadow.deleted",
    }
    off = archive_needs(
        policy_filters=["a/+"],
        default_days=7,
        archive_enabled=False,  # no history kept; the rules still get their feed
        rule_sources=[rule_sources('SELECT * FROM "r/#", "$events/client_disconnected"')],
    )
    rules = (("r/#",), frozenset({"client.disconnected"}))
    assert off == ArchiveNeeds(*rules, *rules)  # all of it read by the rules: the live feed's
    assert archive_needs(
        policy_filters=["#", "a/b"], default_days=0, archive_enabled=True
    ).filters == ("#",)
    assert rule_sources("SELECT * FORM nothing") == ((), ())  # a broken rule reads nothing


def test_how_long_a_tenant_keeps_history():
    keep = dict(default_days=7, max_days=30, archive_enabled=True, has_rules=False)
    assert retention_days(policy_days=[], **keep) == 7
    assert retention_days(policy_days=[2, 90], **keep) == 30  # capped at the plan's limit now
    assert retention_days(policy_days=[], **{**keep, "archive_enabled": False}) == 0
    assert retention_days(policy_days=[], **{**keep, "default_days": 0, "has_rules": True}) == (
        RULE_FEED_DAYS
    )


def test_policy_filters_that_cannot_be_kept():
    assert policy_filter_problem("sensors/+/t") is None
    assert policy_filter_problem("$events/client_connected") is None
    assert "valid MQTT" in policy_filter_problem("a/#/b")
    assert "broker's own" in policy_filter_problem("$SYS/broker/#")
    assert "broker's own" in policy_filter_problem("$events/unknown")


def test_a_topic_is_decided_once_and_the_cache_stays_bounded():
    room = _Room(5)
    decisions = TopicDecisions(ArchiveNeeds(("s/+", "exact")), room, limit=3)
    assert decisions["s/1"] and decisions["exact"] and not decisions["other"]
    assert dict(decisions) == {"s/1": True, "exact": True, "other": False}
    assert room.left == 2
    assert decisions["s/2"]  # past its limit: this tenant's cache starts again
    assert dict(decisions) == {"s/2": True} and room.left == 4
    neighbour = TopicDecisions(ArchiveNeeds(("#",)), room, limit=100)
    for n in range(10):
        assert neighbour[f"t/{n}"]
        assert len(neighbour) + len(decisions) <= 5  # never beyond the total
        assert len(neighbour) + len(decisions) + room.left == 5
    assert dict(decisions) == {"s/2": True}  # a neighbour short of room starts its own again
    decisions.release()
    assert len(decisions) == 0 and room.left == 5 - len(neighbour)


class _Rows:
    """A pool whose one connection answers the needs query with `rows`."""

    def __init__(self, rows):
        self.rows = rows

    def connection(self):
        rows = self.rows

        class Conn:
            async def __aenter__(self):
                return self

            async def __aexit__(self, *exc):
                return False

            async def execute(self, sql, params=()):
                wanted = [r for r in rows if not params or r[0] == params[0]]
                return SimpleNamespace(fetchall=lambda: _done(wanted))

        return Conn()


async def _done(value):
    return value


def _message(tenant: str, topic: str) -> Message:
    return Message(topic, b"x", 1, False, tenant=tenant, publisher="c1", device="d")


def test_the_tap_records_only_what_its_tenant_needs(tmp_path):
    async def scenario():
        rows = [
            ("kept", True, 0, ["s/#", "$events/client_connected"], []),
            ("ruled", True, 0, [], ['SELECT * FROM "r/+"']),
        ]
        decisions = ArchiveDecisions(_Rows(rows))
        assert await decisions.load_all() == 2
        tap = ArchiveTap(ParquetArchiveWriter(LocalObjectStore(tmp_path)), decisions=decisions)
        for tenant, topic in [("kept", "s/1"), ("kept", "r/1"), ("ruled", "r/1"), ("bare", "s/1")]:
            tap.record(_message(tenant, topic))
        assert [(t, c) for t, c, _ in tap._columns.publishers] == [("kept", "c1"), ("ruled", "c1")]
        assert len(tap._columns) == 2
        conn = SimpleNamespace(
            tenant="kept",
            client_id="c1",
            device="d",
            peer="p",
            protocol_version=5,
            timer=SimpleNamespace(keep_alive=30),
            clean_start=True,
            session=None,
            disconnect_reason=None,
        )
        tap._connected(conn)
        tap._disconnected(conn)  # kept asked for connections only
        tap._connected(SimpleNamespace(**{**vars(conn), "tenant": "bare"}))
        assert [(e["event"], e["tenant"]) for e in tap._events] == [("client.connected", "kept")]
        # The tenant drops its policy: the broker hears it and keeps nothing of it from then on.
        rows[0] = ("kept", True, 0, [], [])
        await decisions.on_change({"tenant": "kept", "kind": "history.changed"})
        tap.record(_message("kept", "s/2"))
        assert len(tap._columns) == 2 and "kept" not in decisions.tenants

    asyncio.run(scenario())
