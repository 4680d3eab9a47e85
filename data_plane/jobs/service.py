"""The jobs service: the part of the broker's reserved-topics port (`reserved`) that serves
`$aws/things/{thing}/jobs/…`.

A request the client's ACL lets it make (its own thing's, unless a rule grants more) is taken by
`request`: answered at once when it is malformed (AWS's `InvalidJson` / `InvalidRequest` on
`…/rejected`) or when its client already has 10 requests unanswered (`RequestThrottled`);
otherwise it waits its turn behind the same thing's earlier requests (a thing's jobs change one
request at a time, in arrival order, as a device's own sequence expects), is carried out in one
transaction (`store`), and its reply and the notifications it calls for (`…/jobs/notify`,
`…/jobs/notify-next`) go out through `Broker.publish`, as the platform's messages (client id
`$aws-jobs`): not billed as messages, not archived, journeyed like any publish. A job document
in a reply or a notification has its artifacts' placeholders replaced by short-lived URLs as it
goes out (`common.jobs.artifacts`), whether the broker or the control plane made the message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from typing import Any

from common.access.acl import reserved_default
from common.jobs import executions as ex
from common.jobs.artifacts import ArtifactLinks
from common.jobs.topics import ACCEPTED, REJECTED, parse
from common.runtime.cancellation import cancel_and_wait
from data_plane.broker.auth import AuthResult
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.jobs.store import JobRequest, PostgresJobs

log = logging.getLogger(__name__)

PUBLISHER = "$aws-jobs"  # the replies' client id: the platform's own traffic
MAX_IN_FLIGHT = 10  # requests of one client not yet answered (RequestThrottled beyond)
# Things served at once, each holding a connection of the broker's shared write pool for its
# transaction. A job to 10,000 devices has them all ask within a second: one task each on the
# pool made most wait past its timeout and fail (InternalError), and starved the sessions' and
# shadows' writes of connections meanwhile (bench/jobs.py). Beyond these, requests wait here,
# without a deadline (a client has at most MAX_IN_FLIGHT waiting).
LANES = 4


def _unmapped(topic: str) -> bool:
    """A topic under `$aws/things/{thing}/jobs/` that is no API's request and no reply either
    (answered with AWS's InvalidTopic; a forged `…/accepted` or `…/rejected` stays refused)."""
    levels = topic.split("/")
    return (
        len(levels) >= 5
        and levels[:2] == ["$aws", "things"]
        and bool(levels[2])
        and levels[3] == "jobs"
        and levels[-1] not in (ACCEPTED, REJECTED)
        and "" not in levels[4:]
    )


def _token_of(payload: bytes) -> str | None:
    try:
        return ex.parse_request(payload).client_token
    except ex.JobError as error:
        return error.client_token


class JobService:
    def __init__(self, store: PostgresJobs, links: ArtifactLinks | None = None) -> None:
        self.links = links  # None: documents go out as stored (no artifacts' URLs)
        self.broker: Any = None  # the broker it answers through (`attach`, before it serves)
        self.store = store
        self.in_flight: dict[tuple[str, str], int] = defaultdict(int)
        self.queues: dict[tuple[str, str], deque[JobRequest]] = {}
        self.tasks: set[asyncio.Task] = set()
        self.lanes = asyncio.Semaphore(LANES)
        self.stats = {"requests": 0, "rejected": 0}

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    @staticmethod
    def admits(auth: AuthResult, topic: str) -> bool:
        """Whether this client's PUBLISH to `$`-topic `topic` is a jobs request it may make."""
        parsed = parse(topic)
        if parsed is None and not _unmapped(topic):
            return False
        if parsed is not None and not parsed.is_request:
            return False  # replies and notifications are the service's alone
        acl = auth.acl
        if acl is not None:
            return acl.can_publish(topic)
        return bool(reserved_default(topic.split("/"), auth.device))

    def request(self, auth: AuthResult, message: Message) -> None:
        topic = parse(message.topic)
        if auth.tenant_id is None:  # a broker without a database has no jobs service
            return
        self.stats["requests"] += 1
        if topic is None:  # in the jobs namespace, but no API's topic (AWS's InvalidTopic)
            error = ex.JobError(ex.INVALID_TOPIC, "Request topic maps to no jobs API")
            token = _token_of(message.payload)
            self._reject(auth.tenant, f"{message.topic}/{REJECTED}", error, token)
            return
        requester = (auth.tenant, message.publisher)
        try:
            request = ex.parse_request(message.payload)
        except ex.JobError as error:
            self._reject(auth.tenant, topic.reply_topic(REJECTED), error, error.client_token)
            return
        if self.in_flight[requester] >= MAX_IN_FLIGHT:
            error = ex.JobError(ex.REQUEST_THROTTLED, "Too many requests in flight")
            self._reject(auth.tenant, topic.reply_topic(REJECTED), error, request.client_token)
            return
        self.in_flight[requester] += 1
        op = JobRequest(auth.tenant, auth.tenant_id, topic, request, requester)
        key = (auth.tenant, topic.thing)
        queue = self.queues.get(key)
        if queue is not None:  # the thing's earlier requests are being served: after them
            queue.append(op)
            return
        self.queues[key] = deque([op])
        task = asyncio.get_running_loop().create_task(self._serve(key), name="jobs")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _serve(self, key: tuple[str, str]) -> None:
        queue = self.queues[key]
        try:
            while queue:
                op = queue[0]
                async with self.lanes:
                    now = int(time.time())
                    try:
                        await self.store.perform(op, now)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:  # the store failed: AWS's InternalError
                        log.warning("jobs request on %s failed: %s", op.topic.request_topic, exc)
                        op.error = ex.JobError(ex.INTERNAL_ERROR, "Internal error")
                queue.popleft()
                self._done(op, now)
        finally:
            self.queues.pop(key, None)

    def _done(self, op: JobRequest, now: int) -> None:
        count = self.in_flight.get(op.requester, 0)
        if count <= 1:
            self.in_flight.pop(op.requester, None)
        else:
            self.in_flight[op.requester] = count - 1
        try:
            if op.error is not None:
                token = op.request.client_token
                self._reject(op.tenant, op.topic.reply_topic(REJECTED), op.error, token, now)
                return
            self._publish(op.tenant, op.topic.reply_topic(ACCEPTED), op.accepted or {})
            for topic, body in op.notifications:
                self._publish(op.tenant, topic, body)
        except Exception:  # one reply must not stop the others
            log.exception("jobs reply failed for %s", op.topic.request_topic)

    def _reject(
        self, tenant: str, topic: str, error: ex.JobError, token: str | None, now: int | None = None
    ) -> None:
        self.stats["rejected"] += 1
        stamp = now if now is not None else int(time.time())
        self._publish(tenant, topic, ex.error_document(error, stamp, token))

    def _publish(self, tenant: str, topic: str, body: Any) -> None:
        if self.links is not None:
            body = self.links.fill_reply(tenant, body)
        payload = body.encode() if isinstance(body, str) else ex.dumps(body)
        message = Message(topic, payload, 1, False, {}, None, PUBLISHER, tenant)
        published = self.broker.publish(message)
        journey = self.broker.journey
        if journey is not None:
            journey.published(message, None, published)

    def publish_announced(self, tenant: str, replies: list) -> None:
        """Publish the notifications of a change the control plane made (`announcements`)."""
        for topic, body in replies:
            self._publish(tenant, topic, body)

    async def stop(self) -> None:
        """Finish the requests taken (their clients are owed an answer), briefly."""
        for task in list(self.tasks):
            try:
                await asyncio.wait_for(asyncio.shield(task), 5)
            except TimeoutError:
                await cancel_and_wait(task)
