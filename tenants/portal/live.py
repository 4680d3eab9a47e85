"""Live portal views: one WebSocket per open page, fed from the broker itself.

The pages of a tenant share one broker connection per web process (`live_hub`), made with
aiomqtt as the tenant's read-only service identity (`common.security.service_token`, checked by
`data_plane.tenancy.service_identity`), so what a page can see is exactly what the broker scopes
to that tenant — never another's. It is subscribed to the tenant's `$SYS/broker/#` (counters and
the presence snapshot `clients/online`) and `$events/#` (connects and disconnects), plus the
topic filter each page asks to watch; a page gets only what its own filter matches. A member and a
tenant hold a bounded number of these sockets (`LIVE_SOCKETS_PER_MEMBER`,
`LIVE_SOCKETS_PER_TENANT`, `live_seats`); one over the bound is sent an `error` frame saying so in
words and closed with code 4429. Frames sent to the page (JSON):

    {"type": "status", "connected": bool, "error"?: str}
    {"type": "sys", "name": "clients/connected", "value": "3"}
    {"type": "presence", "online": ["sensor-1", ...]}                 (snapshot)
    {"type": "presence", "device": "sensor-1", "online": true, "at": ms}
    {"type": "message", "topic", "payload", "binary", "qos", "retain", "at"}
    {"type": "dropped", "count": n}     (the viewer is rate limited; n messages not shown)
    {"type": "watching", "filter": str} / {"type": "error", "error": str}
    {"type": "live", "viewers", "viewer_limit", "yours", "your_limit", "shown_today",
     "not_shown_today"}   (the tenant's live pages open now, and the member's, against their
                           bounds; watched messages shown today (UTC), and not shown: over rate)

The page sends {"watch": "sensors/#"} (or {"watch": ""} to stop).

A socket outlives nothing its login does not: every `LIVE_SESSION_RECHECK` seconds (30) it checks its
session still belongs to the account as it is (a new password, a removed membership, a logout
elsewhere end it), and closes with 4401 if not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiomqtt
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from common.mqtt.topics import TopicFilterInvalid, validate_topic_filter
from tenants.accounts import selectors as account_selectors
from tenants.portal import live_frames as frames
from tenants.portal.live_hub import shared_hub

log = logging.getLogger(__name__)

MESSAGES_PER_SECOND = 50  # what one page is shown at most; the rest is counted
PAYLOAD_PREVIEW = frames.PAYLOAD_PREVIEW
OVER_THE_BOUND = 4429  # close code: this member or tenant holds as many live sockets as it may
SIGNED_OUT = 4401  # close code: the session ended (a new password, logged out, membership gone)


def session_still_stands(scope: dict, tenant: str) -> bool:
    """The session's user is still who logged in (Django's session hash: a new password
    changes it) and still a member of the tenant."""
    from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY
    from django.utils.crypto import constant_time_compare

    session = scope["session"]
    session.load()  # as stored now: a logout elsewhere or a flush empties it
    user = account_selectors.user_get(session.get(SESSION_KEY))
    if user is None or not user.is_active:
        return False
    if not constant_time_compare(session.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()):
        return False
    return account_selectors.current_membership(user, tenant) is not None


class LiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        chosen = self.scope["session"].get("tenant")
        membership = await database_sync_to_async(account_selectors.current_membership)(
            user, chosen
        )
        if membership is None:
            await self.close(code=4403)
            return
        self.tenant = membership.tenant.slug
        self.member = str(user.pk)
        self.watching = ""
        self.rate = frames.PageRate(MESSAGES_PER_SECOND)
        # Accepted first, so that a refusal reaches the page as a frame and a close code (a
        # socket refused during the handshake is only an HTTP 403 to the page's script).
        await self.accept()
        refused = await shared_hub().admit(self)
        if refused is not None:
            await self.send_json({"type": "error", "error": refused.words})
            await self.close(code=OVER_THE_BOUND, reason="too many live pages")
            return
        self._recheck = asyncio.get_running_loop().create_task(self._keep_checking())

    async def _keep_checking(self) -> None:
        while True:
            await asyncio.sleep(settings.LIVE_SESSION_RECHECK)
            check = database_sync_to_async(session_still_stands)
            if not await check(self.scope, self.tenant):
                await self.send_json({"type": "error", "error": "signed out: sign in again"})
                await self.close(code=SIGNED_OUT, reason="signed out")
                return

    async def disconnect(self, code: int) -> None:
        recheck = getattr(self, "_recheck", None)
        if recheck is not None and recheck is not asyncio.current_task():
            recheck.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recheck
        if hasattr(self, "tenant"):
            await shared_hub().leave(self)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or not isinstance(content.get("watch"), str):
            await self.send_json({"type": "error", "error": 'send {"watch": "topic/filter"}'})
            return
        topic_filter = content["watch"].strip()
        if topic_filter:
            try:
                validate_topic_filter(topic_filter)
            except TopicFilterInvalid as exc:
                await self.send_json({"type": "error", "error": f"invalid topic filter: {exc}"})
                return
            if topic_filter.startswith("$share/"):
                await self.send_json(
                    {"type": "error", "error": "shared subscriptions cannot be watched"}
                )
                return
        try:
            await shared_hub().watch(self, topic_filter)
        except aiomqtt.MqttError as exc:
            await self.send_json({"type": "error", "error": str(exc)})
            return
        await self.send_json({"type": "watching", "filter": topic_filter})

    # -- what the hub calls (tenants.portal.live_hub.Viewer) ------------------------------------

    async def send_text(self, text: str) -> None:
        try:
            await self.send(text_data=text)
        except Exception as exc:  # the socket is closing: its disconnect takes it out of the hub
            log.debug("live view of %s: frame not sent: %s", self.tenant, exc)
