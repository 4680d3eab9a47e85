"""The broker's publish path in one process, without sockets: CPU microseconds per message.

    .venv/bin/python -m bench.publish_micro noacl 0     # static tenant, QoS 0
    .venv/bin/python -m bench.publish_micro acl 1       # with a 10-rule ACL (deny rules: the
                                                        # per-delivery read check), QoS 1
    .venv/bin/python -m bench.publish_micro noacl 0 archive     # the archive tap on (a scratch
    .venv/bin/python -m bench.publish_micro noacl 0 no-archive  # folder as the store) or off
    .venv/bin/python -m bench.publish_micro noacl 0 archive threads  # + CPU of the event loop's
                                                        # thread and of the archive's encoder
    .venv/bin/python -m bench.publish_micro noacl 0 archive-nothing  # the tap on, deciding
                                                        # per message that the tenant keeps
                                                        # nothing (no history policy, no rule)
    .venv/bin/python -m bench.publish_micro noacl 1 rate        # the tenant has publish rates:
                                                        # each PUBLISH through the limiter
    .venv/bin/python -m bench.publish_micro noacl 0 journey threads  # the journey recorder and
    .venv/bin/python -m bench.publish_micro noacl 0 no-journey  # its writer (a scratch folder
                                                        # as the store) on or off

PUBLISH bytes go in through `MQTTConnection.data_received` of 50 publishers, are routed and
delivered to 50 subscribers whose transports only count bytes; QoS 1 deliveries are acknowledged.
Process CPU time, so a shared machine's load moves it far less than the socket benchmarks: use it
for before/after comparisons of the hot path (run it from each checkout, A-B-B-A).

With `archive`, the archive tap records every publish and its threads encode and write the
batches; their CPU is the process's, so it is counted, up to the last batch (the timing ends
after the tap's stop). The collector then stays on (frozen after start-up, as `runbroker` runs):
what the archive keeps alive for a second is part of its cost.
"""

import asyncio
import gc
import os
import shutil
import sys
import tempfile
import time

import uvloop

from common.access.acl import AclEntry, AclPolicy
from common.mqtt.codec import encode
from common.mqtt.packets import MQTT_3_1_1, Connect, Publish, Subscribe, Subscription
from common.stores.object_store import LocalObjectStore
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.policy import authorize_session
from data_plane.broker.ports import Ports
from data_plane.config import BrokerConfig
from data_plane.observability.journey import JourneyRecorder
from data_plane.observability.journey_writer import JourneyWriter
from data_plane.storage.archive_decision import ArchiveDecisions
from data_plane.storage.archive_hook import ArchiveTap
from data_plane.storage.parquet_archive import ParquetArchiveWriter
from data_plane.tenancy.static import StaticAuthenticator

# ROUNDS: e.g. 20 and 40 under callgrind, whose difference is the marginal cost of 20,000
# messages (PAIRS x BATCH = 1,000 a round), start-up excluded.
PAIRS, ROUNDS, BATCH = 50, int(os.environ.get("ROUNDS", 200)), int(os.environ.get("BATCH", 20))
# TENANTS=10: the pairs spread over ten tenants (pair i is tenant i % 10's), so that the tenants'
# shares of a loop turn (`turns.TenantTurns`) apply as they do on a shared broker; BATCH=200:
# reads of 200 publishes, larger than a read slice (`flow.READ_SLICE`).
TENANTS = int(os.environ.get("TENANTS", 1))
USE_ACL = sys.argv[1] == "acl"
QOS = int(sys.argv[2])
# "archive" / "no-archive": the tap on or off, both run as `runbroker` runs (collector on, frozen
# after start-up) and long enough for several archive intervals, so the two compare.
ARCHIVE_MODE = next(
    (
        a
        for a in sys.argv[3:]
        if a in ("archive", "no-archive", "archive-nothing", "journey", "no-journey")
    ),
    None,
)
# "journey": the journey's recorder on the loop and its writer thread (issue 30), as `runbroker`
# runs them (2 s segments); "no-journey" the same run without them.
JOURNEY = ARCHIVE_MODE == "journey"
# "rate": the tenant has a publish rate (too high to hold anyone): every PUBLISH takes its turn
# through the limiter (issue 28).
RATE = "rate" in sys.argv[3:]
ARCHIVE = ARCHIVE_MODE in ("archive", "archive-nothing")
# "archive-nothing": the tap as `runbroker` builds it, with its decisions (issue 31), where the
# tenant has no history policy and no rule: each publish is looked up and left out.
KEEPS_NOTHING = ARCHIVE_MODE == "archive-nothing"
# "threads": also print the event loop thread's and the encoding (or journey writing) thread's
# CPU per message.
THREADS = "threads" in sys.argv[4:]
if ARCHIVE_MODE:
    ROUNDS *= 3


class T:
    def __init__(self):
        self.n = 0
        self.closed = False

    def write(self, data):
        self.n += len(data)

    def is_closing(self):
        return self.closed

    def get_extra_info(self, key):
        return ("127.0.0.1", 1)

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass

    def close(self):
        self.closed = True

    def set_write_buffer_limits(self, high):
        pass


async def main():
    names = ["t"] if TENANTS == 1 else [f"t{k}" for k in range(TENANTS)]
    tenants = {
        name: {"devices": {f"d{i}": {"password": "p", "client_ids": "any"} for i in range(2)}}
        for name in names
    }
    if RATE:
        for name in names:
            tenants[name]["quota"] = {
                "max_publish_rate": 10**9,
                "max_inbound_bytes_rate": 10**12,
            }
    tap = None
    encoding = [0.0]  # the encoding thread's CPU seconds in `add` and `seal`
    if ARCHIVE:
        scratch = tempfile.mkdtemp(prefix="publish-micro-archive-")
        decisions = ArchiveDecisions(pool=None) if KEEPS_NOTHING else None  # no tenant keeps
        tap = ArchiveTap(_TimedWriter(LocalObjectStore(scratch), encoding), decisions=decisions)
    journey = None
    if JOURNEY:
        scratch = tempfile.mkdtemp(prefix="publish-micro-journey-")
        recorder = JourneyRecorder("micro")
        journey = _TimedJourneyWriter(recorder, LocalObjectStore(scratch), encoding)
    ports = Ports(archive=tap, journey=journey.recorder if journey is not None else None)
    broker = Broker(BrokerConfig(), StaticAuthenticator(tenants), ports)
    if tap is not None:
        tap.listen(broker.hooks)
        tap.start()
    if journey is not None:
        journey.recorder.listen(broker.hooks)
        journey.start()
    pubs, subs = [], []
    for i in range(PAIRS):
        for role, out in (("p", pubs), ("s", subs)):
            conn = MQTTConnection(broker)
            conn.connection_made(T())
            conn.data_received(
                encode(
                    Connect(
                        client_id=f"{role}{i}",
                        username=f"{names[i % len(names)]}/d0",
                        password=b"p",
                        protocol_version=MQTT_3_1_1,
                    ),
                    MQTT_3_1_1,
                )
            )
            out.append(conn)
    await asyncio.sleep(0.05)
    entries = (
        [AclEntry("both", False, f"deny/{k}") for k in range(5)]
        + [AclEntry("both", True, f"allow/{k}/#") for k in range(4)]
        + [AclEntry("both", True, "t/#")]
    )
    for conn in pubs + subs:
        assert conn.session is not None
        if USE_ACL:
            conn.auth.acl = AclPolicy(entries, tenant=conn.tenant, device="d0", default_allow=True)
            authorize_session(conn.session, conn.auth)
    for i, conn in enumerate(subs):
        conn.data_received(encode(Subscribe(1, [Subscription(f"t/{i}", QOS)]), MQTT_3_1_1))
    await asyncio.sleep(0.01)
    payload = b"x" * 1024
    batches = [
        b"".join(
            encode(Publish(f"t/{i}", payload, QOS, packet_id=(k + 1) if QOS else None), MQTT_3_1_1)
            for k in range(BATCH)
        )
        for i in range(PAIRS)
    ]
    gc.collect()
    if ARCHIVE_MODE:
        gc.freeze()
    else:
        gc.disable()
    started, loop_started = time.process_time(), time.thread_time()
    for _ in range(ROUNDS):
        for conn, data in zip(pubs, batches, strict=True):
            conn.data_received(data)
        await asyncio.sleep(0)
        while any(conn.gate.held or _unread(conn) for conn in pubs):  # a share of a turn spent
            await asyncio.sleep(0)
        if QOS:  # acknowledge what the subscribers got, as clients do
            for conn in subs:
                ids = list(conn.session.inflight)
                conn.data_received(b"".join(b"\x40\x02" + i.to_bytes(2, "big") for i in ids))
        await asyncio.sleep(0)
    for _ in range(50):  # what tenants' turns held back goes in the next loop turns
        if sum(c.transport.n for c in subs) >= PAIRS * ROUNDS * BATCH * len(payload):
            break
        await asyncio.sleep(0)
        if QOS:
            for conn in subs:
                ids = list(conn.session.inflight)
                conn.data_received(b"".join(b"\x40\x02" + i.to_bytes(2, "big") for i in ids))
    if tap is not None:
        await tap.stop()
        if KEEPS_NOTHING:
            assert tap.writer.written_records == 0, "a tenant that keeps nothing was archived"
        else:
            assert tap.writer.written_records >= PAIRS * ROUNDS * BATCH, "archive rows missing"
        shutil.rmtree(scratch, ignore_errors=True)
    if journey is not None:
        await journey.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed, loop = time.process_time() - started, time.thread_time() - loop_started
    delivered = sum(c.transport.n for c in subs)
    assert delivered >= PAIRS * ROUNDS * BATCH * len(payload), "not everything was delivered"
    per_message = 1e6 / (PAIRS * ROUNDS * BATCH)
    if THREADS:
        print(
            f"{elapsed * per_message:.3f} loop={loop * per_message:.3f}"
            f" encoder={encoding[0] * per_message:.3f}"
        )
    else:
        print(f"{elapsed * per_message:.3f}")


def _unread(conn: MQTTConnection) -> bool:
    """Packets of the connection's last read not decoded yet (a read handled a slice at a time;
    False for a checkout older than that)."""
    return getattr(conn.reader, "more", False)


class _TimedWriter(ParquetArchiveWriter):
    """The archive writer, counting the CPU its encoding thread spends on batches."""

    def __init__(self, store, seconds: list[float]) -> None:
        super().__init__(store)
        self.seconds = seconds

    def add(self, *args, **kwargs):
        started = time.thread_time()
        try:
            return super().add(*args, **kwargs)
        finally:
            self.seconds[0] += time.thread_time() - started

    def seal(self):
        started = time.thread_time()
        try:
            return super().seal()
        finally:
            self.seconds[0] += time.thread_time() - started


class _TimedJourneyWriter(JourneyWriter):
    """The journey writer, counting the CPU its thread spends on batches."""

    def __init__(self, recorder, store, seconds: list[float]) -> None:
        super().__init__(recorder, store, interval=2.0)
        self.seconds = seconds

    def write(self, *args, **kwargs):
        started = time.thread_time()
        try:
            return super().write(*args, **kwargs)
        finally:
            self.seconds[0] += time.thread_time() - started


if __name__ == "__main__":
    uvloop.run(main())
