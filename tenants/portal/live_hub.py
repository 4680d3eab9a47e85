"""One broker subscription per tenant and web process, shared by all of the tenant's live pages.

A page's socket (`tenants.portal.live.LiveConsumer`) is a viewer: the hub gives it a seat
(`live_seats`: bounded per member and per tenant) and joins it to its tenant's feed. A feed is one
aiomqtt connection as the tenant's read-only service identity (`{tenant}/$portal`), opened with
the tenant's first viewer and closed with its last, subscribed to `$SYS/broker/#`, `$events/#`
and the union of the filters its viewers watch (counted per filter: a filter is unsubscribed when
no viewer watches it any more). Each message is turned into a frame once and sent to the viewers
it concerns: the broker's own (`$SYS`, presence) to every viewer, a watched message only to those
whose own filter matches it, within each page's rate. A feed whose broker goes away tells every
viewer (`status` frames) and connects again, backing off from 1 s to 30 s.

So N pages of a tenant cost the broker one connection, not N; and the process's work per message
of a tenant is one parse plus one match per distinct filter, however many pages watch.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import aiomqtt
from django.conf import settings

from common.mqtt.topics import topic_matches
from common.security import service_token
from tenants.portal import live_frames as frames
from tenants.portal import live_metrics as metrics
from tenants.portal.live_seats import Bounds, Refused, Seat, Seats
from tenants.portal.live_tally import Tally

log = logging.getLogger(__name__)

BASE_FILTERS = frozenset({"$SYS/broker/#", "$events/#"})
RETRY_FIRST, RETRY_MAX = 1.0, 30.0  # seconds between attempts to reach the broker, doubling
STEADY = 10.0  # a connection that lasted this long starts the back-off afresh when it drops
BACKLOG = 1000  # messages received and not yet dispatched, per feed; beyond, dropped and counted
FIGURES_SECONDS = 2.0  # how often the pages' `live` figures are refreshed
# A new subscription makes the broker send the filter's retained messages (again, if another
# page watches it already): they go to the pages that started watching in the last few seconds,
# each retained topic once, and not to every page whose filter matches.
RETAINED_WINDOW = 5.0


class Viewer(Protocol):
    tenant: str
    member: str
    watching: str
    rate: frames.PageRate  # the page's own limit on watched messages

    async def send_text(self, text: str) -> None: ...


class Backlog(asyncio.Queue):
    """aiomqtt's queue of received messages: when it is full (this process is behind a tenant's
    flood) a message is dropped and counted, not logged one by one as aiomqtt would."""

    def __init__(self, maxsize: int = 0, *, on_drop: Callable[[], None]) -> None:
        super().__init__(maxsize)
        self._on_drop = on_drop

    def put_nowait(self, item: Any) -> None:
        if self.full():
            self._on_drop()
            return
        super().put_nowait(item)


def broker_client(tenant: str, on_drop: Callable[[], None]) -> aiomqtt.Client:
    """A connection to the broker as `tenant`'s read-only service identity (a fresh token)."""
    identifier = service_token.new_client_id()
    token = service_token.sign(service_token.load_key(), tenant, identifier)
    return aiomqtt.Client(
        settings.MQTT_INTERNAL_HOST,
        settings.MQTT_INTERNAL_PORT,
        username=f"{tenant}/{service_token.PORTAL_DEVICE}",
        password=token,
        identifier=identifier,
        # 3.1.1: nothing here needs 5.0's properties, and parsing them was a quarter of the
        # process's work per message under a tenant's flood.
        protocol=aiomqtt.ProtocolVersion.V311,
        queue_type=functools.partial(Backlog, on_drop=on_drop),
        max_queued_incoming_messages=BACKLOG,
    )


class Feed:
    """One tenant's broker connection and the viewers it feeds."""

    def __init__(self, hub: LiveHub, tenant: str) -> None:
        self.hub = hub
        self.tenant = tenant
        self.viewers: set[Viewer] = set()
        self.status: dict[str, Any] | None = None  # the last status frame, for newcomers
        self._filters: Counter[str] = Counter()  # watched filter -> viewers watching it
        self._subscribed: set[str] = set()
        self._client: aiomqtt.Client | None = None
        self._lock = asyncio.Lock()  # one change of subscriptions at a time
        self._told: dict[Viewer, dict[str, Any]] = {}  # the last figures each viewer was sent
        # Viewers that just began watching: until when they take retained messages, and the
        # retained topics they were sent since.
        self._retained: dict[Viewer, tuple[float, set[str]]] = {}
        self._figures_due = asyncio.Event()
        self._dropped = metrics.BACKLOG_DROPPED.labels(tenant)
        self._shown = metrics.SHOWN.labels(tenant)
        self._not_shown = metrics.NOT_SHOWN.labels(tenant)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run()), loop.create_task(self._figures())]

    # -- viewers ------------------------------------------------------------------------------

    async def add(self, viewer: Viewer) -> None:
        self.viewers.add(viewer)
        metrics.VIEWERS.labels(self.tenant).set(len(self.viewers))
        self._figures_due.set()
        if self.status is not None:
            await viewer.send_text(frames.encode(self.status))

    async def remove(self, viewer: Viewer) -> None:
        self.viewers.discard(viewer)
        self._told.pop(viewer, None)
        self._retained.pop(viewer, None)
        metrics.VIEWERS.labels(self.tenant).set(len(self.viewers))
        self._figures_due.set()
        if viewer.watching and self.viewers:
            self._unwatch(viewer.watching)
            try:
                await self._reconcile()
            except aiomqtt.MqttError:
                pass  # the connection is going; the next one subscribes what is wanted then

    async def watch(self, viewer: Viewer, topic_filter: str) -> None:
        """Point `viewer` at `topic_filter` ("" to stop); raises MqttError if the broker refused."""
        if viewer.watching:
            self._unwatch(viewer.watching)
        viewer.watching = topic_filter
        self._retained.pop(viewer, None)
        if topic_filter:
            self._filters[topic_filter] += 1
            self._retained[viewer] = (time.time() + RETAINED_WINDOW, set())
        await self._reconcile(refresh=topic_filter)

    def _unwatch(self, topic_filter: str) -> None:
        self._filters[topic_filter] -= 1
        if self._filters[topic_filter] <= 0:
            del self._filters[topic_filter]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.hub.tally.totals(self.tenant)  # what was counted since the last figures

    # -- the broker side ----------------------------------------------------------------------

    async def _run(self) -> None:
        delay = RETRY_FIRST
        while True:
            error = "the broker closed the connection"
            connected_at = None
            try:
                async with self.hub.connect(self.tenant, self._dropped.inc) as client:
                    async with self._lock:
                        self._client, self._subscribed = client, set()
                        for topic_filter in sorted(BASE_FILTERS):
                            await client.subscribe(topic_filter, qos=0)
                            self._subscribed.add(topic_filter)
                        await self._reconcile_locked(None)
                    connected_at = time.monotonic()
                    await self._broadcast(frames.status(True))
                    async for message in client.messages:
                        await self._dispatch(message)
                        await asyncio.sleep(0)  # a flooding tenant takes turns with the others
            except aiomqtt.MqttError as exc:
                error = str(exc)
            except Exception:  # a bug must not end the tenant's live pages for good
                log.exception("live view of %s: feed failed", self.tenant)
                error = "internal error"
            finally:
                self._client = None
            log.info("live view of %s: broker connection lost: %s", self.tenant, error)
            await self._broadcast(frames.status(False, error))
            if connected_at is not None and time.monotonic() - connected_at > STEADY:
                delay = RETRY_FIRST
            # Jittered, so that after a broker restart every tenant's feed does not come at once.
            await asyncio.sleep(delay * random.uniform(0.75, 1.25))
            delay = min(delay * 2, RETRY_MAX)

    async def _reconcile(self, refresh: str | None = None) -> None:
        async with self._lock:
            await self._reconcile_locked(refresh)

    async def _reconcile_locked(self, refresh: str | None) -> None:
        """Subscribe what viewers watch and nobody else did, unsubscribe what nobody watches any
        more (`$SYS`, `$events` always stay); `refresh` is subscribed again even if it is (the
        broker then sends its retained messages for the viewer who asked)."""
        client = self._client
        if client is None:
            return  # not connected: the next connection subscribes what is wanted then
        wanted = set(self._filters) | BASE_FILTERS
        for topic_filter in sorted(self._subscribed - wanted):
            await client.unsubscribe(topic_filter)
            self._subscribed.discard(topic_filter)
        again = {refresh} if refresh else set()
        for topic_filter in sorted((wanted - self._subscribed) | again):
            await client.subscribe(topic_filter, qos=0)
            self._subscribed.add(topic_filter)

    async def _broadcast(self, frame: dict[str, Any]) -> None:
        if frame["type"] == "status":
            self.status = frame
        text = frames.encode(frame)
        for viewer in list(self.viewers):
            await viewer.send_text(text)

    async def _dispatch(self, message: aiomqtt.Message) -> None:
        topic = message.topic.value
        payload = bytes(message.payload or b"")
        common = frames.platform_frame(topic, payload)
        if common is not None:
            await self._broadcast(common)
        matching = {f for f in self._filters if topic_matches(f, topic)}
        if not matching:
            return
        now = time.time()
        text = None
        shown = not_shown = 0
        for viewer in list(self.viewers):
            if viewer.watching not in matching:
                continue
            if message.retain and not self._first_retained(viewer, topic, now):
                continue  # sent again for another page's new subscription
            admitted, untold = viewer.rate.admit(now)
            if untold:
                await viewer.send_text(frames.encode({"type": "dropped", "count": untold}))
            if not admitted:
                not_shown += 1
                continue
            if text is None:
                text = frames.encode(
                    frames.message_frame(topic, payload, message.qos, message.retain, now)
                )
            await viewer.send_text(text)
            shown += 1
        if shown:
            self._shown.inc(shown)
        if not_shown:
            self._not_shown.inc(not_shown)
        self.hub.tally.count(self.tenant, shown, not_shown)

    def _first_retained(self, viewer: Viewer, topic: str, now: float) -> bool:
        until, seen = self._retained.get(viewer, (0.0, set()))
        if now > until or topic in seen:
            return False
        seen.add(topic)
        return True

    # -- what the pages are told about the live view itself -----------------------------------

    async def _figures(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._figures_due.wait(), FIGURES_SECONDS)
            except TimeoutError:
                pass
            self._figures_due.clear()
            try:
                await self._send_figures()
            except Exception:
                log.exception("live view of %s: figures failed", self.tenant)

    async def _send_figures(self) -> None:
        viewers = list(self.viewers)
        if not viewers:
            return
        bounds = self.hub.seats.bounds
        members = sorted({viewer.member for viewer in viewers})
        open_now, per_member = await self.hub.seats.counts(self.tenant, members)
        today = await self.hub.tally.totals(self.tenant)
        for viewer in viewers:
            figures = {
                "type": "live",
                "viewers": open_now,
                "viewer_limit": bounds.per_tenant,
                "yours": per_member[viewer.member],
                "your_limit": bounds.per_member,
                "shown_today": today["shown"],
                "not_shown_today": today["not_shown"],
            }
            if viewer in self.viewers and self._told.get(viewer) != figures:
                self._told[viewer] = figures
                await viewer.send_text(frames.encode(figures))


class LiveHub:
    """This process's live views: seats, and one feed per tenant with a page open."""

    def __init__(
        self,
        seats: Seats,
        tally: Tally,
        connect: Callable[[str, Callable[[], None]], aiomqtt.Client] = broker_client,
    ) -> None:
        self.seats = seats
        self.tally = tally
        self.connect = connect
        self.feeds: dict[str, Feed] = {}
        self._seats: dict[Viewer, Seat] = {}
        self._closing: set[asyncio.Task] = set()

    async def admit(self, viewer: Viewer) -> Refused | None:
        """Seat `viewer` and join it to its tenant's feed, or say why not."""
        taken = await self.seats.take(viewer.tenant, viewer.member)
        if isinstance(taken, Refused):
            metrics.REFUSED.labels(viewer.tenant, taken.limit).inc()
            return taken
        self._seats[viewer] = taken
        feed = self.feeds.get(viewer.tenant)
        if feed is None:
            feed = self.feeds[viewer.tenant] = Feed(self, viewer.tenant)
            metrics.BROKER_CONNECTIONS.set(len(self.feeds))
        await feed.add(viewer)
        return None

    async def watch(self, viewer: Viewer, topic_filter: str) -> None:
        feed = self.feeds.get(viewer.tenant)
        if feed is not None and viewer in feed.viewers:
            await feed.watch(viewer, topic_filter)

    async def leave(self, viewer: Viewer) -> None:
        seat = self._seats.pop(viewer, None)
        if seat is None:
            return
        feed = self.feeds.get(viewer.tenant)
        if feed is not None:
            await feed.remove(viewer)
            if not feed.viewers and self.feeds.get(viewer.tenant) is feed:
                del self.feeds[viewer.tenant]
                metrics.BROKER_CONNECTIONS.set(len(self.feeds))
                metrics.VIEWERS.remove(viewer.tenant)
                # Closed aside: the page is gone, and a newcomer opens a feed of its own.
                closing = asyncio.get_running_loop().create_task(feed.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
        await self.seats.give_back(seat)


_hub: LiveHub | None = None


def shared_hub() -> LiveHub:
    """The process's hub, made on first use (inside the server's event loop)."""
    global _hub
    if _hub is None:
        redis = None
        if settings.LIVE_SEATS_REDIS_URL:
            from redis.asyncio import Redis

            redis = Redis.from_url(
                settings.LIVE_SEATS_REDIS_URL, socket_timeout=1, socket_connect_timeout=1
            )
        bounds = Bounds(settings.LIVE_SOCKETS_PER_MEMBER, settings.LIVE_SOCKETS_PER_TENANT)
        _hub = LiveHub(Seats(bounds, redis), Tally(redis))
    return _hub
