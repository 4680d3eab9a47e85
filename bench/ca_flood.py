"""A CA flood (issue 44, point 2): an attacker tenant with 200 registered CA certificates of one
subject, and two attacker loops doing failing mTLS CONNECTs, beside a victim tenant publishing at
QoS 1; the victim's publish-to-receive latency alone, during the attack, and alone again.

    .venv/bin/python -m bench.ca_flood [/path/to/base] [--seconds 20] [--cas 200] [--rate 100]
        [--pairs 5] [--verify-processes 0,2]

The broker is `python -m data_plane` as operators run it: on Postgres (DATABASE_URL, else the
embedded cluster), with a TLS listener (`--tls-port`, a server certificate of a CA made here),
the archive, journey and metering on, pinned to core 0. The victim is a tenant and device made
by the operator commands (`bench.archive.seed`); it publishes `--rate` msg/s in all, QoS 1,
256 bytes, over `--pairs` publisher/subscriber pairs on plain TCP, each payload stamped, in its
own process at a higher scheduling priority. The attacker tenant registers `--cas` CAs of one
subject through the control plane's own path (`ca_register`: proof of each CA's key; its quota
raised to `--cas` as an operator's override, and the registration rate lifted for the seeding,
as an operator would for a migration). Each attacker loop (a process of its own, on core 1)
connects over TLS with a client certificate that names those CAs' subject as its issuer but is
signed by a key none of them holds, sends CONNECT, reads the refusal and does it again, as fast
as the broker answers: one loop with a user name of the attacker's tenant and a new device name
each time, the other with none (every tenant's CAs of the name are then candidates). Every
attempt presents a certificate never seen before (a fresh serial, so a fresh fingerprint): the
failure throttle per (fingerprint, tenant) never holds it back, and each CONNECT costs the
broker what a first attempt does. Each phase lasts `--seconds` (at most 60).

Reported: the victim's p50/p99 (ms), messages lost, and the ratios during/alone; the attack's
CONNECTs a second and how they were answered; the broker's CPU seconds per phase (its verifier
processes included). Target: the victim's p50 and p99 during the attack within 2x of alone.
`--verify-processes 0,2` (the default) runs it all twice: the certificate checks in the broker's
threads (the default), then in two processes (`MQTT_CERT_VERIFY_PROCESSES=2`). Given an older
checkout (`git archive COMMIT | tar -x -C /tmp/base`), its broker runs first, on the same
database and tenants (A, with its threads).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import archive
from bench.brokers import REPO
from bench.limiter import with_recorder
from bench.loadgen import Client, Stats, close_all, connect_many, connect_packet

MAX_PHASE = 60.0
SUBJECT = "bench flood CA"


# -- the victim (a child process) -------------------------------------------------------------


def _publish_packet(topic: bytes, packet_id: int, size: int) -> bytes:
    """QoS 1 PUBLISH whose payload starts with the send time (as `loadgen` reads it)."""
    payload = struct.pack(">d", time.perf_counter()) + b"v" * (size - 8)
    body = struct.pack(">H", len(topic)) + topic + struct.pack(">H", packet_id) + payload
    length, encoded = len(body), bytearray()
    while True:
        byte, length = length % 128, length // 128
        encoded.append(byte | (0x80 if length else 0))
        if not length:
            break
    return b"\x32" + bytes(encoded) + body


async def victim(port: int, login: list[str], seconds: float, rate: int, pairs: int) -> dict:
    stats = Stats()
    subs = await connect_many(pairs, "127.0.0.1", port, stats, "vsub", *login)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/pairs/victim/{index}", 1)
    acks = Stats()
    pubs: list[Client] = await connect_many(pairs, "127.0.0.1", port, acks, "vpub", *login)
    topics = [f"bench/pairs/victim/{i}".encode() for i in range(pairs)]
    tick, sent, packet_id = 0.01, 0, 0
    per_tick = max(1, round(rate * tick))
    started = next_at = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(per_tick):
            packet_id = packet_id % 65535 + 1
            index = sent % pairs
            pubs[index].transport.write(_publish_packet(topics[index], packet_id, 256))
            sent += 1
        next_at += tick
        await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
    await asyncio.sleep(2)  # the last ones arrive
    close_all(subs + pubs)
    return {
        "p50_ms": round(stats.percentile(0.5), 2),
        "p99_ms": round(stats.percentile(0.99), 2),
        "max_ms": round(stats.percentile(1.0), 2),
        "sent": sent,
        "acked": acks.acked,
        "lost": sent - stats.received,
    }


# -- an attacker loop (a child process) --------------------------------------------------------


async def attacker(port: int, folder: Path, username: str, seconds: float) -> dict:
    """Failing mTLS CONNECTs back to back, each with a certificate never presented before."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    key = serialization.load_pem_private_key((folder / "attacker.key").read_bytes(), None)
    server_ca = str(folder / "server-ca.pem")
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SUBJECT)])
    answers: dict[str, int] = {}
    attempts, deadline = 0, time.perf_counter() + seconds
    scratch = Path(tempfile.mkdtemp(prefix="bench-ca-flood-"))
    key_path = folder / "attacker.key"
    try:
        while time.perf_counter() < deadline:
            cert = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dev")]))
                .issuer_name(issuer)
                .public_key(key.public_key())  # type: ignore[union-attr]
                .serial_number(x509.random_serial_number())
                .not_valid_before(datetime.now(UTC) - timedelta(days=1))
                .not_valid_after(datetime.now(UTC) + timedelta(days=30))
                .sign(key, hashes.SHA256())  # type: ignore[arg-type]
            )
            cert_path = scratch / "leaf.pem"
            cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            context = ssl.create_default_context(cafile=server_ca)
            context.load_cert_chain(str(cert_path), str(key_path))
            user = f"{username}/dev-{attempts}" if username else None
            attempts += 1
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=context), 10
                )
                writer.write(connect_packet(f"flood-{attempts}", user, None))
                answer = await asyncio.wait_for(reader.read(4), 10)
                code = f"connack {answer[3]:#04x}" if len(answer) == 4 else "closed"
                writer.close()
            except (OSError, TimeoutError, ssl.SSLError) as exc:
                code = type(exc).__name__
            answers[code] = answers.get(code, 0) + 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"attempts": attempts, "per_second": round(attempts / seconds, 1), "answers": answers}


def role(argv: list[str]) -> None:
    """In a child process: `victim PORT USER PASSWORD SECONDS RATE PAIRS` or
    `attacker PORT FOLDER USERNAME SECONDS` (USERNAME `-`: none)."""
    import uvloop

    if argv[0] == "victim":
        port, user, password, seconds, rate, pairs = argv[1:7]
        body = victim(int(port), [user, password], float(seconds), int(rate), int(pairs))
    else:
        port, folder, username, seconds = argv[1:5]
        body = attacker(
            int(port), Path(folder), "" if username == "-" else username, float(seconds)
        )
    print(json.dumps(uvloop.run(body)), flush=True)


def child(*args: str, nice: int = 0, core: int | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "bench.ca_flood", "--role", *args]
    if core is not None and shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", str(core), *cmd]
    if nice:
        cmd = ["nice", "-n", str(nice), *cmd]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)


# -- the operator's side: tenants, CAs, the broker ---------------------------------------------


def seed_attacker(cas: int, folder: Path) -> str:
    """The attacker's tenant with `cas` CAs of one subject, registered as tenants do
    (`ca_register`, each with its proof of possession)."""
    archive._django()
    from cryptography.hazmat.primitives.asymmetric import ec
    from django.conf import settings

    from common.security.device_credentials import make_ca, make_leaf, pem_of
    from tenants.devices import identity
    from tenants.tenant import services as tenant_services

    slug = f"bench-caf-{os.urandom(3).hex()}"
    tenant = tenant_services.tenant_create(slug)
    tenant_services.tenant_set_quota(tenant, {"max_ca_certificates": cas})
    settings.CA_REGISTRATION_RATE = f"{cas + 10}/min"  # the operator's seeding, not the attack
    code = identity.registration_code(tenant)
    for number in range(cas):
        ca, ca_key = make_ca(SUBJECT)
        verification, _ = make_leaf(code, ca, ca_key, days=1)
        identity.ca_register(
            tenant=tenant,
            name=f"ca-{number}",
            pem=pem_of(ca),
            verification_pem=pem_of(verification),
        )
    (folder / "attacker.key").write_text(pem_of(ec.generate_private_key(ec.SECP256R1())))
    return slug


def start_broker(
    folder: Path, store_url: str, verify_processes: int, repo: Path = REPO
) -> tuple[subprocess.Popen, dict[str, int]]:
    from common.runtime.embedded import postgres_url
    from common.runtime.processes import data_plane_command
    from common.security.device_credentials import make_ca, make_leaf, pem_of

    ca, ca_key = make_ca("bench server CA")
    server, server_key = make_leaf("localhost", ca, ca_key, server_names=["localhost", "127.0.0.1"])
    (folder / "server-ca.pem").write_text(pem_of(ca))
    (folder / "server.pem").write_text(pem_of(server))
    (folder / "server.key").write_text(pem_of(server_key))
    database = os.environ.get("DATABASE_URL") or postgres_url()
    extra = ["--tls-port", "0", "--tls-cert", str(folder / "server.pem")]
    extra += ["--tls-key", str(folder / "server.key")]
    cmd = data_plane_command(port=0, ws_port=0, database_url=database, extra=extra)
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        cmd = ["taskset", "-c", "0", *cmd]
    process = subprocess.Popen(
        cmd,
        cwd=repo,
        env={
            **os.environ,
            "OBJECT_STORE_URL": store_url,
            "MQTT_CERT_VERIFY_PROCESSES": str(verify_processes),
        },
        stdout=subprocess.PIPE,
        stderr=open(folder / "broker.log", "w"),
        text=True,
    )
    ports: dict[str, int] = {}
    deadline = time.monotonic() + 60
    while not {"mqtt", "mqtts"} <= set(ports):
        line = process.stdout.readline() if process.stdout else ""
        if not line or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the broker did not start: see {folder / 'broker.log'}")
        if line.startswith("LISTENING"):
            _, name, address = line.split()
            ports[name] = int(address.rsplit(":", 1)[1])
    return process, ports


def cpu_seconds(pid: int) -> float:
    """CPU seconds of the broker and of its live children (the verifier processes)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--role"]:
        role(argv[1:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "base", type=Path, nargs="?", help="an older checkout whose broker runs first (A)"
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--cas", type=int, default=200)
    parser.add_argument("--rate", type=int, default=100, help="the victim's msg/s, in all")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument(
        "--verify-processes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[0, 2],
        help="MQTT_CERT_VERIFY_PROCESSES per run, comma-separated (0: the verifier threads)",
    )
    args = parser.parse_args(argv)
    seconds = min(args.seconds, MAX_PHASE)
    folder = Path(tempfile.mkdtemp(prefix="bench-ca-flood-"))
    slugs, creds = archive.seed(1)
    started = time.perf_counter()
    attacker_slug = seed_attacker(args.cas, folder)
    slugs.append(attacker_slug)
    print(
        f"{args.cas} CAs of {SUBJECT!r} registered for {attacker_slug} in "
        f"{time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f} "
        f"({os.cpu_count()} cores)",
        flush=True,
    )
    stores = archive.Stores("file")
    summary = []
    try:
        runs = [(REPO, processes) for processes in args.verify_processes]
        if args.base is not None:  # the older build first, with its threads
            runs.insert(0, (args.base.resolve(), 0))
        for repo, processes in runs:
            mode = f"{processes} verifier processes" if processes else "verifier threads (2)"
            mode = f"{'A (' + repo.name + ')' if repo != REPO else 'B'}, {mode}"
            print(f"-- {mode}", flush=True)
            with_recorder(repo)
            results = run_phases(
                folder, stores, processes, creds[0], attacker_slug, seconds, args, repo
            )
            summary += ratios(mode, results)
    finally:
        stores.close()
        archive.cleanup(slugs)
        shutil.rmtree(folder, ignore_errors=True)
    print("\n".join(summary))


def run_phases(
    folder: Path,
    stores: archive.Stores,
    processes: int,
    login: tuple[str, str],
    attacker_slug: str,
    seconds: float,
    args: argparse.Namespace,
    repo: Path = REPO,
) -> dict[str, dict]:
    broker, ports = start_broker(folder, stores.new(), processes, repo)
    victim_args = [str(ports["mqtt"]), *login, str(seconds), str(args.rate), str(args.pairs)]
    results: dict[str, dict] = {}
    try:
        time.sleep(1)
        for phase in ("alone", "attack", "alone again"):
            cpu = cpu_seconds(broker.pid)
            loops = []
            if phase == "attack":
                for username in (attacker_slug, "-"):
                    loops.append(
                        child(
                            "attacker",
                            str(ports["mqtts"]),
                            str(folder),
                            username,
                            str(seconds + 3),
                            core=1,
                        )
                    )
                time.sleep(2)  # the loops are connecting
            quiet = child("victim", *victim_args, nice=-10)
            results[phase] = json.loads(quiet.communicate()[0])
            for number, loop in enumerate(loops):
                results[f"attacker {number + 1}"] = json.loads(loop.communicate()[0])
            results[phase]["broker_cpu_s"] = round(cpu_seconds(broker.pid) - cpu, 2)
            print(f"{phase}: {json.dumps(results[phase])}", flush=True)
            for number in range(len(loops)):
                print(f"  attacker {number + 1}: {json.dumps(results[f'attacker {number + 1}'])}")
    finally:
        broker.terminate()
        broker.wait(timeout=20)
    return results


def ratios(mode: str, results: dict[str, dict]) -> list[str]:
    """During ÷ alone, against each quiet phase (the machine's own noise shows between them)."""
    lines = []
    attack = results["attack"]
    for what in ("p50_ms", "p99_ms"):
        quiet = [results["alone"][what], results["alone again"][what]]
        against = [attack[what] / q if q else float("nan") for q in quiet]
        verdict = "within 2x" if max(against) <= 2 else "OVER 2x"
        lines.append(
            f"{mode}: victim {what} alone {quiet[0]} / {quiet[1]}, during the attack "
            f"{attack[what]}: {against[0]:.2f}x / {against[1]:.2f}x ({verdict})"
        )
    return lines


if __name__ == "__main__":
    main()
