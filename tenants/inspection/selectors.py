"""Reads of what the broker holds for a tenant (issue 30, point 4): its sessions, a session's
queue, its retained messages and its topics, cluster-wide. Every function takes the tenant it
reads within, and every query is bound to that tenant's id: nothing here can return another
tenant's rows, whatever filter is given (`#` included).

Where it comes from: a session online is a live connection's presence row (written by the broker
that holds it, `data_plane.tenancy.presence`, with its node, clean start, expiry and a sample of
its queue depth and in-flight count taken every few seconds); a session offline is a persistent
session's row (`tenants_mqttsession`), its queue counted from its queued messages. Retained
messages are the broker's table. Clean sessions (expiry 0) exist only while connected, so
only as presence rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Length, Substr
from django.http import Http404
from django.utils import timezone

from common.mqtt.errors import TopicFilterInvalid
from common.mqtt.topics import (
    filter_covers,
    parse_shared,
    topic_matches,
    validate_topic_filter,
)
from tenants.devices.selectors import PRESENCE_STALE_AFTER
from tenants.inspection import topic_tree
from tenants.inspection.payload_preview import FETCH_BYTES, Preview, preview
from tenants.journey import selectors as journey
from tenants.models import (
    DeviceConnection,
    MqttQueuedMessage,
    MqttSession,
    RetainedMessage,
    Tenant,
)

MAX_FILTER_CHARS = 1024  # a longer filter is refused (it travels in a change notification)
MAX_CLIENT_ID_CHARS = 256  # the longest client id a session row holds

# What a queued message's `state` says (data_plane.storage.queue_records).
QUEUE_STATES = {0: "queued", 1: "sent", 2: "released"}


class TopicFilterRefused(ValueError):
    """A topic filter the inspection cannot use; the message names the problem."""


def topic_filter_checked(raw: str | None, *, default: str | None = "#") -> str:
    """`raw` as a valid MQTT topic filter (`default` when absent); TopicFilterRefused naming
    the problem otherwise. A shared subscription's `$share/group/` is not a filter of topics."""
    if raw is None or raw == "":
        if default is None:
            raise TopicFilterRefused("a topic filter is required (for example a/b or a/#)")
        return default
    if len(raw) > MAX_FILTER_CHARS:
        raise TopicFilterRefused(f"a topic filter is at most {MAX_FILTER_CHARS} characters")
    if raw.startswith("$share/"):
        raise TopicFilterRefused("a shared subscription ($share/…) is not a filter of topics")
    try:
        validate_topic_filter(raw)
    except TopicFilterInvalid as error:
        raise TopicFilterRefused(str(error)) from None
    return raw


def _literal_prefix(topic_filter: str) -> str:
    """The text every topic the filter matches starts with: the levels before its first
    wildcard, without the last `/` (`a/#` matches `a` itself)."""
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if level in ("+", "#"):
            return "/".join(levels[:index])
    return topic_filter


# -- sessions -------------------------------------------------------------------------------


@dataclass(slots=True)
class SessionRow:
    client_id: str
    online: bool
    node: str | None  # the broker node holding its connection; None offline
    clean_start: bool | None  # as the client connected; None offline (not recorded)
    expiry: int  # seconds the session outlives its connection (0: clean; 4294967295: never)
    expires_at: datetime | None  # offline: when it ends; None online or never
    subscription_count: int
    queued: int
    inflight: int
    connected_at: datetime | None
    device: str | None
    # detail only
    subscriptions: list[dict] = field(default_factory=list)
    address: str | None = None
    protocol_version: int | None = None
    transport: str | None = None

    @property
    def persistent(self) -> bool:
        return self.expiry > 0


_SUBSCRIPTION_COUNT = "CASE jsonb_typeof({0}) WHEN 'array' THEN jsonb_array_length({0}) ELSE 0 END"

_SESSIONS = f"""
WITH live AS (
  SELECT c.client_id, TRUE AS online, c.broker::text AS node, c.clean_start,
         c.expiry_interval AS expiry, NULL::timestamptz AS expires_at,
         {_SUBSCRIPTION_COUNT.format("c.subscriptions")} AS subscription_count,
         c.queued, c.inflight, c.connected_at, d.name::text AS device
    FROM tenants_deviceconnection c JOIN tenants_device d ON d.id = c.device_id
   WHERE c.tenant_id = %(tenant)s AND c.heartbeat_at > %(fresh)s {{live_where}}
), stored AS (
  SELECT s.client_id::text, FALSE, NULL::text, NULL::boolean, s.expiry_interval, s.expires_at,
         {_SUBSCRIPTION_COUNT.format("s.subscriptions")}, 0, 0, NULL::timestamptz, NULL::text
    FROM tenants_mqttsession s
   WHERE s.tenant_id = %(tenant)s AND (s.expires_at IS NULL OR s.expires_at > now())
     AND NOT EXISTS (SELECT 1 FROM tenants_deviceconnection c
                      WHERE c.tenant_id = s.tenant_id AND c.client_id = s.client_id
                        AND c.heartbeat_at > %(fresh)s)
     {{stored_where}}
)
SELECT {{columns}} FROM (SELECT * FROM live UNION ALL SELECT * FROM stored) AS sessions
{{tail}}
"""

_QUEUE_FIGURES = """
SELECT client_id, count(*) FILTER (WHERE state = 0), count(*) FILTER (WHERE state <> 0)
  FROM tenants_mqttqueuedmessage
 WHERE tenant_id = %s AND client_id = ANY(%s) AND (expires_at IS NULL OR expires_at > now())
 GROUP BY client_id
"""


class SessionRows:
    """A tenant's sessions, online and offline, ordered by client id: counted and sliced
    lazily (the API's paginator asks `count()`, then one slice), one query each."""

    def __init__(
        self,
        tenant: Tenant,
        *,
        client: str | None = None,
        online: bool | None = None,
        exact: str | None = None,
    ) -> None:
        self.tenant = tenant
        self.client = client  # client ids containing it
        self.online = online
        self.exact = exact  # this client id only

    def _sql(self, columns: str, tail: str) -> tuple[str, dict[str, Any]]:
        params: dict[str, Any] = {
            "tenant": self.tenant.id,
            "fresh": timezone.now() - PRESENCE_STALE_AFTER,
        }
        live_where = stored_where = ""
        if self.client:
            params["pattern"] = "%" + _like_escaped(self.client) + "%"
            live_where = "AND c.client_id ILIKE %(pattern)s"
            stored_where = "AND s.client_id ILIKE %(pattern)s"
        if self.exact is not None:
            params["exact"] = self.exact
            live_where += " AND c.client_id = %(exact)s"
            stored_where += " AND s.client_id = %(exact)s"
        if self.online is True:
            stored_where += " AND FALSE"
        elif self.online is False:
            live_where += " AND FALSE"
        sql = _SESSIONS.format(
            live_where=live_where, stored_where=stored_where, columns=columns, tail=tail
        )
        return sql, params

    def count(self) -> int:
        sql, params = self._sql("count(*)", "")
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()[0]

    def __getitem__(self, page: slice) -> list[SessionRow]:
        start = page.start or 0
        stop = page.stop if page.stop is not None else start + 1000
        sql, params = self._sql("*", "ORDER BY client_id LIMIT %(limit)s OFFSET %(offset)s")
        params.update(limit=max(0, stop - start), offset=start)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = [SessionRow(*row) for row in cursor.fetchall()]
        _count_stored_queues(self.tenant, [r for r in rows if not r.online])
        return rows


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _count_stored_queues(tenant: Tenant, rows: list[SessionRow]) -> None:
    """Queue depth and in flight of offline sessions, from their durable queues."""
    if not rows:
        return
    with connection.cursor() as cursor:
        cursor.execute(_QUEUE_FIGURES, [tenant.id, [r.client_id for r in rows]])
        figures = {client_id: (queued, inflight) for client_id, queued, inflight in cursor}
    for row in rows:
        row.queued, row.inflight = figures.get(row.client_id, (0, 0))


def sessions_list(
    *, tenant: Tenant, client: str | None = None, online: bool | None = None
) -> SessionRows:
    """The tenant's sessions (online ones first by nothing: all by client id), optionally
    those whose client id contains `client`, or only online / offline ones."""
    return SessionRows(tenant, client=client, online=online)


def session_get(*, tenant: Tenant, client_id: str) -> SessionRow:
    """One session of the tenant with its subscriptions; Http404 when the tenant has no session
    of that client id (another tenant's included)."""
    rows = []
    if len(client_id) <= MAX_CLIENT_ID_CHARS and "\x00" not in client_id:  # else none such
        rows = SessionRows(tenant, exact=client_id)[0:1]
    if not rows:
        raise Http404(f"No session of client id {client_id!r}.")
    row = rows[0]
    if row.online:
        conn = (
            DeviceConnection.objects.filter(tenant=tenant, client_id=client_id)
            .only("subscriptions", "address", "protocol_version", "transport")
            .first()
        )
        if conn is not None:
            row.subscriptions = _subscriptions(conn.subscriptions)
            row.address = conn.address
            row.protocol_version = conn.protocol_version
            row.transport = conn.transport
    else:
        stored = MqttSession.objects.filter(tenant=tenant, client_id=client_id).first()
        row.subscriptions = _subscriptions(stored.subscriptions if stored else [])
    return row


def _subscriptions(records: Any) -> list[dict]:
    """Subscription records as both writers keep them (presence: filter and QoS; the session
    store: also no local, retain as published, retain handling, subscription id)."""
    out = []
    for record in records if isinstance(records, list) else []:
        if not isinstance(record, dict) or "filter" not in record:
            continue
        out.append(
            {
                "filter": str(record["filter"]),
                "qos": int(record.get("qos") or 0),
                "no_local": record.get("nl"),
                "retain_as_published": record.get("rap"),
                "retain_handling": record.get("rh"),
                "subscription_id": record.get("id"),
            }
        )
    return sorted(out, key=lambda s: s["filter"])


# -- a session's queue ----------------------------------------------------------------------


@dataclass(slots=True)
class QueuedRow:
    seq: int
    topic: str
    qos: int
    retain: bool
    state: str
    size: int | None
    payload: Preview
    expires_at: datetime | None
    created_at: datetime


def session_queue(*, tenant: Tenant, client_id: str) -> QueuedRows:
    """The session's durable queue in order (QoS 1 and 2 deliveries of a persistent session:
    waiting, and sent but not acknowledged); Http404 when the tenant has no such session."""
    session_get(tenant=tenant, client_id=client_id)
    return QueuedRows(tenant, client_id)


class QueuedRows:
    """Rows of one queue, sliced lazily; payloads fetched only as far as a preview needs."""

    def __init__(self, tenant: Tenant, client_id: str) -> None:
        self.rows = (
            MqttQueuedMessage.objects.filter(tenant=tenant, client_id=client_id)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
            .order_by("seq")
        )

    def count(self) -> int:
        return self.rows.count()

    def __getitem__(self, page: slice) -> list[QueuedRow]:
        rows = list(
            self.rows.annotate(
                size=Length("payload"), head=Substr("payload", 1, FETCH_BYTES)
            ).values(
                "seq",
                "topic",
                "qos",
                "retain",
                "state",
                "size",
                "head",
                "object_key",
                "expires_at",
                "created_at",
            )[page]
        )
        spilled = _spilled_sizes([r["object_key"] for r in rows if r["object_key"]])
        out = []
        for r in rows:
            if r["object_key"]:
                size = spilled.get(r["object_key"])
                shown = Preview("stored", "", True)  # large: kept in the object store
            else:
                head = bytes(r["head"] or b"")
                size = r["size"] or 0
                shown = preview(head, size)
            out.append(
                QueuedRow(
                    seq=r["seq"],
                    topic=r["topic"],
                    qos=r["qos"],
                    retain=r["retain"],
                    state=QUEUE_STATES.get(r["state"], str(r["state"])),
                    size=size,
                    payload=shown,
                    expires_at=r["expires_at"],
                    created_at=r["created_at"],
                )
            )
        return out


def _spilled_sizes(keys: list[str]) -> dict[str, int]:
    """Sizes of large payloads kept in the object store (not read: a preview of a payload of
    hundreds of kilobytes or more is not worth fetching it)."""
    if not keys:
        return {}
    from common.stores.object_store import open_object_store

    sizes: dict[str, int] = {}
    try:
        store = open_object_store()
        for key in keys:
            sizes.update(store.sizes(prefix=key))
    except Exception:  # the store is away: the size is unknown (null), the row still shown
        return {}
    return sizes


# -- retained messages ----------------------------------------------------------------------


@dataclass(slots=True)
class RetainedRow:
    topic: str
    qos: int
    size: int
    payload: Preview
    updated_at: datetime
    expires_at: datetime | None


def _retained(tenant: Tenant) -> QuerySet[RetainedMessage]:
    return RetainedMessage.objects.filter(tenant=tenant).filter(
        Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now())
    )


def retained_matching(*, tenant: Tenant, topic_filter: str) -> list[tuple[int, str]]:
    """(row id, topic) of the tenant's retained messages whose topic `topic_filter` matches,
    by topic, as the broker matches them (`common.mqtt.topics`: `#` passes over `$` topics)."""
    rows = _retained(tenant)
    prefix = _literal_prefix(topic_filter)
    if prefix == topic_filter:  # no wildcard: one topic
        rows = rows.filter(topic=topic_filter)
    elif prefix:
        rows = rows.filter(topic__startswith=prefix)
    found = rows.order_by("topic").values_list("id", "topic")
    return [(row_id, topic) for row_id, topic in found if topic_matches(topic_filter, topic)]


class RetainedRows:
    """A tenant's retained messages matching a filter, by topic, sliced lazily."""

    def __init__(self, tenant: Tenant, topic_filter: str) -> None:
        self.tenant = tenant
        self.ids = [
            row_id for row_id, _ in retained_matching(tenant=tenant, topic_filter=topic_filter)
        ]

    def count(self) -> int:
        return len(self.ids)

    def __getitem__(self, page: slice) -> list[RetainedRow]:
        ids = self.ids[page]
        rows = (
            _retained(self.tenant)
            .filter(id__in=ids)
            .annotate(size=Length("payload"), head=Substr("payload", 1, FETCH_BYTES))
            .order_by("topic")
            .values("topic", "qos", "size", "head", "updated_at", "expires_at")
        )
        return [
            RetainedRow(
                topic=r["topic"],
                qos=r["qos"],
                size=r["size"] or 0,
                payload=preview(bytes(r["head"] or b""), r["size"] or 0),
                updated_at=r["updated_at"],
                expires_at=r["expires_at"],
            )
            for r in rows
        ]


def retained_list(*, tenant: Tenant, topic_filter: str = "#") -> RetainedRows:
    return RetainedRows(tenant, topic_filter)


# -- topics ---------------------------------------------------------------------------------


def _live_connections(tenant: Tenant) -> QuerySet[DeviceConnection]:
    return DeviceConnection.objects.filter(
        tenant=tenant, heartbeat_at__gt=timezone.now() - PRESENCE_STALE_AFTER
    )


def subscription_filters(*, tenant: Tenant) -> Counter[str]:
    """Each topic filter the tenant's sessions subscribe with (a shared subscription by its
    filter) -> how many sessions do, online and offline."""
    live = _live_connections(tenant)
    counts: Counter[str] = Counter()
    records = list(live.values_list("subscriptions", flat=True))
    stored = (
        MqttSession.objects.filter(tenant=tenant)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))
        .exclude(Exists(live.filter(client_id=OuterRef("client_id"))))
    )
    records += list(stored.values_list("subscriptions", flat=True))
    for subscriptions in records:
        filters = set()
        for record in _subscriptions(subscriptions):
            try:
                filters.add(parse_shared(record["filter"])[1])
            except TopicFilterInvalid:
                continue
        counts.update(filters)
    return counts


def topics_tree(*, tenant: Tenant, topic_filter: str = "#") -> topic_tree.TopicTree:
    """The tenant's topics under `topic_filter`: retained topics it matches and subscription
    filters it covers, as a tree of levels (tenants.inspection.topic_tree)."""
    retained = [t for _, t in retained_matching(tenant=tenant, topic_filter=topic_filter)]
    wanted = topic_filter.split("/")
    filters = {
        f: n
        for f, n in subscription_filters(tenant=tenant).items()
        if filter_covers(wanted, f.split("/"))
        and not (f[:1] == "$" and wanted[0] in ("+", "#"))  # `#` passes over `$` topics
    }
    rates = {
        topic: rate
        for topic, rate in journey.topic_rates(tenant.slug).items()
        if topic_matches(topic_filter, topic)
    }
    return topic_tree.build(retained, filters, rates)


# -- the operators' overview ----------------------------------------------------------------


def inspection_counts() -> dict[int, dict[str, int]]:
    """Per tenant id: its offline persistent sessions, queued messages and retained messages
    (online sessions are its live connections, which the overview counts already). Tenants
    with none are absent."""
    now = timezone.now()
    live = DeviceConnection.objects.filter(heartbeat_at__gt=now - PRESENCE_STALE_AFTER)
    offline = (
        MqttSession.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .exclude(Exists(live.filter(tenant=OuterRef("tenant"), client_id=OuterRef("client_id"))))
        .values("tenant")
        .annotate(n=Count("id"))
        .values_list("tenant", "n")
    )
    queued = (
        MqttQueuedMessage.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values("tenant")
        .annotate(n=Count("id"))
        .values_list("tenant", "n")
    )
    retained = (
        RetainedMessage.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        .values("tenant")
        .annotate(n=Count("id"))
        .values_list("tenant", "n")
    )
    counts: dict[int, dict[str, int]] = {}
    for name, rows in (("offline_sessions", offline), ("queued", queued), ("retained", retained)):
        for tenant_id, n in rows:
            counts.setdefault(tenant_id, {})[name] = n
    return counts
