"""Whether a will may go out: the checks of any PUBLISH, as they stand when it goes (the ACL or
the retained quota may have changed since the CONNECT that carried it). A pure decision, like
admission's; `go_out` applies it for `Broker.publish_will`."""

from __future__ import annotations

import asyncio
import time
from typing import Any, NamedTuple, Protocol

from common.mqtt.reason_codes import ReasonCode
from data_plane.broker import refused
from data_plane.broker.accounting import Accounts
from data_plane.broker.hooks import Hooks
from data_plane.broker.limits import NEVER_EXPIRES, too_deep
from data_plane.broker.message import Message
from data_plane.broker.ports import NOTHING, Published
from data_plane.broker.retained import RetainedStore
from data_plane.broker.session import Session


class WillBroker(Protocol):
    """What a will going out asks of the broker (`broker.Broker`)."""

    @property
    def retained(self) -> RetainedStore: ...
    @property
    def hooks(self) -> Hooks: ...
    @property
    def accounts(self) -> Accounts: ...

    def publish(self, message: Message) -> Published: ...

    def quota_exceeded(self, tenant: str, key: str, *, throttled: bool = False) -> None: ...


class WillRefused(NamedTuple):
    kind: str  # a `refused` kind: acl_denied, quota_exceeded
    reason_code: int
    reason: str


def refusal(will: Message, session: Session | None, retained: RetainedStore) -> WillRefused | None:
    """Why `will` may not go out, or None: never on the broker's `$` topics, within the
    device's ACL and the tenant's retained quota."""
    if will.topic[:1] == "$" or too_deep(will.topic):
        reason = f"will {will.topic[:256]!r} not allowed (a `$` topic, or too deep)"
        return WillRefused("acl_denied", ReasonCode.NOT_AUTHORIZED, reason)
    acl = session.acl if session is not None else None
    if acl is not None and not acl.can_publish(will.topic):
        reason = f"will {will.topic[:256]!r} not authorized"
        return WillRefused("acl_denied", ReasonCode.NOT_AUTHORIZED, reason)
    quota = session.quota if session is not None else None
    limit = quota.get("max_retained_messages") if quota and will.retain and will.payload else None
    if (
        limit is not None
        and retained.count(will.tenant) >= limit
        and not retained.has(will.tenant, will.topic)
    ):
        return WillRefused("quota_exceeded", ReasonCode.QUOTA_EXCEEDED, "retained")
    return None


def go_out(broker: WillBroker, session: Session | None, will: Message) -> Published:
    """Publish `will` if it may go (the `session.will` hook hears of it), else count and tell
    the refusal like any other; returns the `Published`."""
    refusal_ = refusal(will, session, broker.retained)
    if refusal_ is None:
        published = broker.publish(will)
        broker.hooks.run("session.will", session, will, published)
        return published
    if refusal_.kind == "quota_exceeded":
        broker.quota_exceeded(will.tenant, "retained")
    else:
        broker.accounts.denied(will.tenant)
    refused.will(broker, session, will, *refusal_)
    return NOTHING


def schedule(broker: Any, session: Session | None, will: Message, delay: float) -> None:
    """Publish `will` now, or after its delay (capped by the session's expiry) unless the
    client resumes the session first (`Broker.schedule_will`)."""
    if session is not None and session.expiry_interval != NEVER_EXPIRES:
        delay = min(delay, session.expiry_interval)
    if delay <= 0 or session is None:
        if session is not None and session.will is will:
            session.will = session.will_due = None
        broker.publish_will(session, will)
        return
    loop = asyncio.get_running_loop()

    def fire() -> None:
        session.will_handle = None
        if session.will is will:
            session.will = session.will_due = None
            if broker.persistence is not None and session.persist is not None:
                broker.persistence.will_published(session)
        broker.publish_will(session, will)

    session.will = will
    session.will_due = time.monotonic() + delay
    session.will_handle = loop.call_later(delay, fire)
