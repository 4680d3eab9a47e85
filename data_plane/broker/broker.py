"""The broker: sessions by (tenant, client id), routing of publishes, subscriptions, retained
messages, wills, and what the control plane may do to live connections.

Connections (data_plane.broker.connection) turn packets into calls on this object; it never
touches sockets itself. Storage and the cluster plug in through the `Ports` given at
construction (data_plane.broker.ports).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from common.mqtt.packets import Connect, Subscription
from common.mqtt.reason_codes import ReasonCode
from common.mqtt.topics import parse_replay, routed_filter
from data_plane.broker import replay, wills
from data_plane.broker.accounting import Accounts
from data_plane.broker.auth import Authenticator, AuthResult
from data_plane.broker.doorway import Doorway
from data_plane.broker.enhanced_auth import Method, ScramSha256
from data_plane.broker.fair_share import Shares
from data_plane.broker.groups import GroupQueues, member_copy
from data_plane.broker.hooks import Hooks
from data_plane.broker.limits import NEVER_EXPIRES
from data_plane.broker.message import Message
from data_plane.broker.ports import NO_PORTS, NOTHING, REACHED_ONE, Client, Commit, Ports, Published
from data_plane.broker.resends import ResendMemory
from data_plane.broker.retained import RetainedStore
from data_plane.broker.router import Router, SharedGroup, Subscriber
from data_plane.broker.session import Delivery, Session, SubscriptionState
from data_plane.broker.stats import Redirect, TenantStats
from data_plane.broker.sys_topics import publish_sys
from data_plane.broker.turns import TenantTurns
from data_plane.config import BrokerConfig

log = logging.getLogger(__name__)


class Broker:
    def __init__(
        self, config: BrokerConfig, authenticator: Authenticator, ports: Ports = NO_PORTS
    ) -> None:
        self.config = config
        self.authenticator = authenticator
        # A cluster's route table follows the router's routes (ports.Cluster.route_changed).
        self.router = Router(ports.cluster.route_changed if ports.cluster is not None else None)
        self.retained = RetainedStore()
        self.hooks = Hooks()
        # Callables yielding extra Prometheus metric families (storage, archive, ...).
        self.metric_sources: list[Any] = []
        self.sessions: dict[tuple[str, str], Session] = {}
        # tenant -> client ids of sessions outliving their connection (max_persistent_sessions)
        self.persistent: dict[str, set[str]] = defaultdict(set)
        self.connections: set[Client] = set()
        # Every count and billable unit per tenant is written by `accounts` (accounting);
        # `stats` is what it writes, for readers ($SYS, metrics, the usage meter).
        self.accounts = Accounts(self.hooks)
        self.stats: dict[str, TenantStats] = self.accounts.stats
        self.started = time.time()
        # Enhanced authentication methods by name (enhanced_auth); SCRAM where verifiers exist.
        self.enhanced_auth: dict[str, Method] = {}
        if hasattr(authenticator, "scram_lookup"):
            self.enhanced_auth[ScramSha256.name] = ScramSha256(authenticator.scram_lookup)
        # (connect, auth_result) -> Redirect | None: the `client.redirect` hooks, or `evacuate`'s.
        self.redirect: Callable[[Connect, AuthResult], Redirect | None] | None = self.hooks.redirect
        self.shares = Shares(config.rate_patience)  # tenants' publish rates, shared fairly
        self.resends = ResendMemory()  # closed connections' last QoS 1 publishes
        self.doorway = Doorway(config.preauth_per_source)  # sockets before authentication
        self.turns = TenantTurns()  # each tenant's share of a loop turn
        # What it is plugged into, for its life (ports.Ports); None: memory only, one node.
        self.persistence = ports.persistence
        self.retained_storage, self.delayed_storage = ports.retained_storage, ports.delayed_storage
        self.cluster = ports.cluster  # the other nodes; None: the only one (see `publish`)
        self.archive = ports.archive  # records each routed message; None: no archive
        self.journey = ports.journey  # each publish's outcome (its connection records it)
        self.shadows = ports.shadows  # serves `$aws/things/…/shadow/…` requests; None: refused
        # Shared groups keep their messages while they have no member (groups.py).
        self.groups = GroupQueues(
            self.router, ports, self.settled, self._dropped, self.quota_exceeded
        )
        self.hooks.add("client.connected", lambda conn: self.groups.online(conn.session))
        # `$replay/{from}/{filter}` (replay.py): reads from history are billed, as deliveries
        self.replays = replay.Replays(ports, self.hooks, self.accounts.read_back, self.settled)

    # -- sessions -----------------------------------------------------------------------

    def open_session(
        self,
        conn: Client,
        tenant: str,
        client_id: str,
        device: str,
        clean_start: bool,
        expiry_interval: int,
        max_queued: int,
        tenant_id: int | None = None,
    ) -> tuple[Session, bool]:
        """Attach `conn` to its session, taking it over from an older connection."""
        key = (tenant, client_id)
        existing = self.sessions.get(key)
        if existing is not None:
            old = existing.connection
            if old is not None and old is not conn:
                old.taken_over()
            if existing.expiry_handle:
                existing.expiry_handle.cancel()
                existing.expiry_handle = None
            if existing.will_handle:  # reconnected within the will delay: no will
                existing.will_handle.cancel()
                existing.will_handle = None
                if clean_start and existing.will is not None:
                    self.publish_will(existing, existing.will)  # the session ends: it goes now
            existing.will = existing.will_due = None
        if existing is not None and clean_start:
            self._end_session(existing)
            existing = None
        present = existing is not None
        session = existing or Session(tenant, client_id, device, max_queued=max_queued)
        session.device = device
        session.max_queued = max_queued
        session.expiry_interval = expiry_interval
        session.connection = conn
        session.stalled = False
        self.adopt(session)
        session.tenant_id = tenant_id
        if self.persistence is not None:
            self.persistence.attach(session)
        self.keep(session)
        return session, present

    def keep(self, session: Session) -> None:
        """`session` (opened, or restored from storage) is this node's from now on."""
        self.sessions[session.key] = session
        self.track_persistent(session)

    def let_go(self, session: Session) -> None:
        """`session` leaves this node's memory without ending: out of its routes and maps,
        nothing written (it continues at another node, which holds it from the database)."""
        self._unroute(session)
        self._forget(session)

    def track_persistent(self, session: Session) -> None:
        """Count the session under max_persistent_sessions while it outlives its connection."""
        ids = self.persistent[session.tenant]
        if session.expiry_interval and self.sessions.get(session.key) is session:
            ids.add(session.client_id)
        else:
            ids.discard(session.client_id)

    def persistent_count(self, tenant: str) -> int:
        return len(self.persistent.get(tenant, ()))

    def adopt(self, session: Session) -> None:
        """Wire a session to this broker's accounting (drops, sends): every session, whether
        opened by a client or restored from storage."""
        session.on_drop = self._dropped
        session.on_sent = self.accounts.delivered  # (and the `message.delivered` hook)
        self.hooks.run("session.adopted", session)  # e.g. the cluster's move window

    def expire_later(self, session: Session, delay: float) -> None:
        """End `session` in `delay` seconds unless a client resumes it first."""
        session.expiry_handle = asyncio.get_running_loop().call_later(delay, self._expire, session)

    def detach(self, session: Session, conn: Client) -> None:
        """The connection is gone; the session ends now or expires later."""
        if session.connection is not conn:
            return  # taken over: the new connection owns it
        session.connection = None
        session.release_publishers()
        if session.expiry_interval == 0:
            self._end_session(session)
            return
        if session.persist is not None:
            self.persistence.save_later(session, disconnected=True)  # type: ignore[union-attr]  # persist is set by it
        if session.expiry_interval != NEVER_EXPIRES:
            self.expire_later(session, session.expiry_interval)

    def _expire(self, session: Session) -> None:
        if session.connection is None and self.sessions.get(session.key) is session:
            self._end_session(session)
            self.hooks.run("session.expired", session)

    def _end_session(self, session: Session) -> None:
        if self.persistence is not None and session.tenant_id is not None:
            self.persistence.forget(session)
        session.persist = None
        orphans = session.undelivered_shared()
        self._unroute(session)
        session.subscriptions.clear()
        session.clear_delivery_state()
        self.groups.orphaned(orphans)  # unacknowledged shared messages: another member's
        self._forget(session)

    def _unroute(self, session: Session) -> None:
        """`session`'s subscriptions out of this node's routes (the session keeps them)."""
        for state in list(session.subscriptions.values()):
            group, topic_filter = routed_filter(state.topic_filter)
            self.router.for_tenant(session.tenant).unsubscribe(topic_filter, session, group)
            if group is not None:
                self.groups.left(session.tenant, topic_filter, group)

    def _forget(self, session: Session) -> None:
        if self.sessions.get(session.key) is session:
            del self.sessions[session.key]
            self.persistent[session.tenant].discard(session.client_id)

    # -- publish ------------------------------------------------------------------------

    def publish(self, message: Message) -> Published:
        """Route a message within its tenant; returns what happened: how many sessions it
        reached, the commits of its durable copies (what a QoS 1/2 acknowledgement awaits) and
        the sessions it backed up (whose publisher should slow down)."""
        billed = self.accounts.received(message)  # counted, and billed unless system traffic
        if self.hooks.has("message.publish"):
            filtered = self.hooks.filter_publish(message)
            if filtered is None:
                return NOTHING
            message = filtered
        if self.archive is not None:  # after the hooks: what is really routed
            self.archive.record(message)
        if message.retain:
            if billed:  # after the hooks, as routed
                self.accounts.retained(message)
            self.retained.set(message)
            if self.retained_storage is not None:
                self.retained_storage.retained_changed(message)
        if self.cluster is not None:  # the cluster routes it here (`route`) and to other nodes
            return self.cluster.publish(message)
        return self.route(message)

    def route(
        self, message: Message, serve: Callable[[SharedGroup], bool] | None = None
    ) -> Published:
        """Deliver a message to this process's matching sessions (a message another node
        forwarded comes in here: it was counted, filtered and retained where it was published).
        `serve(group)`: whether this process serves that shared group for this message (in a
        cluster one node per group does); None: every group."""
        subscribers, groups = self.router.match(message.tenant, message.topic)
        if serve is not None and groups:
            groups = [group for group in groups if serve(group)]
        if not subscribers and not groups:
            return NOTHING
        if len(subscribers) == 1 and not groups:
            sub = subscribers[0]
            if sub.no_local and sub.session.client_id == message.publisher:
                return NOTHING
            session = sub.session
            delivery = Delivery(
                message,
                min(message.qos, sub.qos),
                message.retain and sub.retain_as_published,
                (sub.subscription_id,) if sub.subscription_id else (),
            )
            commit = session.deliver(delivery)
            if session.queue and session.backs_up(delivery):  # cheap one first
                return Published(1, [commit] if commit is not None else (), (session,))
            # Offline: kept for later (QoS 0: dropped). A cluster's relay is no Session: no client.
            if type(session) is Session and session.connection is None:
                return Published(1, [commit] if commit is not None else (), (), 1)
            return REACHED_ONE if commit is None else Published(1, [commit])
        # Overlapping subscriptions of one session: one copy, the highest QoS, every id.
        targets: dict[int, list[Subscriber]] = {}
        for sub in subscribers:
            if sub.no_local and sub.session.client_id == message.publisher:
                continue
            targets.setdefault(id(sub.session), []).append(sub)
        commits: list[Commit] = []
        backed_up: list[Session] = []
        queued = 0  # copies kept for clients not online (the journey's `queued`)
        for group in groups:
            member = group.pick()
            if member is not None:
                self._hand(member.session, member_copy(message, group, member), commits, backed_up)
            elif group.holder is not None:  # kept for the next member (groups.py)
                commit = group.holder.hold(message)
                if commit is not None:
                    commits.append(commit)
                queued += 1
        for subs in targets.values():
            qos = min(message.qos, max(s.qos for s in subs))
            retain = message.retain and any(s.retain_as_published for s in subs)
            ids = tuple(s.subscription_id for s in subs if s.subscription_id)
            self._hand(subs[0].session, Delivery(message, qos, retain, ids), commits, backed_up)
            queued += type(subs[0].session) is Session and subs[0].session.connection is None
        return Published(len(targets) + len(groups), commits, tuple(backed_up), queued)

    @staticmethod
    def _hand(
        session: Session, delivery: Delivery, commits: list[Commit], backed_up: list[Session]
    ) -> None:
        """Deliver; note the commit of its durable copy, and the session if it backed up."""
        commit = session.deliver(delivery)
        if commit is not None:
            commits.append(commit)
        if session.queue and session.backs_up(delivery):  # cheap one first
            backed_up.append(session)

    def settled(self, session: Session, delivery: Delivery) -> None:
        """A delivery the client acknowledged (or that was dropped): its durable copy goes."""
        if delivery.seq is not None and self.persistence is not None:
            self.persistence.settled(session, delivery)
        group = delivery.group
        if group is not None and group.holder is not None and group.holder.lent:
            group.holder.acked(delivery)  # a held message it drained goes too

    def _dropped(self, session: Session, delivery: Delivery, cause: str) -> None:
        group = delivery.group  # a full queue gives a group's lent copy back (else it is lost)
        holder = group.holder if group is not None and cause == "queue_full" else None
        if holder is not None and holder.returned(delivery):
            self.settled(session, delivery)  # the member's durable copy goes, not the held one
            return
        self.settled(session, delivery)
        self.accounts.dropped(session.tenant)
        if self.hooks.has("message.dropped"):
            self.hooks.run("message.dropped", session, delivery, cause)

    # -- subscriptions ------------------------------------------------------------------

    def subscribe(self, session: Session, sub: Subscription, subscription_id: int | None) -> None:
        existed = sub.topic_filter in session.subscriptions
        start, inner = parse_replay(sub.topic_filter, time.time())
        end = replay.cut() if start is not None else 0  # then routed at once (replay.py)
        group, topic_filter = self.restore_subscription(session, sub, subscription_id)
        self.hooks.run("session.subscribed", session, sub)
        ids = (subscription_id,) if subscription_id else ()
        if start is not None:  # the archive from `start`, then live (no retained: it is there)
            self.replays.start(session, replay.Ask(inner, start, end, sub.qos, ids, sub.no_local))
            return
        # Retained messages: never for shared subscriptions; with handling 1 only when new.
        if group is None and (
            sub.retain_handling == 0 or (sub.retain_handling == 1 and not existed)
        ):
            for message in self.retained.match(session.tenant, topic_filter):
                session.deliver(Delivery(message, min(message.qos, sub.qos), True, ids))

    def restore_subscription(
        self, session: Session, sub: Subscription, subscription_id: int | None
    ) -> tuple[str | None, str]:
        """Route a subscription (also one brought back from storage: no retained resent, no
        replay: a `$replay/…` one comes back live)."""
        group, topic_filter = routed_filter(sub.topic_filter)
        self.router.for_tenant(session.tenant).subscribe(
            topic_filter,
            Subscriber(session, sub.qos, sub.no_local, sub.retain_as_published, subscription_id),
            group,
        )
        session.subscriptions[sub.topic_filter] = SubscriptionState(
            sub.topic_filter,
            sub.qos,
            sub.no_local,
            sub.retain_as_published,
            sub.retain_handling,
            subscription_id,
        )
        if group is not None:
            self.groups.joined(session, topic_filter, group)
        return group, topic_filter

    def unsubscribe(self, session: Session, topic_filter: str) -> bool:
        if session.subscriptions.pop(topic_filter, None) is None:
            return False
        group, inner = routed_filter(topic_filter)
        self.router.for_tenant(session.tenant).unsubscribe(inner, session, group)
        if group is not None:
            self.groups.left(session.tenant, inner, group)
        self.hooks.run("session.unsubscribed", session, topic_filter)
        return True

    # -- wills --------------------------------------------------------------------------

    def schedule_will(self, session: Session | None, will: Message, delay: float) -> None:
        """Publish `will` now, or after its delay (capped by the session's expiry) unless the
        client resumes the session first (`wills.schedule`)."""
        wills.schedule(self, session, will, delay)

    def publish_will(self, session: Session | None, will: Message) -> Published:
        """A will goes out under the checks of any PUBLISH, as they stand now (`wills.go_out`)."""
        return wills.go_out(self, session, will)

    # -- control-plane actions (data_plane.tenancy.control.LiveConnections) -------------

    def tenants(self) -> list[str]:
        return sorted({conn.tenant for conn in self.connections if conn.tenant})

    def disconnect_device(self, tenant: str, device: str, reason_code: int) -> int:
        doomed = [c for c in self.connections if c.tenant == tenant and c.device == device]
        for conn in doomed:
            conn.disconnect(reason_code)
        return len(doomed)

    def disconnect_tenant(self, tenant: str, reason_code: int) -> int:
        doomed = [c for c in self.connections if c.tenant == tenant]
        for conn in doomed:
            conn.disconnect(reason_code)
        return len(doomed)

    def apply_policy(self, tenant: str, policy: Any) -> None:
        for conn in self.connections:
            if conn.tenant == tenant:
                conn.apply_policy(policy)

    def forget_group(self, tenant: str, group: str, topic_filter: str) -> bool:
        """The tenant deleted a durable shared group: what this node holds of it goes."""
        return self.groups.delete(tenant, group, topic_filter)

    def delay(self, message: Message, seconds: int) -> Commit | None:
        """`$delayed/{seconds}/{topic}`: publish later (durably when storage is configured)."""
        if self.delayed_storage is not None:
            return self.delayed_storage.schedule(message, seconds)
        asyncio.get_running_loop().call_later(seconds, self.publish, message)
        return None

    def quota_exceeded(self, tenant: str, key: str, *, throttled: bool = False) -> None:
        """Count a refusal (`throttled`: a slowdown, nothing refused) for the tenant's $SYS
        and let observers meter it (`quota.exceeded` / `quota.throttled`)."""
        self.accounts.quota_exceeded(tenant, key, throttled=throttled)

    def connection_count(self, tenant: str) -> int:
        return self.accounts.connections(tenant)

    def assign_client_id(self) -> str:
        return f"auto-{uuid.uuid4().hex}"

    # -- $SYS ---------------------------------------------------------------------------

    def publish_sys(self) -> None:
        """Each tenant's own figures under its own `$SYS/broker/...`, retained."""
        publish_sys(self)

    def shutdown_connections(self) -> None:
        if self.config.server_reference:
            self.evacuate(Redirect(self.config.server_reference))
            return
        for conn in list(self.connections):
            conn.disconnect(ReasonCode.SERVER_SHUTTING_DOWN)

    def evacuate(self, redirect: Redirect) -> None:
        """Send every client elsewhere (MQTT 5.0 §4.11), live ones and those still to come:
        5.0 clients get DISCONNECT 0x9C/0x9D with the Server Reference, 3.1.1 ones are closed."""
        self.redirect = lambda connect, result: redirect
        for conn in list(self.connections):
            if conn.session is not None:
                conn.disconnect(redirect.reason_code, reference=redirect.reference)
