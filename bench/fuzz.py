"""A structure-aware fuzzer over the MQTT codec and the broker's connection state machine.

    .venv/bin/python -m bench.fuzz --inputs 1000000 [--seed 1] [--machine-share 0.2]

Each input is a byte stream built the way a hostile client would build it: real packets of every
type (encoded by the codec from random fields: topics with wildcards and `$`, properties of every
kind, wills, shared subscriptions, large remaining lengths), then mutated — bit flips, bytes
inserted, deleted or overwritten with boundary values (0x00, 0x7F, 0x80, 0xFF), a remaining
length or string length rewritten, packets duplicated, swapped, spliced with another input,
truncated — and split into random chunks, as TCP would deliver them. Seeds also come from the
corpus kept in `bench/fuzz_corpus/` (new inputs that reached a new (packet type, outcome)
are added with `--grow-corpus`).

Two targets:
- **codec**: `Reader(server_side=True).feed(chunk)` for every chunk. The only acceptable failure
  is `MQTTError` (the reason code the spec asks for); anything else is a crash. Every decoded
  packet is re-encoded and decoded again, and must come back equal.
- **machine** (a share of the inputs): the same bytes into a real `MQTTConnection` of an
  in-process `Broker` (static tenants, with an ACL), over a transport that only records; the
  loop runs until the connection settles, then the connection is lost. Any exception that escapes
  the protocol (logged by the connection's `log.exception` or the loop's exception handler) is a
  failure; so is a write after close, or a connection still counted after it is gone.

Prints a JSON summary: inputs per target, distinct outcomes, failures (with the first few inputs,
hex, saved under `bench/fuzz_failures/`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import random
import sys
import time
from collections import Counter
from pathlib import Path

from common.mqtt.codec import Reader, encode
from common.mqtt.errors import MQTTError
from common.mqtt.packets import (
    MQTT_3_1_1,
    MQTT_5_0,
    Auth,
    Connect,
    Disconnect,
    PingReq,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    Subscribe,
    Subscription,
    Unsubscribe,
    Will,
)

CORPUS = Path(__file__).parent / "fuzz_corpus"
FAILURES = Path(__file__).parent / "fuzz_failures"
BOUNDARY = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0xC0, 0x3F)

# -- generation ---------------------------------------------------------------------------------

TOPIC_PARTS = ["a", "b", "+", "#", "$SYS", "$share", "g", "", "sensors", "x" * 40, "é", "\x00", "/"]


def topic(rng: random.Random, *, wildcards: bool) -> str:
    depth = rng.choice((1, 1, 2, 3, 5, 20)) if rng.random() > 0.001 else 200
    parts = [rng.choice(TOPIC_PARTS) for _ in range(depth)]
    if not wildcards:
        parts = [p for p in parts if p not in ("+", "#")] or ["t"]
    if rng.random() < 0.1:
        parts = ["$share", rng.choice(["g", "", "+"]), *parts]
    return "/".join(parts)


def properties(rng: random.Random, v5: bool, kind: str) -> dict:
    if not v5 or rng.random() < 0.5:
        return {}
    pool = {
        "connect": [
            ("session_expiry_interval", lambda: rng.choice((0, 1, 60, 2**32 - 1))),
            ("receive_maximum", lambda: rng.choice((1, 2, 65535))),
            ("maximum_packet_size", lambda: rng.choice((1, 20, 2**28))),
            ("topic_alias_maximum", lambda: rng.choice((0, 1, 65535))),
            ("request_problem_information", lambda: rng.choice((0, 1))),
            ("user_property", lambda: [("k", "v")] * rng.choice((1, 3))),
            ("authentication_method", lambda: rng.choice(("SCRAM-SHA-256", "nope"))),
            ("authentication_data", lambda: rng.randbytes(rng.choice((0, 8, 64)))),
        ],
        "publish": [
            ("payload_format_indicator", lambda: rng.choice((0, 1))),
            ("message_expiry_interval", lambda: rng.choice((0, 1, 2**32 - 1))),
            ("topic_alias", lambda: rng.choice((1, 2, 64, 65535))),
            ("response_topic", lambda: topic(rng, wildcards=False)),
            ("correlation_data", lambda: rng.randbytes(4)),
            ("user_property", lambda: [("a", "b")]),
            ("content_type", lambda: "text/plain"),
        ],
        "subscribe": [
            ("subscription_identifier", lambda: [rng.choice((1, 268_435_455))]),
            ("user_property", lambda: [("a", "b")]),
        ],
        "other": [
            ("reason_string", lambda: "why"),
            ("user_property", lambda: [("a", "b")]),
            ("session_expiry_interval", lambda: rng.choice((0, 10))),
        ],
    }[kind]
    return dict((name, make()) for name, make in rng.sample(pool, rng.randint(1, len(pool))))


def packet(rng: random.Random, version: int):
    v5 = version == MQTT_5_0
    pid = rng.choice((1, 2, 7, 65535))
    kind = rng.choices(
        ["publish", "subscribe", "unsubscribe", "puback", "pubrec", "pubrel", "pubcomp", "ping"]
        + ["disconnect", "auth", "connect"],
        weights=[30, 12, 6, 5, 4, 4, 4, 6, 3, 2, 2],
    )[0]
    if kind == "publish":
        qos = rng.choice((0, 0, 1, 2))
        return Publish(
            topic(rng, wildcards=rng.random() < 0.05),
            rng.randbytes(rng.choice((0, 1, 16, 300))),
            qos,
            rng.random() < 0.2,
            rng.random() < 0.05,
            pid if qos else None,
            properties(rng, v5, "publish"),
        )
    if kind == "subscribe":
        subs = [
            Subscription(
                topic(rng, wildcards=True),
                rng.choice((0, 1, 2)),
                no_local=v5 and rng.random() < 0.2,
                retain_as_published=v5 and rng.random() < 0.2,
                retain_handling=rng.choice((0, 1, 2)) if v5 else 0,
            )
            for _ in range(rng.choice((1, 1, 2, 5)))
        ]
        return Subscribe(pid, subs, properties(rng, v5, "subscribe"))
    if kind == "unsubscribe":
        return Unsubscribe(pid, [topic(rng, wildcards=True)], properties(rng, v5, "other"))
    if kind in ("puback", "pubrec", "pubrel", "pubcomp"):
        cls = {"puback": PubAck, "pubrec": PubRec, "pubrel": PubRel, "pubcomp": PubComp}[kind]
        return cls(pid, rng.choice((0, 0, 0x10, 0x80)) if v5 else 0)
    if kind == "ping":
        return PingReq()
    if kind == "disconnect":
        return Disconnect(rng.choice((0, 4)) if v5 else 0, properties(rng, v5, "other"))
    if kind == "auth" and v5:
        return Auth(0x19, {"authentication_method": "SCRAM-SHA-256"})
    return connect(rng, version)


def connect(rng: random.Random, version: int) -> Connect:
    v5 = version == MQTT_5_0
    will = None
    if rng.random() < 0.2:
        will = Will(
            topic(rng, wildcards=rng.random() < 0.1),
            rng.randbytes(8),
            rng.choice((0, 1, 2)),
            rng.random() < 0.3,
            properties(rng, v5, "publish") if v5 else {},
        )
    user = rng.choice(["t/d0", "t/d0", "t/d1", "t/nobody", "x/d0", "t/$portal", "", "a/b/c"])
    return Connect(
        rng.choice(["c1", "c2", "", "$x", "d0", "a" * 30]),
        version,
        "MQTT",
        rng.random() < 0.7,
        rng.choice((0, 1, 60, 65535)),
        user or None,
        rng.choice([b"p", b"p", b"wrong", None, b"eyJ.x.y"]) if user else None,
        will,
        properties(rng, v5, "connect"),
    )


def stream(rng: random.Random, corpus: list[bytes]) -> bytes:
    """One connection's bytes: usually a CONNECT, then packets; then mutations. Half the
    CONNECTs are ones the broker accepts, and most of those are kept intact, so the mutations
    reach the connected state machine (subscriptions, QoS flows, wills) too."""
    version = rng.choice((MQTT_3_1_1, MQTT_5_0))
    head = b""
    if corpus and rng.random() < 0.15:
        head = rng.choice(corpus)
    elif rng.random() < 0.5:
        props = {"session_expiry_interval": 0} if version == MQTT_5_0 else {}
        good = Connect(
            rng.choice(["c1", "c2", "c3"]),
            version,
            keep_alive=60,
            username="t/d0",
            password=b"p",
            properties=props,
        )
        head = encode(good, version)
    elif rng.random() < 0.9:
        head = encode(connect(rng, version), version)
    parts: list[bytes] = []
    for _ in range(rng.choice((0, 1, 2, 4, 8, 16))):
        try:
            parts.append(encode(packet(rng, version), version))
        except (MQTTError, ValueError, OverflowError, UnicodeEncodeError, KeyError, TypeError):
            parts.append(rng.randbytes(rng.randint(1, 8)))  # the encoder refused: noise instead
    keep_head = rng.random() < 0.7
    data = bytearray(b"".join(parts) if keep_head else head + b"".join(parts))
    for _ in range(rng.choice((0, 0, 1, 1, 2, 3, 8))):
        mutate(rng, data, corpus)
    return (head + bytes(data)) if keep_head else bytes(data)


def mutate(rng: random.Random, data: bytearray, corpus: list[bytes]) -> None:
    if not data:
        data += rng.randbytes(rng.randint(1, 16))
        return
    i = rng.randrange(len(data))
    op = rng.randrange(10)
    if op == 0:
        data[i] ^= 1 << rng.randrange(8)
    elif op == 1:
        data[i] = rng.choice(BOUNDARY)
    elif op == 2:
        data.insert(i, rng.choice(BOUNDARY))
    elif op == 3:
        del data[i : i + rng.randint(1, 4)]
    elif op == 4:
        del data[rng.randrange(len(data)) :]  # truncate
    elif op == 5 and len(data) > 2:
        # a remaining length that lies: 1-4 continuation bytes
        data[1:2] = bytes(rng.choice(((0xFF,), (0xFF, 0xFF, 0xFF, 0x7F), (0x80, 0x80, 0x80, 0x80))))
    elif op == 6:
        start = rng.randrange(len(data))
        data[start:start] = data[start : start + rng.randint(1, 64)]  # duplicate a slice
    elif op == 7 and corpus:
        other = rng.choice(corpus)
        cut = rng.randrange(len(other) + 1)
        data[i:] = other[cut:]  # splice
    elif op == 8:
        data[i : i + 2] = rng.choice((b"\xff\xff", b"\x00\x00", b"\x00\x01", b"\x7f\xff"))
    else:
        data[i] = rng.randrange(256)


def chunks(rng: random.Random, data: bytes) -> list[bytes]:
    if rng.random() < 0.5 or len(data) < 2:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 6))))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


# -- targets ------------------------------------------------------------------------------------


def run_codec(pieces: list[bytes]) -> str:
    """The outcome (for coverage counting); raises on a crash."""
    reader = Reader(server_side=True, max_packet_size=1 << 20)
    outcome = "ok"
    version = None
    try:
        for piece in pieces:
            for decoded in reader.feed(piece):
                if isinstance(decoded, Connect):
                    version = decoded.protocol_version
                roundtrip(decoded, version or MQTT_3_1_1)
                outcome = decoded.type.name
    except MQTTError as exc:
        return f"{outcome}:err{exc.reason_code:#x}"
    return outcome


def roundtrip(decoded, version: int) -> None:
    if isinstance(decoded, Connect):
        return  # the server never encodes a CONNECT; its fields are checked by the machine
    again = Reader(server_side=True, protocol_version=version)
    again._connected = True
    try:
        encoded = encode(decoded, version)
    except (MQTTError, ValueError, UnicodeEncodeError):
        return  # a server-side packet that a server never sends (e.g. DISCONNECT props)
    back = again.feed(encoded)
    if len(back) != 1 or back[0] != decoded:
        raise AssertionError(f"round trip changed {decoded!r} into {back!r}")


class RecordingTransport:
    def __init__(self) -> None:
        self.written = 0
        self.closed = False
        self.writes_after_close = 0

    def write(self, data) -> None:
        if self.closed:
            self.writes_after_close += 1
        self.written += len(data)

    def writelines(self, items) -> None:
        for item in items:
            self.write(item)

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, key, default=None):
        return ("127.0.0.1", 50000) if key == "peername" else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:  # the broker's graceful close: nothing may be written after
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class Machine:
    """An in-process broker; each input is one connection's life."""

    def __init__(self) -> None:
        from data_plane.broker.broker import Broker
        from data_plane.config import BrokerConfig
        from data_plane.tenancy.static import StaticAuthenticator

        tenants = {
            "t": {
                "devices": {
                    "d0": {"password": "p", "client_ids": "any"},
                    "d1": {"password": "p"},
                },
                "acl": [
                    {"action": "subscribe", "permission": "deny", "topic": "a/#"},
                    {"action": "publish", "permission": "deny", "topic": "b/+"},
                ],
                "quota": {"max_subscriptions_per_client": 8, "max_retained_messages": 50},
            }
        }
        self.broker = Broker(
            BrokerConfig(sys_interval=0, connect_timeout=1.0), StaticAuthenticator(tenants)
        )
        self.errors: list[str] = []

        class Catch(logging.Handler):
            def emit(handler, record: logging.LogRecord) -> None:  # noqa: N805
                if record.exc_info:
                    self.errors.append(handler.format(record))

        catcher = Catch()
        catcher.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger("data_plane").addHandler(catcher)
        logging.getLogger("data_plane").setLevel(logging.ERROR)
        logging.getLogger("data_plane").propagate = False

    async def run(self, pieces: list[bytes]) -> str:
        from data_plane.broker.connection import MQTTConnection

        transport = RecordingTransport()
        conn = MQTTConnection(self.broker)
        conn.connection_made(transport)
        for piece in pieces:
            if transport.closed:
                break
            conn.data_received(piece)
            await asyncio.sleep(0)
        for _ in range(3):  # let CONNECT's authentication and the deliveries settle
            await asyncio.sleep(0)
        conn.connection_lost(None)
        await asyncio.sleep(0)
        if transport.writes_after_close:
            self.errors.append(f"{transport.writes_after_close} write(s) after close")
        if conn in self.broker.connections:
            self.errors.append("connection still registered after it was lost")
        state = "accepted" if conn.acked else "refused"
        return f"{state}:{'closed' if transport.closed else 'open'}"


# -- driver -------------------------------------------------------------------------------------


def load_corpus() -> list[bytes]:
    return [p.read_bytes() for p in sorted(CORPUS.glob("*.bin"))] if CORPUS.exists() else []


def fuzz(
    inputs: int,
    *,
    seed: int = 1,
    machine_share: float = 0.2,
    grow_corpus: bool = False,
    progress: bool = False,
) -> dict:
    rng = random.Random(seed)
    corpus = load_corpus()
    outcomes: Counter = Counter()
    failures: list[dict] = []
    counts = Counter()
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)  # the broker's timers belong to this loop
    machine = Machine()
    loop_errors: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: loop_errors.append(str(ctx.get("message"))))
    seen: set[str] = set()
    started = time.monotonic()
    try:
        for n in range(inputs):
            data = stream(rng, corpus)
            pieces = chunks(rng, data)
            counts["codec"] += 1
            try:
                outcome = run_codec(pieces)
            except Exception as exc:  # a crash: anything but MQTTError
                failures.append({"target": "codec", "error": repr(exc), "input": data.hex()})
                continue
            outcomes[outcome] += 1
            if grow_corpus and outcome not in seen and len(data) < 2048:
                seen.add(outcome)
                CORPUS.mkdir(exist_ok=True)
                (CORPUS / f"{len(seen):03d}-{outcome.replace(':', '-')}.bin").write_bytes(data)
            if rng.random() < machine_share:
                counts["machine"] += 1
                before = len(machine.errors) + len(loop_errors)
                try:
                    outcomes["machine:" + loop.run_until_complete(machine.run(pieces))] += 1
                except Exception as exc:
                    machine.errors.append(repr(exc))
                if len(machine.errors) + len(loop_errors) > before:
                    new = (machine.errors + loop_errors)[before:]
                    failures.append({"target": "machine", "error": new[0], "input": data.hex()})
            if progress and n and n % 100_000 == 0:
                rate = n / (time.monotonic() - started)
                print(f"{n} inputs, {len(failures)} failures, {rate:.0f}/s", file=sys.stderr)
    finally:
        leftover = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in leftover:
            task.cancel()
        if leftover:
            loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
        loop.close()
    if failures:
        FAILURES.mkdir(exist_ok=True)
        for i, failure in enumerate(failures[:20]):
            (FAILURES / f"{seed}-{i}.json").write_text(json.dumps(failure, indent=1))
    return {
        "inputs": inputs,
        "codec_inputs": counts["codec"],
        "machine_inputs": counts["machine"],
        "seconds": round(time.monotonic() - started, 1),
        "distinct_outcomes": len(outcomes),
        "failures": len(failures),
        "first_failures": [f["error"][:300] for f in failures[:5]],
        "machine_outcomes": {k: v for k, v in outcomes.items() if k.startswith("machine:")},
        "top_outcomes": outcomes.most_common(12),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__)
    parser.add_argument("--inputs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--machine-share", type=float, default=0.2)
    parser.add_argument("--grow-corpus", action="store_true")
    args = parser.parse_args(argv)
    summary = fuzz(
        args.inputs,
        seed=args.seed,
        machine_share=args.machine_share,
        grow_corpus=args.grow_corpus,
        progress=True,
    )
    print(json.dumps(summary, indent=1))
    sys.exit(1 if summary["failures"] else 0)


if __name__ == "__main__":
    main()
