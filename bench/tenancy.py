"""The tenancy layer under load (issue 5): authenticated connect storms against Postgres, and the
cost of ACL and quota checks on the publish path.

    .venv/bin/python -m bench.tenancy [--devices 2000] [--rounds 3] [--seconds 5]

1. Connect storm: `--devices` distinct devices (`bench-auth/dev-N`, each its own secret) connect
   500 at a time and disconnect, `--rounds` times: the first round against a fresh broker is
   the cold cache (every device looked up in Postgres), the next ones warm. Beside it, Mosquitto
   with the same users in a password file (`mosquitto_passwd -U`).
2. Publish path: 100 pairs, QoS 0 and QoS 1, against the broker on a static tenants file (no
   ACL, no quota) and against the broker on Postgres with the tenant's ACL rules (10) and quotas
   (rates high enough not to refuse) checked on every PUBLISH and SUBSCRIBE, usage metered.
   Reported as the ratio of delivered msg/s and of CPU per 1,000.

Uses the embedded cluster (or DATABASE_URL) and scratch tenants it removes afterwards; the
broker is pinned to core 0 and the generator to core 1 as in `bench.compare`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench import brokers, scenarios
from bench.brokers import REPO, RunningBroker
from bench.loadgen import Stats, close_all, connect
from common.runtime.processes import data_plane_command

TENANT, PAIRS_TENANT = "bench-auth", "bench"


def _django() -> str:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)

    return settings.DATABASE_URL


def _seed(devices: int) -> dict[str, str]:
    """Scratch tenants: `bench-auth` with N devices (secrets returned), `bench` with device `d`
    (the generator's fixed password), 10 ACL rules and quotas."""
    from common.security import secrets
    from tenants.acls import services as acl_services
    from tenants.devices import services as device_services
    from tenants.models import Credential, Tenant
    from tenants.tenant import services as tenant_services

    Tenant.objects.filter(slug__in=[TENANT, PAIRS_TENANT]).delete()
    tenant = tenant_services.tenant_create(TENANT)
    tenant_services.tenant_set_quota(tenant, {"max_connections": 1_000_000})
    users = {}
    for index in range(devices):
        device, secret = device_services.device_create(
            tenant=tenant, name=f"dev-{index}", client_id_policy="any"
        )
        users[f"{TENANT}/{device.name}"] = secret
    pairs = tenant_services.tenant_create(PAIRS_TENANT)
    device, _ = device_services.device_create(tenant=pairs, name="d", client_id_policy="any")
    Credential.objects.filter(device=device).update(
        secret_hash=secrets.hash_secret(brokers.PASSWORD)
    )
    for topic in ("admin/#", "$internal/#", "ops/+/secret", "firmware/#", "billing/#"):
        acl_services.acl_add(tenant=pairs, action="both", permission="deny", topic=topic)
    for topic in ("bench/slow/#", "bench/pairs/#", "bench/fan/#", "bench/${client}/#", "t/#"):
        acl_services.acl_add(tenant=pairs, action="both", permission="allow", topic=topic)
    tenant_services.tenant_set_quota(
        pairs,
        {
            "max_connections": 100_000,
            "max_publish_rate": 10_000_000,
            "max_inbound_bytes_rate": 2_000_000_000,
            "max_outbound_bytes_rate": 2_000_000_000,
            "max_message_size": 1_000_000,
            "max_subscriptions_per_client": 100,
            "max_queued_messages": 5000,
        },
    )
    return users


def _cleanup() -> None:
    from tenants.models import Tenant

    Tenant.objects.filter(slug__in=[TENANT, PAIRS_TENANT]).delete()


def start_ours_on_postgres(dsn: str) -> RunningBroker:
    workdir = Path(tempfile.mkdtemp(prefix="bench-ours-pg-"))
    port = brokers._free_port()
    cmd = data_plane_command(
        port=port,
        ws_port=0,
        database_url=dsn,
        extra=["--sys-interval", "0", "--no-archive", "--max-queued", "5000"],
    )
    process = subprocess.Popen(
        brokers._pinned(cmd),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "stderr.log", "w"),
        preexec_fn=brokers._raise_nofile,
    )
    brokers._wait_port(process, port, "ours-pg")
    return RunningBroker("ours (Postgres, ACL+quota)", process, port, workdir)


def start_mosquitto_with_passwords(users: dict[str, str]) -> RunningBroker:
    workdir = Path(tempfile.mkdtemp(prefix="bench-mosquitto-auth-"))
    passwords = workdir / "passwords"
    passwords.write_text("".join(f"{user}:{secret}\n" for user, secret in users.items()))
    subprocess.run(["mosquitto_passwd", "-U", str(passwords)], check=True)
    # Run as root, Mosquitto reads the password file after dropping to its own user.
    workdir.chmod(0o755)
    passwords.chmod(0o644)
    port = brokers._free_port()
    config = workdir / "mosquitto.conf"
    config.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous false\npassword_file {passwords}\n"
        "persistence false\nlog_type error\n"
    )
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    process = subprocess.Popen(
        brokers._pinned([binary, "-c", str(config)]),
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "stderr.log", "w"),
        preexec_fn=brokers._raise_nofile,
    )
    brokers._wait_port(process, port, "mosquitto")
    return RunningBroker("mosquitto (password file)", process, port, workdir)


async def storm(broker: RunningBroker, users: dict[str, str], parallel: int = 500) -> float:
    """Every user connects (distinct device, own secret), then all disconnect: connects/s."""
    stats = Stats()
    gate = asyncio.Semaphore(parallel)

    async def one(user: str, secret: str):
        async with gate:  # a refused CONNACK raises: the run fails rather than flatters
            return await connect("127.0.0.1", broker.port, stats, user.split("/")[1], user, secret)

    started = time.perf_counter()
    clients = await asyncio.gather(*(one(u, s) for u, s in users.items()))
    elapsed = time.perf_counter() - started
    close_all(list(clients))
    await asyncio.sleep(0.5)
    return len(users) / elapsed


async def run_storms(dsn: str, users: dict[str, str], rounds: int) -> list[str]:
    lines = []
    for start in (
        lambda: start_ours_on_postgres(dsn),
        lambda: start_mosquitto_with_passwords(users),
    ):
        broker = start()
        try:
            rates = [await storm(broker, users) for _ in range(rounds)]
        finally:
            broker.stop()
        warm = rates[1:] or rates
        lines.append(
            f"connect storm  {broker.name:<28} cold {rates[0]:>7,.0f}/s   warm "
            + "  ".join(f"{r:,.0f}" for r in warm)
            + f"/s   (median warm {sorted(warm)[len(warm) // 2]:,.0f}/s)"
        )
        print(lines[-1], flush=True)
    return lines


async def run_publish_path(dsn: str, seconds: float) -> list[str]:
    """Each configuration runs twice in A-B-B-A order, so drift on a shared machine (another
    tenant's load, clock scaling) lands on both sides; the figures are the means."""
    lines = []
    starts = {
        "static": lambda: brokers.start("ours"),
        "postgres": lambda: start_ours_on_postgres(dsn),
    }
    for qos in (0, 1):
        runs: dict[str, list] = {"static": [], "postgres": []}
        for label in ("static", "postgres", "postgres", "static"):
            broker = starts[label]()
            try:
                runs[label].append(await scenarios.pairs(broker, 100, qos, seconds))
            finally:
                broker.stop()
        base_rate, checked_rate = (
            sum(r.delivered_per_s for r in runs[k]) / 2 for k in ("static", "postgres")
        )
        base_cpu, checked_cpu = (
            sum(r.cpu_per_1000 for r in runs[k]) / 2 for k in ("static", "postgres")
        )
        loss = sum(r.loss for r in runs["postgres"])
        lines.append(
            f"pairs n=100 qos={qos}  no ACL/quota {base_rate:>8,.0f} msg/s "
            f"cpu/1k {base_cpu:.4f} | ACL+quota {checked_rate:>8,.0f} msg/s "
            f"cpu/1k {checked_cpu:.4f} | throughput {checked_rate / base_rate:.2f}x, "
            f"CPU per message {checked_cpu / base_cpu:.2f}x, QoS 1 loss {loss if qos else '-'}"
        )
        print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--skip", default="", help="storm or publish")
    args = parser.parse_args(argv)
    dsn = _django()
    users = _seed(args.devices)
    try:
        import uvloop

        uvloop.install()
        if "storm" not in args.skip:
            asyncio.run(run_storms(dsn, users, args.rounds))
        if "publish" not in args.skip:
            asyncio.run(run_publish_path(dsn, args.seconds))
    finally:
        _cleanup()


if __name__ == "__main__":
    main()
