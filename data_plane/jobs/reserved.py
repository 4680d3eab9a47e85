"""The broker's one port for AWS's reserved topics (`ports.Shadows`, which admission asks of
every PUBLISH to a `$` topic): a thing's shadow requests go to the shadow service, its jobs
requests to the jobs service, fleet provisioning's (`$aws/certificates/…`,
`$aws/provisioning-templates/…`) to the fleet service; every other `$` topic stays refused.
Keeps the broker core unaware that there are several services behind it.

A request topic longer than AWS allows (256 bytes) is no service's: its reply topics (the request
topic and up to 10 bytes more) must stay writable, and a 65,535-byte one could not be. And a
service that raises on a request (it should not) costs that request alone, logged in one line:
never the requester's connection (0x80) or a traceback per malformed request."""

from __future__ import annotations

import logging
from typing import Protocol

from data_plane.broker.auth import AuthResult
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.broker.ports import Shadows

log = logging.getLogger(__name__)

MAX_TOPIC_BYTES = 256  # AWS IoT's limit on a topic's size (its reserved topics' names fit)


class Service(Shadows, Protocol):
    """A service behind the reserved topics (shadows, jobs, fleet provisioning)."""

    def attach(self, broker: Broker) -> None: ...


class Provisioning(Service, Protocol):
    """Fleet provisioning's service (data_plane.fleet), which says which topics are its own."""

    def owns(self, topic: str) -> bool: ...


def _service_level(topic: str) -> str:
    """`shadow` or `jobs` for `$aws/things/{thing}/{level}/…`, else ""."""
    levels = topic.split("/", 4)
    return levels[3] if len(levels) >= 4 and levels[0] == "$aws" else ""


class ReservedServices:
    def __init__(
        self, shadows: Service, jobs: Service | None = None, fleet: Provisioning | None = None
    ) -> None:
        self.shadows = shadows
        self.jobs = jobs  # None: a broker without a database serves no jobs
        self.fleet = fleet  # … and provisions no devices

    def attach(self, broker: Broker) -> None:
        for service in (self.shadows, self.jobs, self.fleet):
            if service is not None:
                service.attach(broker)

    def _for(self, topic: str) -> Service | None:
        if self.fleet is not None and self.fleet.owns(topic):
            return self.fleet
        level = _service_level(topic)
        if level == "jobs":
            return self.jobs
        return self.shadows if level == "shadow" else None

    def admits(self, auth: AuthResult, topic: str) -> bool:
        if len(topic) > MAX_TOPIC_BYTES or len(topic.encode()) > MAX_TOPIC_BYTES:
            return False
        service = self._for(topic)
        return service is not None and service.admits(auth, topic)

    def request(self, auth: AuthResult, message: Message) -> None:
        service = self._for(message.topic)
        if service is None:
            return
        try:
            service.request(auth, message)
        except Exception as exc:  # a bug's cost is this request, not the connection
            log.error(
                "reserved-topic request of tenant %s on %s failed: %s: %s",
                auth.tenant,
                message.topic[:MAX_TOPIC_BYTES],
                type(exc).__name__,
                exc,
            )
