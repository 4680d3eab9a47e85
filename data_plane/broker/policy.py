"""A connection's rights under its tenant's policy: the rate buckets it shares with the tenant's
other connections, and what its session needs of the ACL and quota. Read at CONNECT and again
whenever the control plane changes the policy (`data_plane.tenancy.control`)."""

from __future__ import annotations

from typing import Any

from data_plane.broker.auth import AuthResult
from data_plane.broker.broker import Broker

RATE_KEYS = ("max_publish_rate", "max_inbound_bytes_rate", "max_outbound_bytes_rate")


def tenant_rates(broker: Broker, tenant: str, quota: dict[str, int]) -> Any | None:
    """The tenant's shared token buckets when its quota limits a rate, else None: looked up
    once per connection and per policy change rather than per PUBLISH. Keyed by the rates
    alone, so that every identity held to them (its devices, its rules' republish: whose
    quotas differ in other keys) shares the one set of buckets."""
    rates = {key: quota[key] for key in RATE_KEYS if quota.get(key)}
    if rates:
        if broker.cluster is not None:  # budgets shared by the nodes (data_plane.cluster.limits)
            return broker.cluster.rates_for(tenant, rates)
        return broker.shares.local_rates(tenant, rates)
    return None


def set_rates(conn: Any) -> None:
    """The connection's rates under its auth's quota: the tenant's share of publishes (the
    fair queue around the tenant's inbound buckets, `fair_share`) and its outbound bucket."""
    quota = conn.auth.quota
    rates = tenant_rates(conn.broker, conn.tenant, quota)
    inbound = rates if rates is not None and rates.limits_inbound else None
    admission, gate = conn.admission, conn.gate
    share, old = conn.broker.shares.share(conn.tenant, inbound, quota), admission.share
    admission.share = share
    conn.outbound_bucket = rates.outbound_bytes if rates is not None else None
    if old is not None and old is not share:
        old.leave(gate)
        if gate.rate:  # a held publish: judged again under the new limits
            gate.wake()


def reapply(auth: AuthResult, policy: Any, tenant: str, device: str) -> None:
    """The connection's AuthResult under the tenant's new policy (quota, QoS 0 setting, ACL)."""
    auth.quota = dict(policy.quota)
    auth.queue_qos0_offline = policy.queue_qos0_offline
    if not getattr(auth.acl, "fixed", False):  # a claim's rights stay as issued (`fleet`)
        auth.acl = policy.authorizer(tenant, device)


def authorize_session(session: Any, auth: Any) -> None:
    """What the session needs of its connection's rights: the read filter for deliveries, and
    the ACL and quota its will is judged by when it goes out."""
    acl = auth.acl
    session.acl = acl
    session.quota = auth.quota
    session.read_filter = acl.can_receive if getattr(acl, "filters_reads", False) else None
    if session.read_filter is not None:
        session.withhold(session.read_filter)


def apply_policy(conn: Any, policy: Any) -> bool:
    """A live connection's rights (and its session's) under the tenant's changed policy; False
    for the platform's own identities, which keep the rights they were issued."""
    auth, session = conn.auth, conn.session
    if auth is None or auth.service:
        return False
    reapply(auth, policy, conn.tenant, conn.device)
    if session is not None:
        session.queue_qos0_offline = policy.queue_qos0_offline
        if session.connection is conn:
            authorize_session(session, auth)
    return True
