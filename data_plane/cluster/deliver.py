"""Delivering a message to some sessions only, not routed to every subscriber: a relayed copy
to the one session it names (`sessions`), a dead node's stream to the sessions a survivor
adopted (`inherit`)."""

from __future__ import annotations

from typing import Any

from data_plane.broker.message import Message
from data_plane.broker.ports import Commit
from data_plane.broker.router import Router
from data_plane.broker.session import Delivery


def deliver_to(
    router: Router, message: Message, keys: set[tuple[str, str]], commits: list[Commit]
) -> int:
    """Deliver `message` to the matching subscriptions of the sessions `keys` only (one copy per
    session, the highest QoS, every subscription id); returns how many sessions it reached."""
    subscribers, _groups = router.match(message.tenant, message.topic)
    targets: dict[int, list[Any]] = {}
    for sub in subscribers:
        if sub.session.key in keys:
            targets.setdefault(id(sub.session), []).append(sub)
    for subs in targets.values():
        qos = min(message.qos, max(s.qos for s in subs))
        retain = message.retain and any(s.retain_as_published for s in subs)
        ids = tuple(s.subscription_id for s in subs if s.subscription_id)
        commit = subs[0].session.deliver(Delivery(message, qos, retain, ids))
        if commit is not None:
            commits.append(commit)
    return len(targets)
