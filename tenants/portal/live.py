"""Live portal views: one WebSocket per open page, fed from the broker itself.

The consumer connects to the broker with aiomqtt as the tenant's read-only service identity
(`common.service_token`, checked by `data_plane.tenancy.service_identity`), so what a page can see is exactly what the broker scopes
to that tenant — never another's. It subscribes to the tenant's `$SYS/broker/#` (counters and
the presence snapshot `clients/online`) and `$events/#` (connects and disconnects), plus one
topic filter the page asks to watch. Frames sent to the page (JSON):

    {"type": "status", "connected": bool, "error"?: str}
    {"type": "sys", "name": "clients/connected", "value": "3"}
    {"type": "presence", "online": ["sensor-1", ...]}                 (snapshot)
    {"type": "presence", "device": "sensor-1", "online": true, "at": ms}
    {"type": "message", "topic", "payload", "binary", "qos", "retain", "at"}
    {"type": "dropped", "count": n}     (the viewer is rate limited; n messages not shown)
    {"type": "watching", "filter": str} / {"type": "error", "error": str}

The page sends {"watch": "sensors/#"} (or {"watch": ""} to stop).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import Any

import aiomqtt
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from common import service_token
from common.mqtt.topics import TopicFilterInvalid, topic_matches, validate_topic_filter
from tenants import selectors

log = logging.getLogger(__name__)

MESSAGES_PER_SECOND = 50  # what one page is shown at most; the rest is counted
PAYLOAD_PREVIEW = 4096  # bytes of each payload shown
RETRY_SECONDS = 2.0


class LiveConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        chosen = self.scope["session"].get("tenant")
        membership = await database_sync_to_async(selectors.current_membership)(user, chosen)
        if membership is None:
            await self.close(code=4403)
            return
        self.tenant = membership.tenant.slug
        self.client: aiomqtt.Client | None = None
        self.watching = ""
        self._window, self._shown, self._dropped = 0, 0, 0
        await self.accept()
        self._task = asyncio.get_running_loop().create_task(self._follow())

    async def disconnect(self, code: int) -> None:
        task = getattr(self, "_task", None)
        if task is not None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

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
        previous, self.watching = self.watching, topic_filter
        if self.client is not None:
            try:
                if previous and previous != topic_filter:
                    await self.client.unsubscribe(previous)
                if topic_filter and topic_filter != previous:
                    await self.client.subscribe(topic_filter, qos=0)
            except aiomqtt.MqttError as exc:
                await self.send_json({"type": "error", "error": str(exc)})
                return
        await self.send_json({"type": "watching", "filter": topic_filter})

    # -- the broker side ------------------------------------------------------------------

    async def _follow(self) -> None:
        """Stay subscribed while the page is open, reconnecting when the broker goes away."""
        while True:
            identifier = service_token.new_client_id()
            token = service_token.sign(service_token.load_key(), self.tenant, identifier)
            try:
                async with aiomqtt.Client(
                    settings.MQTT_INTERNAL_HOST,
                    settings.MQTT_INTERNAL_PORT,
                    username=f"{self.tenant}/{service_token.PORTAL_DEVICE}",
                    password=token,
                    identifier=identifier,
                    protocol=aiomqtt.ProtocolVersion.V5,
                    max_queued_incoming_messages=1000,
                ) as client:
                    self.client = client
                    await client.subscribe("$SYS/broker/#")
                    await client.subscribe("$events/#")
                    if self.watching:
                        await client.subscribe(self.watching)
                    await self.send_json({"type": "status", "connected": True})
                    async for message in client.messages:
                        await self._forward(message)
            except aiomqtt.MqttError as exc:
                log.info("live view of %s: broker connection failed: %s", self.tenant, exc)
                await self.send_json({"type": "status", "connected": False, "error": str(exc)})
            finally:
                self.client = None
            await asyncio.sleep(RETRY_SECONDS)

    async def _forward(self, message: aiomqtt.Message) -> None:
        topic = message.topic.value
        payload = bytes(message.payload or b"")
        if topic == "$SYS/broker/clients/online":
            try:
                online = json.loads(payload)["devices"]
            except (ValueError, KeyError, TypeError):
                online = None
            if isinstance(online, list):
                await self.send_json({"type": "presence", "online": online})
        elif topic.startswith("$SYS/broker/"):
            name = topic[len("$SYS/broker/") :]
            await self.send_json(
                {"type": "sys", "name": name, "value": payload.decode("utf-8", "replace")}
            )
        elif topic in ("$events/client_connected", "$events/client_disconnected"):
            await self._presence(topic.endswith("_connected"), payload)
        if self.watching and topic_matches(self.watching, topic):
            await self._show(topic, payload, message)

    async def _presence(self, online: bool, payload: bytes) -> None:
        try:
            event = json.loads(payload)
            device = event["username"].split("/", 1)[1]
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            return
        await self.send_json(
            {"type": "presence", "device": device, "online": online, "at": event.get("ts")}
        )

    async def _show(self, topic: str, payload: bytes, message: aiomqtt.Message) -> None:
        second = int(time.monotonic())
        if second != self._window:
            if self._dropped:
                await self.send_json({"type": "dropped", "count": self._dropped})
            self._window, self._shown, self._dropped = second, 0, 0
        if self._shown >= MESSAGES_PER_SECOND:
            self._dropped += 1
            return
        self._shown += 1
        preview = payload[:PAYLOAD_PREVIEW]
        try:
            text, binary = preview.decode("utf-8"), False
        except UnicodeDecodeError:
            text, binary = base64.b64encode(preview).decode(), True
        await self.send_json(
            {
                "type": "message",
                "topic": topic,
                "payload": text,
                "binary": binary,
                "size": len(payload),
                "qos": message.qos,
                "retain": message.retain,
                "at": int(time.time() * 1000),
            }
        )
