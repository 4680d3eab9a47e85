"""Joins the broker to the control plane: the tenant directory, kept fresh by the NOTIFY listener,
and the consequences of each change for live connections.

The broker hands in a `LiveConnections` (what it can do to connected clients); each change
notification invalidates the matching cache entries, then, where the change takes a right away,
ends the connections concerned with 0x98 (Administrative action) or re-applies the tenant policy.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from common.contracts.notifications import CREDENTIAL_CHANGES, DEVICE_REVOKING, ChangeKind
from common.mqtt.reason_codes import ReasonCode
from data_plane.tenancy import service_identity
from data_plane.tenancy.credential_watch import CredentialWatch
from data_plane.tenancy.directory import TenantDirectory
from data_plane.tenancy.identity import IdentityStore, TrustAnchors, end_connections
from data_plane.tenancy.identity_expiry import IdentityExpiry
from data_plane.tenancy.notifications import Change, ConfigListener
from data_plane.tenancy.retained_forget import forget_retained
from data_plane.tenancy.store import TenantPolicy, TenantStore

log = logging.getLogger(__name__)


class LiveConnections(Protocol):
    def disconnect_device(self, tenant: str, device: str, reason_code: int) -> int: ...

    def disconnect_tenant(self, tenant: str, reason_code: int) -> int: ...

    def apply_policy(self, tenant: str, policy: TenantPolicy) -> None: ...

    def forget_group(self, tenant: str, group: str, topic_filter: str) -> bool: ...


class ControlPlaneLink:
    """The broker's database connections come in two pools, so one kind of load cannot starve
    the other: `lookups` answers the tenant directory (what CONNECT floods drive, even from
    strangers), `pool` carries the durable writes (sessions, queues, retained, usage). Both wait
    for a free connection (back-pressure) up to `timeout` before a write is refused."""

    def __init__(
        self,
        dsn: str,
        *,
        pool_size: int | None = None,
        lookup_pool_size: int | None = None,
        timeout: float | None = None,
    ) -> None:
        self.dsn = dsn
        pool_size = pool_size or int(os.environ.get("MQTT_DB_POOL_SIZE", "16"))
        lookup_pool_size = lookup_pool_size or int(os.environ.get("MQTT_DB_LOOKUP_POOL_SIZE", "4"))
        timeout = timeout or float(os.environ.get("MQTT_DB_POOL_TIMEOUT", "5"))
        # `check`: after a database restart, dead connections are replaced before use; the
        # `timeout` bounds the wait, so writes fail clearly while the database is away.
        self.pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=timeout,
            check=AsyncConnectionPool.check_connection,
        )
        self.lookups = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=lookup_pool_size,
            open=False,
            timeout=timeout,
            check=AsyncConnectionPool.check_connection,
        )
        # Presence (the portal's online state) writes on a connection of its own: on the shared
        # `pool` it queued behind a disconnect storm's session deletes, one transaction per
        # session, and fell seconds behind (bench/presence.py, bench/RESULTS.md).
        self.presence_pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=1,
            open=False,
            timeout=timeout,
            check=AsyncConnectionPool.check_connection,
        )
        self.directory = TenantDirectory(
            TenantStore(self.lookups), service_key=service_identity.load_key()
        )
        self.identities = IdentityStore(self.lookups)
        self.trust_anchors = TrustAnchors(self.identities)
        self.listener = ConfigListener(dsn, self.on_change)
        # Others that follow the same changes (the archive's decisions), after the link's own.
        self.followers: list[Callable[[Change], Awaitable[None]]] = []
        self.live: LiveConnections | None = None
        self.watch: CredentialWatch | None = None
        self.expiry: IdentityExpiry | None = None

    def attach(self, broker) -> None:
        """Act on live connections of `broker`, each tied to the secret it authenticated with."""
        self.live = broker
        self.watch = CredentialWatch(broker, self.directory)
        self.expiry = IdentityExpiry(broker)  # certificates that expire while connected

    async def start(self, live: LiveConnections | None = None) -> None:
        if live is not None:
            self.attach(live)
        await self.pool.open(wait=True, timeout=30)
        await self.lookups.open(wait=True, timeout=30)
        await self.presence_pool.open(wait=True, timeout=30)
        self.listener.start()

    async def stop(self) -> None:
        await self.listener.stop()
        await self.pool.close()
        await self.lookups.close()
        await self.presence_pool.close()

    async def on_change(self, change: Change) -> None:
        try:
            await self._apply(change)
        finally:
            for follower in self.followers:
                try:
                    await follower(change)
                except Exception:  # one follower's failure must not stop the others
                    log.exception("change follower failed for %r", change)

    async def _apply(self, change: Change) -> None:
        kind = str(change.get("kind", ""))
        if kind.startswith("history."):
            return  # what the archive keeps: its followers' business, not the connections'

        tenant = str(change.get("tenant", ""))
        device = change.get("device")
        if kind.startswith("identity."):
            await self._identity_changed(kind, change.get("ids") or [])
            return
        if kind == ChangeKind.RELOAD:
            self.identities.forget()
            self.directory.forget_all()
            await self.trust_anchors.reload()  # CAs registered while notifications were lost
            await self._reapply_all()
            return
        if not tenant:
            return
        if kind == ChangeKind.RETAINED_DELETED:
            if self.live is not None:
                topic_filter = str(change.get("filter") or "")
                forgotten = forget_retained(self.live, tenant, topic_filter)
                log.info("retained %s %r: forgot %d message(s)", tenant, topic_filter, forgotten)
            return
        if kind == ChangeKind.SHARED_GROUP_DELETED:
            if self.live is not None:
                group, topic_filter = str(change.get("group", "")), str(change.get("filter", ""))
                held = self.live.forget_group(tenant, group, topic_filter)
                log.info(
                    "shared group %s %r %r deleted (held here: %s)",
                    tenant,
                    group,
                    topic_filter,
                    held,
                )
            return
        if kind.startswith("device.") or kind.startswith("credential."):
            if isinstance(device, str):
                self.directory.forget_device(tenant, device)
                if self.live and kind in CREDENTIAL_CHANGES:
                    if self.watch is not None:
                        await self.watch.recheck(tenant, device)
                    else:  # no per-connection view: the safe side
                        self.live.disconnect_device(
                            tenant, device, ReasonCode.ADMINISTRATIVE_ACTION
                        )
                elif self.live and kind in DEVICE_REVOKING:
                    closed = self.live.disconnect_device(
                        tenant, device, ReasonCode.ADMINISTRATIVE_ACTION
                    )
                    log.info("%s %s/%s: closed %d connection(s)", kind, tenant, device, closed)
            return
        # tenant.status, tenant.quota, tenant.settings, acl.changed: the tenant's policy changed.
        self.directory.forget_tenant(tenant)
        policy = await self.directory.policy(tenant)
        if self.live is None:
            return
        if policy is None or not policy.active:
            closed = self.live.disconnect_tenant(tenant, ReasonCode.ADMINISTRATIVE_ACTION)
            log.info("tenant %s suspended or gone: closed %d connection(s)", tenant, closed)
        else:
            self.live.apply_policy(tenant, policy)

    async def _identity_changed(self, kind: str, ids: list) -> None:
        """A CA, device certificate or JWT key registered or revoked: forget the cached tables;
        a new certificate becomes a TLS anchor; a revoked one ends what it admitted."""
        self.identities.forget()
        what, _, event = kind.removeprefix("identity.").rpartition("_")
        label = {"ca": "ca", "cert": "cert", "jwt_key": "jwt"}.get(what)
        if label is None:
            return
        numbers = [int(i) for i in ids if isinstance(i, int)]
        if event == "added" and label in ("ca", "cert"):
            await self.trust_anchors.added(label, numbers)
        elif event == "revoked" and self.live is not None:
            for number in numbers:
                closed = end_connections(
                    self.live, f"{label}:{number}", ReasonCode.ADMINISTRATIVE_ACTION
                )
                log.info("%s %s: closed %d connection(s)", kind, number, closed)

    async def _reapply_all(self) -> None:
        """After a lost notification connection: anything may have changed while away."""
        if self.live is None:
            return
        for tenant in list(getattr(self.live, "tenants", lambda: [])()):
            policy = await self.directory.policy(tenant)
            if policy is None or not policy.active:
                self.live.disconnect_tenant(tenant, ReasonCode.ADMINISTRATIVE_ACTION)
            else:
                self.live.apply_policy(tenant, policy)
