"""Which of a tenant's topics the archive keeps: decided once per (tenant, topic), cached, and
forgotten when the tenant's history policies or rules change (the semantics are
`common.archive.history_policy`'s).

On the publish path the tap asks `tenants.get(message.tenant)`: one dict lookup, and None for a
tenant with nothing to archive, which is the end of it (`archive_hook.ArchiveTap`). A tenant that
archives something has a `TopicDecisions`: a dict of topic -> archived?, filled at a topic's
first message by matching its filters (`__missing__`), so a topic seen before costs a second
lookup. The cache is bounded, per tenant and in all (`MAX_TOPICS_PER_TENANT`, `MAX_TOPICS`): a
tenant with more topics than its share starts its dict again, and beyond the total a decision
is made without being kept.

What a tenant needs is read from Postgres (its policies, plan default, `archive_enabled`, the
FROM of its enabled rules and the sources of its enabled alarms) for every tenant at start-up, and again for one tenant when the
control plane announces a change of its history policies or rules (`history.changed`), its plan
or quotas, or its settings; after a lost notification connection (`reload`), for all of them.
A change applies to the messages routed after it is read: no restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from functools import lru_cache

from psycopg_pool import AsyncConnectionPool

from common.archive.history_policy import ArchiveNeeds, archive_needs
from common.contracts import tables
from common.contracts.notifications import ChangeKind
from common.mqtt.topics import topic_matches
from data_plane.storage.live_feed import LiveFeed

log = logging.getLogger(__name__)

MAX_TOPICS_PER_TENANT = 16_384
MAX_TOPICS = 262_144

# What each tenant needs: its policies' filters, plan default, setting, enabled rules' SQL (and
# its enabled alarms' sources, as the FROM of a rule: the live job reads them the same way; an
# alarm's source is a checked topic filter, without a double quote). All tenants at start-up
# (only those that may need something), or one.
_NEEDS_SQL = f"""
SELECT t.slug, t.archive_enabled, p.history_default_days,
       COALESCE((SELECT array_agg(h.topic_filter ORDER BY h.id) FROM {tables.HISTORY_POLICY} h
                  WHERE h.tenant_id = t.id), '{{}}'),
       COALESCE((SELECT array_agg(x.sql) FROM (
                   SELECT r.sql FROM {tables.RULE} r WHERE r.tenant_id = t.id AND r.enabled
                   UNION ALL
                   SELECT 'SELECT * FROM "' || a.source || '"' FROM {tables.ALARM_DEFINITION} a
                    WHERE a.tenant_id = t.id AND a.enabled) x), '{{}}')
  FROM {tables.TENANT} t JOIN {tables.PLAN} p ON p.id = t.plan_id
"""
_ALL = (
    _NEEDS_SQL
    + f""" WHERE (t.archive_enabled AND p.history_default_days > 0)
    OR EXISTS (SELECT 1 FROM {tables.HISTORY_POLICY} h WHERE h.tenant_id = t.id)
    OR EXISTS (SELECT 1 FROM {tables.RULE} r WHERE r.tenant_id = t.id AND r.enabled)
    OR EXISTS (SELECT 1 FROM {tables.ALARM_DEFINITION} a WHERE a.tenant_id = t.id AND a.enabled)"""
)
_ONE = _NEEDS_SQL + " WHERE t.slug = %s"

# Changes after which a tenant's needs are read again.
_TENANT_CHANGES = frozenset(
    {ChangeKind.HISTORY_CHANGED, ChangeKind.TENANT_QUOTA, ChangeKind.TENANT_SETTINGS}
)


class _Room:
    """Topics the caches of all tenants may still hold."""

    __slots__ = ("left",)

    def __init__(self, left: int) -> None:
        self.left = left


class TopicDecisions(dict):
    """One tenant's topics -> archived?; a topic's first lookup decides it (`__missing__`)."""

    __slots__ = ("needs", "_exact", "_wild", "_room", "_limit")

    def __init__(self, needs: ArchiveNeeds, room: _Room, limit: int = MAX_TOPICS_PER_TENANT):
        super().__init__()
        self.needs = needs
        self._exact = frozenset(f for f in needs.filters if "+" not in f and "#" not in f)
        self._wild = tuple(f for f in needs.filters if f not in self._exact)
        self._room = room
        self._limit = limit

    @property
    def events(self) -> frozenset[str]:
        return self.needs.events

    def __missing__(self, topic: str) -> bool:
        wanted = topic in self._exact or any(topic_matches(f, topic) for f in self._wild)
        room = self._room
        if len(self) >= self._limit or room.left <= 0:
            self.release()  # start again: this tenant's share is spent (or everyone's is)
        if room.left > 0:
            self[topic] = wanted
            room.left -= 1
        return wanted

    def release(self) -> None:
        """Give back the room this cache holds, emptying it."""
        self._room.left += len(self)
        self.clear()


@lru_cache(maxsize=4096)
def rule_sources(sql: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An enabled rule's FROM: its topic filters and the archive events it reads (none for SQL
    that no longer compiles: such a rule reads nothing)."""
    from common.rules import RuleSyntaxError, compile_rule  # the dialect: only when rules exist

    try:
        rule = compile_rule(sql)
    except RuleSyntaxError:
        return (), ()
    except Exception:  # a rule the dialect cannot take must not stop the archive
        log.exception("archive: could not read a rule's FROM")
        return (), ()
    return tuple(rule.topic_filters), tuple(rule.events)


def _needs_of(row: tuple) -> tuple[str, ArchiveNeeds]:
    slug, archive_enabled, default_days, policy_filters, rule_sqls = row
    return slug, archive_needs(
        policy_filters=policy_filters,
        default_days=int(default_days or 0),
        archive_enabled=bool(archive_enabled),
        rule_sources=[rule_sources(sql) for sql in rule_sqls],
    )


def _needs_of_rows(rows: Iterable[tuple]) -> dict[str, ArchiveNeeds]:
    return dict(_needs_of(row) for row in rows)


class ArchiveDecisions:
    """The tenants that archive something, each with its `TopicDecisions`; `tenants` is one
    dict for the life of the broker (the tap keeps its `get`), changed in place."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        *,
        max_topics: int = MAX_TOPICS,
        feed: LiveFeed | None = None,
    ) -> None:
        self.pool = pool  # psycopg's AsyncConnectionPool (the broker's lookups pool)
        self.feed = feed  # told what each tenant's rules read (the live rules job's rows)
        self.tenants: dict[str, TopicDecisions] = {}
        self._room = _Room(max_topics)
        # Reads and their results one at a time: a whole read started before a change and
        # finished after a tenant's re-read would put back what that change replaced.
        self._one_at_a_time = asyncio.Lock()

    def set(self, tenant: str, needs: ArchiveNeeds) -> None:
        """`tenant` now needs `needs` (nothing: it leaves the map); its decisions start again."""
        old = self.tenants.pop(tenant, None)
        if old is not None:
            old.release()
        if needs:
            self.tenants[tenant] = TopicDecisions(needs, self._room)
        if self.feed is not None:
            self.feed.set_rules(tenant, needs.rule_filters, needs.rule_events)

    async def load_all(self) -> int:
        """Read every tenant's needs (start-up, and after a lost notification connection);
        returns how many tenants archive something."""
        async with self._one_at_a_time:
            return await self._load_all()

    async def _load_all(self) -> int:
        rows = await self._fetch(_ALL)
        # Rules compile off the loop. The dialect's first use builds its parser (most of a
        # second): done here, at start-up, so a rule added later applies within milliseconds.
        await asyncio.to_thread(rule_sources, 'SELECT * FROM "warm/up"')
        needs = await asyncio.to_thread(_needs_of_rows, rows)
        for tenant in list(self.tenants):
            if tenant not in needs:
                self.set(tenant, ArchiveNeeds())
        for tenant, wanted in needs.items():
            self.set(tenant, wanted)
        log.info("archive: %d tenant(s) archive something", len(self.tenants))
        return len(self.tenants)

    async def reload(self, tenant: str) -> None:
        async with self._one_at_a_time:
            await self._reload(tenant)

    async def _reload(self, tenant: str) -> None:
        rows = await self._fetch(_ONE, (tenant,))
        needs = await asyncio.to_thread(_needs_of_rows, rows)
        wanted = needs.get(tenant, ArchiveNeeds())
        self.set(tenant, wanted)
        log.info(
            "archive: %s keeps %d topic filter(s) and %d lifecycle event(s)",
            tenant,
            len(wanted.filters),
            len(wanted.events),
        )

    async def on_change(self, change: dict[str, object]) -> None:
        """A control-plane change notification (`common.contracts.notifications`)."""
        kind = str(change.get("kind", ""))
        if kind == ChangeKind.RELOAD:
            await self.load_all()
            return
        tenant = change.get("tenant")
        if kind in _TENANT_CHANGES and isinstance(tenant, str) and tenant:
            await self.reload(tenant)

    async def _fetch(self, sql: str, params: tuple = ()) -> list[tuple]:
        async with self.pool.connection() as conn:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall()
