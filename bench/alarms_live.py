"""Alarms live at scale (issue 46): 10,000 keys over 100 tenants under a steady load, as
`make run` runs them — one broker on Postgres writing the archive and the live feed, `manage.py
run_rules --live` — with the raise latency after a `for` ends and the no-data detection time.

    .venv/bin/python -m bench.alarms_live [--tenants 100] [--keys 100] [--rate 2000]
        [--seconds 60]

A throwaway Postgres cluster under `.data/bench-alarms-postgres`. Each tenant `ab-NNN` has one
device and one enabled alarm: source `sensors/+/x`, key `payload.k`, raise `payload.t > 50`
held 3 s, clear at once, no data after 10 s, a webhook on raise to a local receiver. The load:
`--rate` readings a second (t = 5) spread round-robin over each tenant's `--keys` keys, so each
key reads every keys × tenants / rate seconds (5 s by default). Beside it, once a second:
- a *hot probe* on a key kept out of the load (`hot-N`): one reading t = 90, so the key is
  pending, and the job's timer raises it 3 s later; then a cool reading clears it. Raise
  latency = the webhook's arrival − the raise's instant (the notification's `at`);
- a *quiet probe* (`quiet-N`): one reading, then nothing: the job raises it (cause `no_data`)
  10 s later. Detection = the webhook's arrival − (the reading's time + 10 s).
Both through the notifications outbox (its sender woken by each write), so they include it. Reported:
p50 / p99 / max of each, how many came, the load's PUBACKs, and the job's batches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.rules_live import _django, stage_breakdown, start_broker, start_live_job, wait_for_job

RAISE_FOR, NO_DATA = 3, 10


class Receiver:
    """The webhook: each raise's delay after its instant (hot) or after its silence (quiet)."""

    def __init__(self) -> None:
        self.raised: dict[str, float] = {}  # key -> latency (s)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                now = time.time()
                at = datetime.fromisoformat(body["at"].replace("Z", "+00:00")).timestamp()
                if body["event"] == "raise":
                    receiver.raised.setdefault(f"{body['tenant']}/{body['key']}", now - at)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def seed(tenants: int, url: str) -> dict[str, str]:
    """Tenants, a device each (secrets returned) and an enabled alarm each."""
    from tenants.alarms import services as alarm_services
    from tenants.devices import services as device_services
    from tenants.models import AlarmDefinition, Tenant
    from tenants.tenant import services as tenant_services

    secrets = {}
    for index in range(tenants):
        slug = f"ab-{index:03d}"
        tenant = Tenant.objects.filter(slug=slug).first() or tenant_services.tenant_create(slug)
        tenant_services.tenant_set_quota(
            tenant, {"max_publish_rate": 100000, "max_connections": 1000, "max_alarm_keys": 100000}
        )
        tenant.devices.filter(name="dev").delete()
        _, secrets[slug] = device_services.device_create(
            tenant=tenant, name="dev", client_id_policy="any"
        )
        AlarmDefinition.objects.filter(tenant=tenant).delete()
        definition = alarm_services.alarm_definition_create(
            tenant=tenant, name="hot", source="sensors/+/x", key="payload.k",
            raise_condition="payload.t > 50", raise_for_seconds=RAISE_FOR, clear_for_seconds=0,
            no_data_seconds=NO_DATA, value="payload.t",
            notifications=[{"kind": "webhook", "target": url, "on": ["raise"]}],
        )  # fmt: skip
        alarm_services.alarm_definition_enable(definition, enabled=True)
    return secrets


def figures(values: list[float]) -> str:
    if not values:
        return "none"
    values = sorted(values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    slowest = ", ".join(f"{v:.2f}" for v in values[-5:])
    return (
        f"p50 {statistics.median(values):.2f} s, p99 {p99:.2f} s, max {values[-1]:.2f} s "
        f"(the slowest: {slowest})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tenants", type=int, default=100)
    parser.add_argument("--keys", type=int, default=100, help="per tenant, in the load")
    parser.add_argument("--rate", type=float, default=2000.0, help="readings/s in all")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    dsn = _django("bench-alarms-postgres")
    receiver = Receiver()
    os.environ["WEBHOOK_ALLOW"] = "127.0.0.1"  # the receiver is local (an operator's allow-list)
    secrets = seed(args.tenants, receiver.url)
    work = Path(tempfile.mkdtemp(prefix="bench-alarms-live-"))
    from common.runtime import embedded

    env = dict(
        os.environ,
        DATABASE_URL=dsn,
        OBJECT_STORE_URL=f"file://{work / 'objects'}",
        MQTT_SERVICE_KEY="bench-alarms-key",
        RULES_FEED_URL=embedded.redis_url(),
        RULES_FEED_KEY=f"rules:bench-alarms:{os.getpid()}",
    )
    broker, port = start_broker(dsn, env, work)
    job = start_live_job(env, work, port)
    try:
        wait_for_job(job, work)
        import paho.mqtt.client as mqtt

        acked: Counter[str] = Counter()
        clients = {}
        for slug, secret in secrets.items():
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{slug}-pub")
            client.on_publish = lambda c, u, mid, rc, p: acked.update([str(rc)])
            client.username_pw_set(f"{slug}/dev", secret)
            client.connect("127.0.0.1", port)
            client.loop_start()
            clients[slug] = client
        time.sleep(3)
        slugs = sorted(clients)
        load = os.getloadavg()[0]
        hot_sent: dict[str, float] = {}
        quiet_sent: dict[str, float] = {}
        tick, owed, turn, probe = 0.01, 0.0, 0, 0
        next_probe = time.monotonic() + 5  # the keys' first readings in before the probes
        end = time.monotonic() + args.seconds
        next_tick = time.monotonic()
        cool: list[tuple[float, str, str]] = []
        while time.monotonic() < end:
            owed += args.rate * tick
            while owed >= 1:
                owed -= 1
                slug = slugs[turn % len(slugs)]
                key = f"k{(turn // len(slugs)) % args.keys}"
                clients[slug].publish("sensors/d/x", json.dumps({"k": key, "t": 5}), qos=1)
                turn += 1
            now = time.monotonic()
            if now >= next_probe and now < end - NO_DATA - 5:
                next_probe += 1.0
                slug = slugs[probe % len(slugs)]
                hot, quiet = f"hot-{probe}", f"quiet-{probe}"
                clients[slug].publish("sensors/d/x", json.dumps({"k": hot, "t": 90}), qos=1)
                clients[slug].publish("sensors/d/x", json.dumps({"k": quiet, "t": 5}), qos=1)
                hot_sent[f"{slug}/{hot}"] = quiet_sent[f"{slug}/{quiet}"] = time.time()
                cool.append((now + RAISE_FOR + 2, slug, hot))
                probe += 1
            while cool and cool[0][0] <= now:
                _, slug, hot = cool.pop(0)
                clients[slug].publish("sensors/d/x", json.dumps({"k": hot, "t": 5}), qos=1)
            next_tick += tick
            pause = next_tick - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        settle = time.monotonic() + NO_DATA + 15
        while time.monotonic() < settle and len(receiver.raised) < len(hot_sent) + len(quiet_sent):
            time.sleep(0.5)
        hot = [receiver.raised[k] for k in hot_sent if k in receiver.raised]
        quiet = [receiver.raised[k] for k in quiet_sent if k in receiver.raised]
        keys = args.tenants * args.keys
        print(
            f"{args.tenants} tenants, {keys:,} keys in the load (+{len(hot_sent) * 2} probe keys), "
            f"{args.rate:,.0f} readings/s asked for {args.seconds:.0f} s, {turn:,} sent, "
            f"PUBACKs {dict(acked)}; load average {load:.1f} at the start"
        )
        print(f"raise after `for` ({RAISE_FOR} s): {len(hot)}/{len(hot_sent)}; {figures(hot)}")
        print(f"no data ({NO_DATA} s): {len(quiet)}/{len(quiet_sent)} detected; {figures(quiet)}")
        print("  the job:", stage_breakdown((work / "live.log").read_text()))
        others = len(receiver.raised) - len(hot) - len(quiet)
        print(f"  other raises (a loaded key late for its no-data window): {others}")
    finally:
        job.terminate()
        broker.terminate()
        job.wait(timeout=60)
        broker.wait(timeout=30)


if __name__ == "__main__":
    main()
