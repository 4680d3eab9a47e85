"""The shadow service: the broker's `Shadows` port (`data_plane.broker.ports`).

Admission asks `admits(auth, topic)` of every PUBLISH to a `$` topic: a shadow request the
client's ACL lets it make (its own thing's, unless a rule grants more: `common.access.acl`) is taken
and handed to `request`; anything else under `$` stays refused. A request is answered at once
when it is malformed (AWS's 400/413/415 bodies on `…/rejected`) or when its client already has
10 requests in flight (429, as AWS); otherwise it joins the next batch (`batches`), and once
that batch is committed its replies go out through `Broker.publish`: `…/accepted` or
`…/rejected`, and for an accepted update `…/update/delta` (when desired and reported disagree)
and `…/update/documents`. Replies are the platform's messages (client id `$aws-shadow`): not
billed as messages, not archived; the operations are metered instead (`metered`), in AWS's
1 KiB units. Each accepted change is also told to the `shadow.changed` hook (the archive
records it, so rules read it as `$events/shadow/…`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from common.access.acl import reserved_default
from common.shadow import document as doc
from common.shadow.topics import ACCEPTED, DELTA, DOCUMENTS, REJECTED, UPDATE, ShadowTopic, parse
from data_plane.broker.auth import AuthResult
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.shadows.batches import Batches
from data_plane.shadows.operations import Operation
from data_plane.shadows.store import ShadowStore

log = logging.getLogger(__name__)

PUBLISHER = "$aws-shadow"  # the replies' client id: the platform's own traffic
MAX_IN_FLIGHT = 10  # requests of one client not yet answered (AWS: 429 beyond)
UNIT_BYTES = 1024  # AWS meters shadow operations in 1 KiB increments


def operation_units(size: int) -> int:
    return max(1, -(-size // UNIT_BYTES))


class ShadowService:
    def __init__(
        self,
        store: ShadowStore,
        *,
        metered: Callable[[str, int, str], None] | None = None,
        max_batch: int = 500,
    ) -> None:
        self.broker: Any = None  # the broker it answers through (`attach`, before it serves)
        self.store = store
        self.metered = metered  # (tenant, units, thing) per operation carried out
        self.in_flight: dict[tuple[str, str], int] = defaultdict(int)
        self.batches = Batches(store, self._answered, max_batch=max_batch)
        self.stats = {"requests": 0, "rejected": 0, "batches": 0}

    def attach(self, broker: Broker) -> None:
        """The broker whose port this is: replies go out through its `publish`."""
        self.broker = broker

    # -- admission (the broker's port) ----------------------------------------------------

    @staticmethod
    def admits(auth: AuthResult, topic: str) -> bool:
        """Whether this client's PUBLISH to `$`-topic `topic` is a shadow request it may make."""
        parsed = parse(topic)
        if parsed is None or parsed.reply:
            return False  # not a request: replies are the service's alone
        acl = auth.acl
        if acl is not None:
            return acl.can_publish(topic)
        return bool(reserved_default(topic.split("/"), auth.device))

    def request(self, auth: AuthResult, message: Message) -> None:
        """Take a request the client was allowed to make (answered later, on its topics)."""
        topic = parse(message.topic)
        if topic is None:  # admitted, so cannot happen; never raise into the connection
            return
        self.stats["requests"] += 1
        tenant = auth.tenant
        requester = (tenant, message.publisher)
        max_size = auth.quota.get("max_shadow_size") or doc.DEFAULT_MAX_SIZE
        try:
            request = doc.parse_request(topic.operation, message.payload, max_size)
        except doc.ShadowError as error:
            self._reject(tenant, topic, error)
            return
        if self.in_flight[requester] >= MAX_IN_FLIGHT:
            self._reject(tenant, topic, doc.too_many_requests(request.client_token))
            return
        self.in_flight[requester] += 1
        op = Operation(
            tenant,
            auth.tenant_id,
            topic,
            request,
            message.publisher,
            auth.device,
            max_size,
            len(message.payload),
            auth.quota.get("max_shadows"),
            auth.quota.get("max_shadow_versions"),
            requester=requester,
        )
        self.batches.add(op)

    async def stop(self) -> None:
        await self.batches.stop()

    # -- replies ----------------------------------------------------------------------------

    def _answered(self, ops: list[Operation], now: int) -> None:
        """A batch is done: each operation's replies go out (a 500 for one the store failed)."""
        self.stats["batches"] += 1
        for op in ops:
            count = self.in_flight.get(op.requester, 0)
            if count <= 1:
                self.in_flight.pop(op.requester, None)
            else:
                self.in_flight[op.requester] = count - 1
            try:
                self.reply(op, now)
            except Exception:  # one reply must not stop the others
                log.exception("shadow reply failed for %s", op.topic)

    def reply(self, op: Operation, now: int) -> None:
        topic, tenant = op.topic, op.tenant
        if op.error is not None:
            if op.error.code == doc.SHADOW_LIMIT:  # counted like the broker's other limits
                self.broker.quota_exceeded(tenant, "shadows")
            self._reject(tenant, topic, op.error, now)
            return
        if op.outcome is not None:
            outcome = op.outcome
            accepted = doc.dumps(outcome.accepted)
            self._publish(tenant, topic.reply_topic(ACCEPTED), accepted)
            if outcome.delta is not None:
                delta = doc.dumps(outcome.delta)
                self._publish(tenant, f"{topic.prefix}/{UPDATE}/{DELTA}", delta)
                self._changed(op, f"{topic.prefix}/{UPDATE}/{DELTA}", delta, "delta")
            documents = doc.dumps(outcome.documents)
            self._publish(tenant, f"{topic.prefix}/{UPDATE}/{DOCUMENTS}", documents)
            self._changed(op, f"{topic.prefix}/{UPDATE}/{DOCUMENTS}", documents, "updated")
            self._meter(tenant, op.size, topic.thing)
        elif op.shadow is not None:
            body = doc.dumps(doc.get_document(op.shadow, now, op.request.client_token))
            self._publish(tenant, topic.reply_topic(ACCEPTED), body)
            self._meter(tenant, len(body), topic.thing)
        elif op.deleted is not None:
            body = doc.dumps(doc.delete_document(op.deleted, now, op.request.client_token))
            self._publish(tenant, topic.reply_topic(ACCEPTED), body)
            self._changed(op, topic.reply_topic(ACCEPTED), body, "deleted")
            self._meter(tenant, 1, topic.thing)

    def _reject(
        self, tenant: str, topic: ShadowTopic, error: doc.ShadowError, now: int | None = None
    ) -> None:
        self.stats["rejected"] += 1
        body = doc.error_document(error, now if now is not None else int(time.time()))
        self._publish(tenant, topic.reply_topic(REJECTED), doc.dumps(body))

    def _publish(self, tenant: str, topic: str, payload: bytes) -> None:
        message = Message(topic, payload, 1, False, {}, None, PUBLISHER, tenant)
        published = self.broker.publish(message)
        journey = self.broker.journey
        if journey is not None:  # a reply's row, as a device's publish leaves one
            journey.published(message, None, published)

    def _meter(self, tenant: str, size: int, thing: str) -> None:
        """Meter an operation on `thing`'s shadow: the tenant's, and that device's (a thing is
        a device of the tenant), whoever asked (the device itself, another, the REST API)."""
        if self.metered is not None:
            self.metered(tenant, operation_units(size), thing)

    def _changed(self, op: Operation, topic: str, payload: bytes, kind: str) -> None:
        """Tell observers (the archive: rule inputs `$events/shadow/…`) of an accepted change."""
        hooks = self.broker.hooks
        if hooks.has("shadow.changed"):
            hooks.run("shadow.changed", op.tenant, op.actor, op.device, topic, payload, kind)

    # -- changes made elsewhere (the REST API) -------------------------------------------

    def publish_change(
        self, tenant: str, replies: list[tuple[str, object]], actor: str, size: int
    ) -> None:
        """Publish the replies of a change the REST API made (`announcements`): the same
        messages an MQTT request would have caused, told to the same observers."""
        thing = ""  # whose shadow it is: the replies' topics name it
        for topic, body in replies:
            payload = body.encode() if isinstance(body, str) else doc.dumps(body)
            self._publish(tenant, topic, payload)
            parsed = parse(topic)
            if parsed is not None:
                thing = thing or parsed.thing
            if parsed is None or parsed.reply not in (DELTA, DOCUMENTS, ACCEPTED):
                continue
            kind = {DELTA: "delta", DOCUMENTS: "updated"}.get(parsed.reply)
            if kind is None and parsed.operation == "delete":
                kind = "deleted"
            if kind is not None:
                hooks = self.broker.hooks
                if hooks.has("shadow.changed"):
                    hooks.run("shadow.changed", tenant, actor, "", topic, payload, kind)
        self._meter(tenant, size, thing)
