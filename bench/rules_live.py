"""Live rules latency: publish → action (webhook received) p50/p99 with 10, 100 and 1,000
enabled rules across 200 tenants, on the embedded default (one broker on Postgres writing the
archive, `manage.py run_rules --live` as `make run` starts it, local Spark).

    .venv/bin/python -m bench.rules_live [--rules 10,100,1000] [--rate 10] [--seconds 30]
        [--attack] [--first-match N] [--write]

A throwaway Postgres cluster under `.data/bench-rules-postgres`. Rule i lives in tenant
`rb-{i % 200}` and reads `sensors/{i}/#` with a JSON-path WHERE; its action is a signed webhook to
a local HTTP receiver. Devices publish QoS 1 at `--rate` msg/s in total, each message aimed at a
random enabled rule; the payload carries the send time, the webhook body returns it, and the
receiver takes the difference (one clock: everything is on this machine). The rule sets grow
without restarting the job (10, then 100, then 1,000): the job picks the new rules up live.

`--attack` (issue 29) measures the last rule count twice: before, then during an attack by one
more tenant, `rb-evil`, with a CPU-heavy rule (FOREACH over sha256 of a 1 MB payload, 4 msg/s)
and a webhook to a tarpit (a receiver that accepts and never answers; FOREACH of 48 outputs,
1 msg/s): the victims' p50/p99 before and during. Webhooks may call the local receivers because
the bench allows loopback (`WEBHOOK_ALLOW=127.0.0.1`), as an operator would.

`--sink` (issue 47) gives each rule a second action, an HTTP-batch sink to the same receiver:
its outputs go through the sink's durable outbox and the job's sender, and the receiver times
them apart (publish → the sink's far end taking the batch), beside the webhook's.

`--first-match N` (issue 43) then changes N rules in turn (one saved, one enabled, one edited to
read a new topic), each under the background load, and times each change to its first webhook.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TENANTS = 200  # `--tenants` changes it
SINK = False  # `--sink`: each rule also delivers to an HTTP-batch sink
SECRET = "bench-webhook-secret-0001"  # 16 to 256 characters, as the API requires


def _django(folder: str = "bench-rules-postgres") -> str:
    """Django on a throwaway Postgres cluster under `.data/{folder}`, migrated; its URL."""
    os.environ["EMBEDDED_PG_DIR"] = str(REPO / ".data" / folder)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    return settings.DATABASE_URL


class Tarpit:
    """A webhook that never answers: accepts connections and holds them open (the bench's
    attacker, and the tests' of issue 29)."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        self.held: list = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.closed = True
        self.sock.close()
        for conn in self.held:
            conn.close()


def add_attacker(tarpit_url: str) -> str:
    """Tenant rb-evil with the CPU rule and the tarpit rule; its device's secret."""
    from tenants.devices import services as device_services
    from tenants.models import Tenant
    from tenants.rules import services as rule_services
    from tenants.tenant import services as tenant_services

    tenant = Tenant.objects.filter(slug="rb-evil").first() or tenant_services.tenant_create(
        "rb-evil"
    )
    tenant_services.tenant_set_quota(
        tenant,
        {
            "max_publish_rate": 1000,
            "max_message_size": 2 << 20,
            "max_inbound_bytes_rate": 50_000_000,
            "max_connections": 10,
        },
    )
    tenant.devices.filter(name="dev").delete()
    tenant.rules.all().delete()
    _, secret = device_services.device_create(tenant=tenant, name="dev", client_id_policy="any")
    rule_services.rule_create(
        tenant=tenant,
        name="cpu",
        sql="FOREACH [1..100000] AS i DO i INCASE sha256(payload) = 'x' FROM \"cpu/#\"",
    )
    rule_services.rule_create(
        tenant=tenant,
        name="tarpit",
        sql='FOREACH [1..48] AS i DO i FROM "tarpit/#"',
        actions=[{"type": "webhook", "url": tarpit_url, "secret": SECRET}],
    )
    return secret


def attack(client, stop: threading.Event) -> None:
    """4 CPU messages and 1 tarpit message a second until `stop`."""
    bomb = b"x" * 1_000_000  # under the broker's 1 MiB packet limit
    while not stop.is_set():
        for _ in range(4):
            client.publish("cpu/1", bomb, qos=0)
        client.publish("tarpit/1", b"{}", qos=0)
        stop.wait(1.0)


class Receiver:
    def __init__(self) -> None:
        self.latencies: dict[str, float] = {}
        self.sink_latencies: dict[str, float] = {}  # `--sink`: the HTTP-batch sink's, apart
        self.received: dict[str, float] = {}  # id -> when it first came
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                now = time.time()
                if self.path.startswith("/batch"):  # a sink's batch: a JSON array of outputs
                    for output in json.loads(body):
                        receiver.sink_latencies.setdefault(output["id"], now - output["sent"])
                else:
                    output = json.loads(body)
                    receiver.latencies[output["id"]] = now - output["sent"]
                    receiver.received.setdefault(output["id"], now)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def seed(rules: int, url: str) -> dict[str, str]:
    """Tenants and devices (secrets returned); rules up to `rules` enabled."""
    from tenants.devices import services as device_services
    from tenants.models import Rule, Tenant
    from tenants.tenant import services as tenant_services

    secrets = {}
    for index in range(TENANTS):
        slug = f"rb-{index:03d}"
        tenant = Tenant.objects.filter(slug=slug).first() or tenant_services.tenant_create(slug)
        tenant_services.tenant_set_quota(
            tenant, {"max_publish_rate": 100000, "max_connections": 1000}
        )
        device = tenant.devices.filter(name="dev").first()
        if device is not None:
            device.delete()
        _, secret = device_services.device_create(tenant=tenant, name="dev", client_id_policy="any")
        secrets[slug] = secret
    Rule.objects.filter(tenant__slug__startswith="rb-").delete()
    return secrets


def background(clients: dict, rules: int, rate: float, stop: threading.Event) -> None:
    """Readings the rules read and do not match, at `rate` msg/s, until `stop`."""
    tick, owed, seq = 0.01, 0.0, 0
    while not stop.is_set():
        owed += rate * tick
        while owed >= 1:
            owed -= 1
            rule = random.randrange(rules)
            reading = json.dumps({"id": "bg", "sent": time.time(), "t": 5, "seq": seq})
            clients[f"rb-{rule % TENANTS:03d}"].publish(f"sensors/{rule}/x", reading, qos=1)
            seq += 1
        stop.wait(tick)


def add_rules(start: int, end: int, url: str) -> None:
    from tenants.models import Tenant
    from tenants.rules import services as rule_services

    tenants = {t.slug: t for t in Tenant.objects.filter(slug__startswith="rb-")}
    for i in range(start, end):
        rule_services.rule_create(
            tenant=tenants[f"rb-{i % TENANTS:03d}"],
            name=f"r{i}",
            sql=(
                "SELECT payload.id AS id, payload.sent AS sent, payload.t AS t "
                f'FROM "sensors/{i}/#" WHERE payload.t > 10'
            ),
            actions=[{"type": "webhook", "url": url, "secret": SECRET}]
            + ([{"type": "http_batch", "url": url.replace("/hook", "/batch")}] if SINK else []),
        )


CHANGES = ("saved", "enabled", "edited")


def first_matches(client, receiver: Receiver, count: int, url: str) -> list[tuple[str, float]]:
    """`count` rule changes in tenant rb-000, in turn a rule saved, a disabled one enabled and one
    edited to read a new topic; after each, a probe every 50 ms to the topic it now reads: the
    time from the change to the first webhook received (the issue's "first match after saving,
    enabling or editing a rule")."""
    from tenants.models import Tenant
    from tenants.rules import services as rule_services

    tenant = Tenant.objects.get(slug="rb-000")
    measured = []
    for k in range(count):
        change = CHANGES[k % len(CHANGES)]
        sql = (
            "SELECT payload.id AS id, payload.sent AS sent, payload.t AS t "
            f'FROM "fresh/{k}/#" WHERE payload.t > 10'
        )
        actions = [{"type": "webhook", "url": url, "secret": SECRET}]
        if change == "enabled":
            rule = rule_services.rule_create(
                tenant=tenant, name=f"fm{k}", sql=sql, actions=actions, enabled=False
            )
        elif change == "edited":
            rule = rule_services.rule_create(
                tenant=tenant, name=f"fm{k}", sql=sql.replace("fresh/", "stale/"), actions=actions
            )
        time.sleep(3)  # the job has the rule set before the change (a change is what is timed)
        changed = time.time()
        if change == "saved":
            rule_services.rule_create(tenant=tenant, name=f"fm{k}", sql=sql, actions=actions)
        elif change == "enabled":
            rule_services.rule_update(rule, enabled=True)
        else:
            rule_services.rule_update(rule, sql=sql)
        seq, deadline = 0, time.monotonic() + 30
        prefix = f"fresh-{k}-"
        while time.monotonic() < deadline:
            payload = json.dumps({"id": f"{prefix}{seq}", "sent": time.time(), "t": 20})
            client.publish(f"fresh/{k}/x", payload, qos=1)
            seq += 1
            time.sleep(0.05)
            if any(ident.startswith(prefix) for ident in list(receiver.received)):
                break
        firsts = [t for ident, t in list(receiver.received.items()) if ident.startswith(prefix)]
        measured.append((change, min(firsts) - changed if firsts else float("nan")))
        print(f"  first match after a rule {change}: {measured[-1][1]:.2f}s", flush=True)
    return measured


def job_figures() -> str:
    """What the job counted for the bench's tenants (every rule summed) and what waits."""
    from django.db.models import Sum

    from tenants.models import RuleActionRetry, RuleMetrics

    sums = RuleMetrics.objects.filter(rule__tenant__slug__startswith="rb-").aggregate(
        *(Sum(f) for f in ("matched", "passed", "failed", "actions_ok", "actions_failed"))
    )
    waiting = RuleActionRetry.objects.filter(rule__tenant__slug__startswith="rb-").count()
    return ", ".join(f"{k.split('__')[0]} {v or 0}" for k, v in sums.items()) + (
        f", waiting {waiting}"
    )


def start_broker(dsn: str, env: dict[str, str], work: Path) -> tuple[subprocess.Popen, int]:
    """The broker on Postgres, archiving every 0.5 s (its log in `work`), and its port."""
    port = _free_port()
    broker = subprocess.Popen(
        [sys.executable, "-m", "data_plane", "--port", str(port), "--ws-port", "0",
         "--database-url", dsn, "--sys-interval", "0", "--archive-interval", "0.5"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=open(work / "broker.log", "w"),
    )  # fmt: skip
    return broker, port


def start_live_job(env: dict[str, str], work: Path, port: int) -> subprocess.Popen:
    """`manage.py run_rules --live` as `make run` starts it, at debug level (`work/live.log`)."""
    return subprocess.Popen(
        [sys.executable, "manage.py", "run_rules", "--live", "--checkpoint", str(work / "ckpt"),
         "-v", "2"],
        cwd=REPO, env=dict(env, MQTT_INTERNAL_PORT=str(port)),
        stdout=subprocess.DEVNULL, stderr=open(work / "live.log", "w"),
    )  # fmt: skip


def wait_for_job(job: subprocess.Popen, work: Path, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while "live rules job running" not in (work / "live.log").read_text():
        assert job.poll() is None, (work / "live.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "live job did not start"
        time.sleep(0.5)


def _free_port() -> int:
    from common.runtime.embedded import free_port

    return free_port()


def stage_breakdown(log: str) -> str:
    """What the latency is made of, from the job's debug lines: how old the newest message of a
    batch was when its evaluation began (the feed or the segments, plus the wait for the batch
    before), the evaluation (plan and Spark job), the whole batch (evaluation, then actions
    handed over and figures written)."""
    import re

    ages = [float(a) for a in re.findall(r"newest message (-?[\d.]+)s old at batch start", log)]
    evaluations = [float(e) for e in re.findall(r"evaluated \d+ results in ([\d.]+)s", log)]
    batches = [float(b) for b in re.findall(r"batch \d+ done in ([\d.]+)s", log)]

    def median(values: list[float]) -> str:
        return f"{statistics.median(values) * 1000:.0f} ms" if values else "n/a"

    return (
        f"{len(batches)} batches; median newest-message age at batch start {median(ages)}, "
        f"evaluation {median(evaluations)}, whole batch {median(batches)}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", default="10,100,1000")
    parser.add_argument("--rate", type=float, default=10.0, help="messages/s in total")
    parser.add_argument("--seconds", type=float, default=30.0, help="per rule count")
    parser.add_argument("--tenants", type=int, default=200, help="the rules' tenants")
    parser.add_argument(
        "--background",
        type=float,
        default=0.0,
        help="more msg/s that the rules read and do not match (a device's reading below the "
        "WHERE's threshold): the load a job evaluates beside the probes that fire actions",
    )
    parser.add_argument("--attack", action="store_true", help="then the last count under attack")
    parser.add_argument(
        "--feed",
        choices=("on", "off"),
        default="on",
        help="on: the broker hands the rules' rows to the job through the live feed (Redis), as "
        "`make run` does; off: the job reads the archive's live segments (before issue 43)",
    )
    parser.add_argument(
        "--first-match",
        type=int,
        default=0,
        metavar="N",
        help="then N rule changes (saved, enabled, edited in turn) under the background load: "
        "the time from each to its first webhook",
    )
    parser.add_argument(
        "--sink",
        action="store_true",
        help="each rule also delivers to an HTTP-batch sink (outbox and sender): its latency too",
    )
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args(argv)
    global TENANTS, SINK  # noqa: PLW0603 (seed, add_rules and the publishers read them)
    TENANTS, SINK = args.tenants, args.sink
    steps = [int(x) for x in args.rules.split(",")]
    dsn = _django()
    receiver = Receiver()
    secrets = seed(max(steps), receiver.url)
    work = Path(tempfile.mkdtemp(prefix="bench-rules-live-"))
    env = dict(
        os.environ,
        DATABASE_URL=dsn,
        OBJECT_STORE_URL=f"file://{work / 'objects'}",
        MQTT_SERVICE_KEY="bench-rules-key",
        WEBHOOK_ALLOW="127.0.0.1",  # the receivers are local (an operator's allow-list)
    )
    for name in ("REDIS_URL", "RULES_FEED_URL", "RULES_FEED_KEY"):
        env.pop(name, None)
    if args.feed == "on":
        from common.runtime import embedded

        env["RULES_FEED_URL"] = embedded.redis_url()
        env["RULES_FEED_KEY"] = f"rules:bench:{os.getpid()}"
    os.environ["WEBHOOK_ALLOW"] = "127.0.0.1"  # rules are saved here: their URLs are judged here
    broker, port = start_broker(dsn, env, work)
    add_rules(0, steps[0], receiver.url)
    job = start_live_job(env, work, port)
    results = []
    sink_lines: list[str] = []
    try:
        wait_for_job(job, work)
        import paho.mqtt.client as mqtt

        clients = {}
        acked = Counter()  # PUBACKs by reason: what the broker took (a publish still in paho's
        # queue when the run ends was offered, never acknowledged)

        def on_publish(client, userdata, mid, reason_code, properties) -> None:
            acked[str(reason_code)] += 1

        for slug, secret in secrets.items():
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{slug}-pub")
            client.on_publish = on_publish
            client.username_pw_set(f"{slug}/dev", secret)
            client.connect("127.0.0.1", port)
            client.loop_start()
            clients[slug] = client
        time.sleep(2)
        enabled = steps[0]
        phases = [(step, "") for step in steps]
        if args.attack:
            phases.append((steps[-1], "during attack"))
        attack_stop = threading.Event()
        for step, phase in phases:
            if step > enabled:
                add_rules(enabled, step, receiver.url)
                enabled = step
                time.sleep(5)  # the job reloads the rules at its next batch
            if phase:
                tarpit = Tarpit()
                evil = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="rb-evil-pub")
                evil.username_pw_set("rb-evil/dev", add_attacker(tarpit.url))
                evil.connect("127.0.0.1", port)
                evil.loop_start()
                time.sleep(5)  # the job loads the attacker's rules
                assert evil.is_connected(), "the attacker's device did not connect"
                threading.Thread(target=attack, args=(evil, attack_stop), daemon=True).start()
                time.sleep(5)  # the attack under way
            sent: dict[str, float] = {}
            load = os.getloadavg()[0]
            end = time.monotonic() + args.seconds
            seq = 0
            # Ticks of 10 ms, each sending its share of probes (`--rate`, matched: an action
            # each) and of background readings (`--background`, read by the rules, not matched).
            tick, owed_probes, owed_background = 0.01, 0.0, 0.0
            next_tick = time.monotonic()
            while time.monotonic() < end:
                owed_probes += args.rate * tick
                owed_background += args.background * tick
                while owed_background >= 1:
                    owed_background -= 1
                    rule = random.randrange(step)
                    reading = json.dumps(
                        {"id": "bg", "sent": time.time(), "t": 5, "hum": 41.5, "bat": 3.7,
                         "fw": "1.4.2", "seq": seq}
                    )  # fmt: skip
                    clients[f"rb-{rule % TENANTS:03d}"].publish(f"sensors/{rule}/x", reading, qos=1)
                while owed_probes >= 1:
                    owed_probes -= 1
                    rule = random.randrange(step)
                    ident = f"{step}-{seq}"
                    payload = json.dumps({"id": ident, "sent": time.time(), "t": 20})
                    clients[f"rb-{rule % TENANTS:03d}"].publish(f"sensors/{rule}/x", payload, qos=1)
                    sent[ident] = time.time()
                    seq += 1
                next_tick += tick
                pause = next_tick - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
            settle = time.monotonic() + 30
            while time.monotonic() < settle and not all(i in receiver.latencies for i in sent):
                time.sleep(0.2)
            got = sorted(receiver.latencies[i] for i in sent if i in receiver.latencies)
            p50 = statistics.median(got) if got else float("nan")
            p99 = got[min(len(got) - 1, int(len(got) * 0.99))] if got else float("nan")
            results.append(
                (step, phase, len(sent), len(got), p50, p99, got[-1] if got else 0, load)
            )
            print(f"{step} rules {phase}: {len(got)}/{len(sent)} actions, p50 {p50:.2f}s "
                  f"p99 {p99:.2f}s max {got[-1] if got else 0:.2f}s (load {load:.1f})",
                  flush=True)  # fmt: skip
            if SINK:
                while time.monotonic() < settle and not all(
                    i in receiver.sink_latencies for i in sent
                ):
                    time.sleep(0.2)
                taken = sorted(
                    receiver.sink_latencies[i] for i in sent if i in receiver.sink_latencies
                )
                sink_p50 = statistics.median(taken) if taken else float("nan")
                sink_p99 = (
                    taken[min(len(taken) - 1, int(len(taken) * 0.99))] if taken else float("nan")
                )
                sink_line = (f"  the HTTP-batch sink: {len(taken)}/{len(sent)} outputs taken, p50 "
                             f"{sink_p50:.2f}s p99 {sink_p99:.2f}s max {taken[-1] if taken else 0:.2f}s")  # fmt: skip
                print(sink_line, flush=True)
                sink_lines.append(f"{step} rules {phase or 'before'}: {sink_line.strip()}")
            print("  the job's figures:", job_figures(), flush=True)
            print(f"  publishes acknowledged so far (all phases): {dict(acked)}", flush=True)
            if phase:
                attack_stop.set()
                time.sleep(5)  # the job records the attacker's last batches
                from tenants.models import RuleActionRetry, RuleMetrics

                figures = {
                    m.rule.name: (
                        f"{m.matched} matched, {m.failed} failed, {m.actions_ok} actions ok, "
                        f"{m.actions_failed} failed"
                        + (", paused by the job" if m.rule.paused_at else "")
                    )
                    for m in RuleMetrics.objects.filter(rule__tenant__slug="rb-evil")
                }
                waiting = RuleActionRetry.objects.filter(rule__tenant__slug="rb-evil").count()
                attack_note = (
                    f"the attacker's rules: {figures}; the tarpit held {len(tarpit.held)} "
                    f"connections; {waiting} of its webhook outputs waited in the durable queue"
                )
                print(attack_note, flush=True)
        if args.first_match:
            background_stop = threading.Event()
            threading.Thread(
                target=background,
                args=(clients, steps[-1], args.background, background_stop),
                daemon=True,
            ).start()
            try:
                matches = first_matches(clients["rb-000"], receiver, args.first_match, receiver.url)
            finally:
                background_stop.set()
        for client in clients.values():
            client.disconnect()
            client.loop_stop()
    finally:
        job.terminate()
        broker.terminate()
        job.wait(timeout=60)
        broker.wait(timeout=30)
        stages = stage_breakdown((work / "live.log").read_text())
        print(stages, flush=True)
        from tenants.models import Tenant

        Tenant.objects.filter(slug__startswith="rb-").delete()  # rb-evil too
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept", work)
    if args.write:
        with (REPO / "bench" / "RESULTS.md").open("a") as out:
            title = "issue 29: under attack" if args.attack else "issue 14"
            title += f"; live feed {args.feed}"
            attack_flag = " --attack" if args.attack else ""
            out.write(
                f"\n## Live rules latency ({title})\n\n"
                f"Command: `.venv/bin/python -m bench.rules_live --rules {args.rules} "
                f"--rate {args.rate:g} --seconds {args.seconds:g}{attack_flag} "
                f"--tenants {TENANTS} --background {args.background:g} "
                f"--feed {args.feed} --write`  \n"
                f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {os.cpu_count()} cores shared by "
                "the broker, Postgres, the Spark job and the publishers (and other jobs on the "
                "machine: load average shown).  \n"
                f"{TENANTS} tenants; one webhook action per rule; QoS 1 publishes at "
                f"{args.rate:g} msg/s, each to a random enabled rule"
                + (
                    f", beside {args.background:g} msg/s of readings the rules read and do not "
                    "match"
                    if args.background
                    else ""
                )
                + "; latency = webhook received − publish sent.\n\n"
                "| enabled rules | phase | sent | actions seen | p50 s | p99 s | max s | load avg |\n"
                "|---:|---|---:|---:|---:|---:|---:|---:|\n"
            )
            for step, phase, sent_n, got_n, p50, p99, worst, load in results:
                out.write(
                    f"| {step:,} | {phase or 'before'} | {sent_n} | {got_n} | {p50:.2f} | "
                    f"{p99:.2f} | {worst:.2f} | {load:.1f} |\n"
                )
            out.write(f"\nThe job's micro-batches (its `-v 2` log): {stages}.\n")
            for line in sink_lines:
                out.write(f"\n{line}.\n")
            if args.attack:
                out.write(f"\nDuring the attack, {attack_note}.\n")
            if args.first_match:
                out.write(
                    "\nFirst match after a rule change (then a probe every 50 ms to the topic "
                    f"it reads, beside {args.background:g} msg/s of readings): "
                    + ", ".join(f"{change} {took:.2f} s" for change, took in matches)
                    + ".\n"
                )


if __name__ == "__main__":
    main()
