"""A device over its plan, as issue 28 found it: paho clients on their defaults (MQTT 5, QoS 1,
auto-reconnect, 20 in flight) each queue 2,000 publishes over a 100 msg/s plan, while a calm
device of the same tenant publishes once a second; the broker as operators run it.

    .venv/bin/python -m bench.pressure [/path/to/base/checkout] [--clients 3] [--messages 2000]
        [--rate 100] [--seconds 90]

Each build (the base checkout if given, then this one) runs `manage.py runbroker` on Postgres
(archive, metering, presence, ACLs and quotas on: `bench.archive`'s seeding, then the tenant's
`max_publish_rate` set to `--rate`). Reported per build: publishes acknowledged, deliveries at a
subscriber, distinct messages delivered, the most copies of one, the disconnects the clients saw,
the calm device's messages lost and its slowest acknowledgement, and how long it took (bounded by
`--seconds`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bench import archive
from bench.brokers import REPO
from bench.limiter import start_runbroker, with_recorder


def client(port: int, login: tuple[str, str], client_id: str) -> tuple[mqtt.Client, list]:
    """A paho client with its defaults; the list collects the disconnects it sees."""
    disconnects: list = []
    paho = mqtt.Client(CallbackAPIVersion.VERSION2, client_id, protocol=mqtt.MQTTv5)
    paho.username_pw_set(*login)
    paho.on_disconnect = lambda c, u, f, rc, p: disconnects.append(str(rc))
    connected = threading.Event()
    paho.on_connect = lambda *args: connected.set()
    paho.connect("127.0.0.1", port)
    paho.loop_start()
    if not connected.wait(10):
        raise RuntimeError(f"{client_id}: no CONNACK")
    return paho, disconnects


def scenario(port: int, login: tuple[str, str], args: argparse.Namespace) -> dict:
    deliveries: Counter = Counter()
    subscriber, _ = client(port, login, "pressure-sub")
    subscriber.on_message = lambda c, u, m: deliveries.update([m.payload])
    subscriber.subscribe("bench/pressure/#", 1)
    time.sleep(0.5)
    floods = [client(port, login, f"pressure-{i}") for i in range(args.clients)]
    calm, _ = client(port, login, "pressure-calm")
    started = time.monotonic()
    infos = [
        paho.publish(f"bench/pressure/{i}", f"{i}-{n}", 1)
        for n in range(args.messages)
        for i, (paho, _) in enumerate(floods)
    ]
    calm_sent, calm_waits = [], []
    while time.monotonic() - started < args.seconds:
        if all(info.is_published() for info in infos):
            break
        payload = f"calm-{len(calm_sent)}"
        sent = time.monotonic()
        info = calm.publish("bench/pressure/calm", payload, 1)
        info.wait_for_publish(5)
        calm_waits.append(time.monotonic() - sent)
        calm_sent.append(payload.encode())
        time.sleep(max(0.0, 1.0 - (time.monotonic() - sent)))
    took = time.monotonic() - started
    time.sleep(2)  # the last deliveries
    seen = sum(len(d) for _, d in floods)  # before our own DISCONNECTs below
    for paho in [calm, subscriber, *(p for p, _ in floods)]:
        paho.disconnect()
        paho.loop_stop()
    flood_messages = {
        f"{i}-{n}".encode() for n in range(args.messages) for i in range(args.clients)
    }
    delivered = {payload: count for payload, count in deliveries.items()}
    return {
        "published": len(infos),
        "acknowledged": sum(info.is_published() for info in infos),
        "deliveries": sum(count for p, count in delivered.items() if p in flood_messages),
        "distinct": len(flood_messages & set(delivered)),
        "most copies": max((delivered.get(p, 0) for p in flood_messages), default=0),
        "disconnects seen": seen,
        "calm lost": sum(1 for p in calm_sent if p not in delivered),
        "calm sent": len(calm_sent),
        "calm slowest ack s": round(max(calm_waits, default=0.0), 3),
        "seconds": round(took, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("base", type=Path, nargs="?", help="an older checkout, run first")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=90.0)
    args = parser.parse_args(argv)
    builds = [args.base.resolve()] if args.base else []
    builds.append(REPO)
    slugs, creds = archive.seed(1)
    subprocess.run(
        [sys.executable, "manage.py", "set_quota", slugs[0], f"max_publish_rate={args.rate}"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    try:
        for repo in builds:
            with_recorder(repo)
            stores = archive.Stores("file")
            broker = start_runbroker(repo, stores.new())
            try:
                time.sleep(1)
                figures = scenario(broker.port, creds[0], args)
            finally:
                broker.stop()
                stores.close()
            print(f"{repo}: {args.clients} x {args.messages} QoS 1 over {args.rate} msg/s")
            print("  " + ", ".join(f"{key} {value:,}" for key, value in figures.items()))
    finally:
        archive.cleanup(slugs)


if __name__ == "__main__":
    main()
