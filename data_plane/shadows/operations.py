"""One shadow request on its way through the service: who asked what of which shadow, and,
once its batch is done, what came of it. `perform` is the part both stores share: AWS's
semantics (`common.shadow.document`) applied to the shadow as its store holds it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.shadow import document as doc
from common.shadow.topics import DELETE, GET, UPDATE, ShadowTopic


@dataclass(slots=True, eq=False)
class Operation:
    tenant: str
    tenant_id: int | None  # the tenant's row (Postgres); None for a broker without a database
    topic: ShadowTopic
    request: doc.Request
    actor: str  # the client id that asked (or `api:…` for a REST change being published)
    device: str  # the device that asked ("" for the REST API)
    max_size: int
    size: int  # bytes of the request's payload (metering)
    # The tenant's `max_shadows` (shadows it may keep; None: no limit) and
    # `max_shadow_versions` (past versions kept per shadow; None: all, until their days are up).
    max_shadows: int | None = None
    max_versions: int | None = None
    # What came of it (one of them), set by the store:
    outcome: doc.Outcome | None = None  # an accepted update
    shadow: doc.Shadow | None = None  # a get's answer
    deleted: int | None = None  # an accepted delete: the version the shadow had
    error: doc.ShadowError | None = None
    requester: Any = None  # whom the in-flight count is held for (the service's key)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tenant, self.topic.thing, self.topic.shadow)

    @property
    def writes(self) -> bool:
        return self.topic.operation != GET


def perform(op: Operation, current: doc.Shadow, now: int) -> doc.Shadow | None:
    """Apply `op` to `current` (left unchanged) and record what came of it; the shadow as it
    is now when it changed, else None."""
    topic, request = op.topic, op.request
    try:
        if topic.operation == GET:
            if not current.present:
                raise doc.not_found(topic.thing, topic.shadow, request.client_token)
            op.shadow = current
            return None
        if topic.operation == UPDATE:
            op.outcome = doc.update(current, request, now, op.max_size)
            return op.outcome.after
        if topic.operation == DELETE:
            after = doc.delete(current, request, topic.thing, topic.shadow, now)
            op.deleted = current.version
            return after
    except doc.ShadowError as error:
        op.error = error
    return None


def thing_not_found(op: Operation) -> None:
    op.error = doc.thing_not_found(op.request.client_token)


def shadow_limit(op: Operation) -> None:
    op.error = doc.shadow_limit(op.max_shadows or 0, op.request.client_token)


def makes_shadow(op: Operation, current: doc.Shadow | None) -> bool:
    """Whether `op` would bring a shadow into being (an update of one not present), which the
    tenant's `max_shadows` may refuse."""
    return (
        op.max_shadows is not None
        and op.topic.operation == UPDATE
        and (current is None or not current.present)
    )


def reset(op: Operation) -> None:
    """Forget what came of `op` (its transaction failed: none of it took effect)."""
    op.outcome = op.shadow = op.deleted = op.error = None


def failed_alone(op: Operation) -> None:
    """The store failed `op` on its own: AWS's 500."""
    op.error = doc.internal_failure(op.request.client_token)
