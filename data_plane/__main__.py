"""`python -m data_plane`: run a broker process. Prints `LISTENING <name> <host>:<port>` per
listener once bound (port 0 picks a free one), and stops gracefully on SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import resource
import signal
import time

# Before anything loads pyarrow (and numpy with it):
# - Arrow's allocator (mimalloc) gives freed memory back to the system after 10 ms by default,
#   so the archive's and the journey's writers, which build a batch every second or two, faulted
#   their memory in afresh each time (about 1,000 huge-page faults a batch, a fifth of the
#   journey writer's CPU: measured 0.10-0.11 vs 0.08 us a row). Kept for 10 s, longer than any
#   interval between batches, it is reused; an idle broker still gives it back.
# - No BLAS thread pool: the broker does no linear algebra, and OpenBLAS's threads spin at start.
os.environ.setdefault("MIMALLOC_PURGE_DELAY", "10000")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from common.contracts import tables  # noqa: E402  (after the environment above)
from common.runtime import logs
from data_plane.broker.broker import Redirect
from data_plane.broker.ports import Ports
from data_plane.config import BrokerConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m data_plane", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--ws-port", type=int, default=8083)
    parser.add_argument("--tls-port", type=int)
    parser.add_argument("--wss-port", type=int)
    parser.add_argument("--tls-cert", default=os.environ.get("MQTT_TLS_CERT"))
    parser.add_argument("--tls-key", default=os.environ.get("MQTT_TLS_KEY"))
    parser.add_argument(
        "--tls-domain",
        default=os.environ.get("MQTT_TLS_DOMAIN"),
        help="SNI `{tenant}.{domain}` picks a client certificate's tenant (MQTT_TLS_DOMAIN)",
    )
    parser.add_argument("--metrics-port", type=int)
    parser.add_argument("--auth-file", help="static tenants/devices JSON instead of Postgres")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--sys-interval", type=float, default=10.0)
    parser.add_argument("--max-queued", type=int, default=1000)
    parser.add_argument("--usage-flush-interval", type=float, default=10.0)
    parser.add_argument("--usage-segment-age", type=float, default=300.0)
    parser.add_argument(
        "--archive-interval",
        type=float,
        default=1.0,
        help="seconds per archive segment (Parquet): how soon the live rules see a message",
    )
    parser.add_argument("--archive-segment-age", type=float, help=argparse.SUPPRESS)  # v1's
    parser.add_argument(
        "--rules-feed",
        default=os.environ.get("RULES_FEED_URL") or os.environ.get("REDIS_URL"),
        help="Redis the live feed goes to: the rows tenants' rules read, for the live rules job "
        "(default RULES_FEED_URL, then REDIS_URL; unset: the job reads the archive's segments)",
    )
    parser.add_argument(
        "--rules-feed-key",
        default=os.environ.get("RULES_FEED_KEY", "rules:live"),
        help="the live feed's Redis stream (the rules job reads the same RULES_FEED_KEY)",
    )
    parser.add_argument("--no-archive", action="store_true", help="archive nothing")
    parser.add_argument(
        "--no-journey",
        action="store_true",
        help="record no journey (each publish's outcome, each client's events)",
    )
    parser.add_argument(
        "--journey-interval",
        type=float,
        default=2.0,
        help="seconds per journey segment: how soon an outcome can be found through the API",
    )
    parser.add_argument(
        "--no-presence",
        action="store_true",
        help="write no connection presence (the portal's online state): for benchmarks",
    )
    parser.add_argument(
        "--large-payload-threshold",
        type=int,
        default=256 * 1024,
        help="queued payloads above this many bytes go to the object store",
    )
    parser.add_argument(
        "--server-reference",
        default=os.environ.get("MQTT_SERVER_REFERENCE"),
        help="where 5.0 clients should reconnect when this broker shuts down or evacuates "
        "(SIGUSR2): sent with DISCONNECT 0x9C instead of 0x8B",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="join the broker cluster on this Redis (the bus); unset: one process on its own",
    )
    parser.add_argument(
        "--cluster-name",
        default=os.environ.get("CLUSTER_NAME", "default"),
        help="brokers on one Redis with the same name form one cluster",
    )
    parser.add_argument(
        "--cluster-heartbeat",
        type=float,
        default=float(os.environ.get("CLUSTER_HEARTBEAT", "2")),
        help="seconds: a node is known dead at most twice this long after it stopped",
    )
    parser.add_argument(
        "--reuse-port",
        action="store_true",
        help="SO_REUSEPORT: several workers share the listeners' ports (runbroker --workers)",
    )
    parser.add_argument(
        "--no-affinity",
        action="store_true",
        help="with --reuse-port: serve every client on the worker the kernel chose, rather than "
        "handing it to its tenant's home worker",
    )
    parser.add_argument(
        "--worker-slot",
        help="this worker's index among the machine's workers (runbroker --workers sets it): "
        "a restarted worker is home to the same tenants",
    )
    parser.add_argument(
        "--large-tenants",
        default=os.environ.get("MQTT_LARGE_TENANTS"),
        help="tenants spread over K workers rather than one: 'slug=K,slug=K'",
    )
    parser.add_argument(
        "--rate-patience",
        type=float,
        default=float(os.environ.get("MQTT_RATE_PATIENCE", "60")),
        help="seconds a client may stay over its publish rate, slowed, before its MQTT 5 "
        "QoS 1/2 publishes that cannot go at once are refused (0x97)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=float(os.environ.get("MQTT_CONNECT_TIMEOUT", "10")),
        help="seconds from accepting a socket to its CONNACK (WebSocket: upgrade included)",
    )
    parser.add_argument(
        "--preauth-per-source",
        type=int,
        default=int(os.environ.get("MQTT_PREAUTH_PER_SOURCE", "128")),
        help="unauthenticated sockets one address may hold; more are closed at once",
    )
    parser.add_argument("--log-level", default=os.environ.get("LOG_LEVEL", "WARNING"))
    return parser.parse_args(argv)


def raise_open_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def run(args: argparse.Namespace) -> None:
    from data_plane.server import serve

    config = BrokerConfig(
        host=args.host,
        port=args.port,
        ws_port=args.ws_port,
        tls_port=args.tls_port,
        wss_port=args.wss_port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_domain=args.tls_domain,
        metrics_port=args.metrics_port,
        sys_interval=args.sys_interval,
        max_queued_messages=args.max_queued,
        server_reference=args.server_reference,
        reuse_port=args.reuse_port,
        rate_patience=args.rate_patience,
        connect_timeout=args.connect_timeout,
        preauth_per_source=args.preauth_per_source,
    )
    cluster = None
    handover = None
    if args.redis_url:
        from data_plane.cluster import Cluster

        info: dict = {"mqtt_port": args.port}
        if args.reuse_port and not args.no_affinity:  # workers of one machine: tenant-affine
            import uuid

            info["handover"] = f"mqtt-handover-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            info["slot"] = args.worker_slot
        cluster = Cluster(
            args.redis_url,
            name=args.cluster_name,
            heartbeat=args.cluster_heartbeat,
            info=info,
        )
        if "handover" in info:
            from data_plane.broker.handover import Handover, HandoverCounts
            from data_plane.cluster.affinity import Affinity, parse_large

            counts = HandoverCounts()
            affinity = Affinity(cluster, counts, parse_large(args.large_tenants))
            handover = Handover(info["handover"], affinity.home, counts)
    if config.tls_cert and config.tls_port is None:
        config.tls_port = 8883
    link = None
    fleet = None  # fleet provisioning needs the control plane's tables
    from data_plane.shadows.service import ShadowService

    if args.auth_file:
        from data_plane.shadows.store import MemoryShadows
        from data_plane.tenancy.static import StaticAuthenticator

        authenticator = StaticAuthenticator.from_file(args.auth_file)
        shadows = ShadowService(MemoryShadows(authenticator.has_device))
        jobs = None  # jobs need the database
    else:
        from data_plane.tenancy.authenticator import PostgresAuthenticator
        from data_plane.tenancy.control import ControlPlaneLink

        dsn = args.database_url
        if not dsn:
            from common.runtime import embedded

            dsn = embedded.postgres_url()
        link = ControlPlaneLink(dsn)
        authenticator = PostgresAuthenticator(
            link.directory, link.identities, trust_anchors=link.trust_anchors
        )
        from data_plane.shadows.announcements import Announcements
        from data_plane.shadows.store import PostgresShadows

        shadows = ShadowService(PostgresShadows(link.pool))
        shadow_changes = Announcements(dsn, link.pool, shadows)  # the REST API's changes
        from common.jobs.artifacts import ArtifactLinks
        from data_plane.jobs.announcements import JobAnnouncements
        from data_plane.jobs.service import JobService
        from data_plane.jobs.store import PostgresJobs

        # Job documents go out with their artifacts' URLs (S3 presigned, or signed for the web).
        jobs = JobService(PostgresJobs(link.pool), ArtifactLinks.from_env())
        job_changes = JobAnnouncements(dsn, link.pool, jobs)  # jobs created, cancelled, timed out
        from data_plane.fleet.service import FleetService
        from data_plane.fleet.store import FleetStore

        fleet = FleetService(FleetStore(link.pool))  # provisioning by claim: `$aws/certificates/…`
    from data_plane.jobs.reserved import ReservedServices

    # The `$aws/…` requests admission admits: shadows, jobs, fleet provisioning.
    reserved = ReservedServices(shadows, jobs, fleet)
    persistence = None
    kept = None
    prepare = None
    objects = None
    tap = None
    history = None
    journey = None
    ports = Ports(shadows=reserved)
    if link is not None:
        from common.stores.object_store import open_object_store
        from data_plane.storage.persistence import SessionPersistence
        from data_plane.storage.retained_delayed import RetainedAndDelayed
        from data_plane.storage.session_store import SessionStore

        objects = open_object_store()
        await link.start(None)
        store = SessionStore(
            link.pool,
            object_store=objects,
            large_payload_threshold=args.large_payload_threshold,
        )
        store.start()
        # Storage is built first and given to the broker as its ports; `prepare` then fills
        # the broker from it before any client connects.
        persistence = SessionPersistence(store)
        kept = RetainedAndDelayed(link.pool)
        if not args.no_archive:  # the operator's global off
            from data_plane.storage.archive_decision import ArchiveDecisions
            from data_plane.storage.archive_hook import ArchiveTap
            from data_plane.storage.parquet_archive import ParquetArchiveWriter

            feed = None
            if args.rules_feed:
                from data_plane.storage.live_feed import LiveFeed

                feed = LiveFeed(args.rules_feed, key=args.rules_feed_key)
            # What each tenant's history policies and rules need, read before any client
            # connects, then kept by the change notifications: following them first, so that a
            # change announced after the read reaches them, not no one (one committed before the
            # listener listens is read again when it does: it reloads every follower then).
            decisions = ArchiveDecisions(link.lookups, feed=feed)
            link.followers.append(decisions.on_change)
            await decisions.load_all()
            tap = ArchiveTap(
                ParquetArchiveWriter(objects, feed=feed),
                decisions=decisions,
                interval=args.archive_interval,
            )
            # What replays read (`$replay/{from}/{filter}`): the archive, and how far back.
            from data_plane.storage.history import ArchiveHistory

            history = ArchiveHistory(tap, objects, link.lookups)
            link.followers.append(history.on_change)
            await history.load()
        recorder = None
        if not args.no_journey:
            from data_plane.observability.journey import JourneyRecorder
            from data_plane.observability.journey_writer import JourneyWriter, default_writer_id

            node = cluster.node_id if cluster is not None else default_writer_id()
            recorder = JourneyRecorder(node)
            journey = JourneyWriter(recorder, objects, interval=args.journey_interval)
        ports = Ports(
            persistence=persistence,
            retained_storage=kept,
            delayed_storage=kept,
            archive=tap,
            journey=recorder,
            shadows=reserved,
            history=history,
        )

        async def prepare(broker):
            reserved.attach(broker)
            async with link.pool.connection() as conn:
                rows = await (
                    await conn.execute(f"SELECT id, slug FROM {tables.TENANT}")
                ).fetchall()
            keep = cluster.claim_restored if cluster is not None else None  # one node each
            restored = await persistence.restore(broker, dict(rows), keep)
            logging.getLogger("data_plane").info("restored %d persistent sessions", restored)
            retained, delayed = await kept.load(broker)
            kept.start()
            logging.getLogger("data_plane").info(
                "loaded %d retained and %d delayed messages", retained, delayed
            )

    if cluster is not None:  # the cluster plugs in as the broker's Cluster port
        ports = dataclasses.replace(ports, cluster=cluster)
    if prepare is None:

        async def prepare(broker):
            reserved.attach(broker)

    server = await serve(config, authenticator, prepare, ports, handover)
    if handover is not None:
        server.broker.metric_sources.append(affinity.metrics)
    observers = None
    presence = None
    purge = None
    if link is not None:
        from data_plane.storage.store_metrics import writer_metrics
        from data_plane.tenancy.observers import TenancyObservers

        link.attach(server.broker)  # live connections, each tied to its secret
        from data_plane.storage.usage_log import UsageLogWriter

        usage_writer = UsageLogWriter(objects, max_age=args.usage_segment_age)
        writers = []
        server.broker.metric_sources.append(lambda: writer_metrics(writers))
        if tap is not None:
            tap.listen(server.broker.hooks)
            tap.start()
            writers.append(tap.writer)
        if journey is not None:
            journey.recorder.listen(server.broker.hooks)
            journey.tenants = lambda broker=server.broker: broker.stats.keys()
            server.broker.metric_sources.append(journey.metrics)
            journey.start()
        purge = asyncio.get_running_loop().create_task(persistence.purge_forever())
        observers = TenancyObservers(
            server.broker,
            link.pool,
            flush_interval=args.usage_flush_interval,
            usage_writer=usage_writer,
        )
        observers.start()
        shadows.metered = observers.meter.shadow_operations
        shadow_changes.start()
        job_changes.start()
        from data_plane.tenancy.presence import Presence

        presence = None
        if not args.no_presence:
            # The portal's device page reads it; written on its own connection (see control).
            presence = Presence(server.broker, link.presence_pool)
            presence.start()
        persistence.release_wills()
    # What start-up built (modules, pools, caches) lives as long as the process: keep it out
    # of the collector's full passes, which otherwise rescan it while messages flow.
    gc.collect()
    gc.freeze()
    for name, (host, port) in server.listeners.items():
        print(f"LISTENING {name} {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _dump_memory)
    if config.server_reference:  # drain this node without stopping it (rolling maintenance)
        redirect = Redirect(config.server_reference)
        loop.add_signal_handler(signal.SIGUSR2, server.broker.evacuate, redirect)
    await stop.wait()
    watchdog = loop.create_task(_report_stalled_shutdown())
    await server.shutdown()
    await shadows.stop()
    if jobs is not None:
        await jobs.stop()
    if fleet is not None:
        await fleet.stop()
    if link is not None:
        await shadow_changes.stop()
        await job_changes.stop()
    if cluster is not None:
        await cluster.stop()
    if purge is not None:
        purge.cancel()
    if tap is not None:
        await tap.stop()
    if journey is not None:
        await journey.stop()
    if kept is not None:
        await kept.stop()
    if persistence is not None:
        await persistence.drain()
        await persistence.store.stop()
    if observers is not None:
        await observers.stop()
    if presence is not None:
        await presence.stop()
    if link is not None:
        await link.stop()
    watchdog.cancel()


async def _report_stalled_shutdown(after: float = 8.0) -> None:
    """A graceful stop that takes longer than `after` seconds logs where each task waits: an
    orchestrator's SIGKILL follows soon, and the log is all that tells what held it."""
    from common.runtime.cancellation import where

    await asyncio.sleep(after)
    log = logging.getLogger("data_plane")
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            log.warning("shutdown stalled for %.0f s; waiting: %s", after, where(task))


def _dump_memory() -> None:
    """SIGUSR1: where memory goes (run with PYTHONTRACEMALLOC=1 for allocation sites). With
    MEMORY_DUMP_DIR set, also write the tracemalloc snapshot and a count of live objects by type
    there (`bench.soak --snapshots` diffs them to find what grows)."""
    import tracemalloc

    log = logging.getLogger("data_plane.memory")
    directory = os.environ.get("MEMORY_DUMP_DIR")
    if directory:
        import collections
        import json
        from pathlib import Path

        stamp = f"{time.time():.0f}"
        gc.collect()  # count what is kept, not garbage the collector has yet to reach
        counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        Path(directory, f"types-{stamp}.json").write_text(json.dumps(dict(counts)))
        Path(directory, f"heap-{stamp}.json").write_text(json.dumps(_native_heap()))
        Path(directory, f"closed-{stamp}.txt").write_text(_closed_connections_held())
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(Path(directory, f"snapshot-{stamp}.pickle")))
        log.warning("memory dump written to %s (%s)", directory, stamp)
        return
    if not tracemalloc.is_tracing():
        log.warning("start the broker with PYTHONTRACEMALLOC=1 to trace allocations")
        return
    for stat in tracemalloc.take_snapshot().statistics("lineno")[:15]:
        log.warning("%s", stat)


def _native_heap() -> dict[str, int]:
    """Memory outside Python's objects: glibc malloc's arenas (in use, and free but kept: what
    fragmentation costs), pyarrow's pool (the archive's Parquet writer)."""
    import ctypes
    import sys

    heap: dict[str, int] = {}
    try:

        class MallInfo2(ctypes.Structure):
            _fields_ = [
                (name, ctypes.c_size_t)
                for name in (
                    "arena",
                    "ordblks",
                    "smblks",
                    "hblks",
                    "hblkhd",
                    "usmblks",
                    "fsmblks",
                    "uordblks",
                    "fordblks",
                    "keepcost",
                )
            ]

        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
        heap.update(
            malloc_arena=info.arena,
            malloc_mmapped=info.hblkhd,
            malloc_in_use=info.uordblks,
            malloc_free_kept=info.fordblks,
        )
    except (OSError, AttributeError):  # not glibc
        pass
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        heap["pyarrow_allocated"] = arrow.total_allocated_bytes()
        heap["pyarrow_pool_max"] = arrow.default_memory_pool().max_memory() or 0
    return heap


def _closed_connections_held(sample: int = 10) -> str:
    """Connections that ended but are still referenced, and by what: a closed connection should
    be garbage once its socket is gone. For each sampled one, the objects it owns (its parts,
    their bound methods and closures, its transport) are set apart; what else refers to any of
    them is what keeps it, tallied with what refers to that in turn."""
    import types

    from data_plane.broker.connection import MQTTConnection

    closed = [
        o
        for o in gc.get_objects()
        if isinstance(o, MQTTConnection) and o.closing and o not in o.broker.connections
    ]
    lines = [f"closed connections alive: {len(closed)}"]
    plain = (dict, list, tuple, set, types.CellType, types.FunctionType, types.MethodType)

    def owned(conn: object) -> set[int]:
        mine, stack = set(), [(conn, 0)]
        while stack:
            obj, depth = stack.pop()
            if id(obj) in mine or depth > 6:
                continue
            mine.add(id(obj))
            for child in gc.get_referents(obj):
                kind = type(child)
                module = getattr(kind, "__module__", "")
                part = module.startswith("data_plane.broker") and kind.__name__ not in (
                    "Session",
                    "Broker",
                )
                if part or isinstance(child, plain) or "Transport" in kind.__name__:
                    stack.append((child, depth + 1))
        return mine

    def label(obj: object) -> str:
        if isinstance(obj, types.MethodType):
            return f"method {obj.__func__.__qualname__}"
        if isinstance(obj, types.FunctionType):
            return f"function {obj.__qualname__}"
        return type(obj).__qualname__

    tally: dict[str, int] = {}
    for conn in closed[:sample]:
        mine = owned(conn)
        inside = [o for o in gc.get_objects() if id(o) in mine]
        for obj in inside:
            for holder in gc.get_referrers(obj):
                if id(holder) in mine or holder is inside or holder is closed:
                    continue
                if isinstance(holder, types.FrameType):
                    continue
                above = [
                    label(h)
                    for h in gc.get_referrers(holder)
                    if h is not inside and not isinstance(h, types.FrameType)
                ][:3]
                chain = f"{above} -> {label(holder)} -> {label(obj)}"
                tally[chain] = tally.get(chain, 0) + 1
        del inside
    lines += [f"{n:5d}  {chain}" for chain, n in sorted(tally.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines[:40]) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logs.configure(args.log_level)  # the platform's one format (LOG_FORMAT=json for JSON)
    raise_open_file_limit()
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvloop is a dependency
        pass
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
