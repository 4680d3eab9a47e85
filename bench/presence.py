"""Presence writes under a connect storm (issue 19): does the broker's presence writer (the
portal's online state, `data_plane.tenancy.presence`) keep up, and what does it cost the storm?

    .venv/bin/python -m bench.presence [--devices 2000] [--rounds 3]

`--devices` distinct devices (each its own secret, in Postgres) connect 500 at a time, then all
disconnect, `--rounds` times per broker: the first round against a fresh broker is the cold
cache, the next ones warm. Each broker runs with presence on and with it off (`--no-presence`),
in A-B-B-A order (on, off, off, on) so drift on a shared machine lands on both sides. Reported:

- connects/s (all CONNACKs of a round) and disconnects/s (until the broker has let every
  connection go, as its `tenants_deviceconnection` rows or, without presence, the socket closes
  tell),
- how long the broker takes to handle the disconnects (a fresh CONNECT sent after them is
  answered once it has read them all),
- with presence on, the catch-up lag: after the last CONNACK, how long until every connection
  has its row; after the DISCONNECTs were sent, how long until none has (the broker's own
  handling included: when its hooks saw the last one is reported beside it).

Beside them, Mosquitto's connect rate with the same users in a password file, for scale (it
writes no presence anywhere). Uses the embedded cluster (or DATABASE_URL) and a scratch tenant
it removes afterwards; the broker is pinned to core 0 and the generator to core 1.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from bench import brokers
from bench.brokers import REPO, RunningBroker
from bench.loadgen import Stats, close_all, connect
from bench.tenancy import TENANT, _cleanup, _django, _seed, start_mosquitto_with_passwords
from common.contracts import tables
from common.runtime.processes import data_plane_command

_ROWS = f"""
SELECT count(*) FROM {tables.DEVICE_CONNECTION} c JOIN {tables.TENANT} t ON t.id = c.tenant_id
 WHERE t.slug = %s
"""


_LAST_SEEN = f"""
SELECT extract(epoch FROM max(d.last_disconnected_at))::float8 FROM {tables.DEVICE} d
  JOIN {tables.TENANT} t ON t.id = d.tenant_id WHERE t.slug = %s
"""


def start_ours(dsn: str, presence: bool) -> RunningBroker:
    workdir = Path(tempfile.mkdtemp(prefix="bench-presence-"))
    port = brokers._free_port()
    extra = ["--sys-interval", "0", "--no-archive", "--max-queued", "5000"]
    if not presence:
        extra.append("--no-presence")
    cmd = data_plane_command(port=port, ws_port=0, database_url=dsn, extra=extra)
    process = subprocess.Popen(
        brokers._pinned(cmd),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "stderr.log", "w"),
        preexec_fn=brokers._raise_nofile,
    )
    brokers._wait_port(process, port, "ours-pg")
    label = "ours, presence on" if presence else "ours, presence off"
    return RunningBroker(label, process, port, workdir)


async def _rows_reach(db: psycopg.AsyncConnection, target: int, limit: float = 60.0) -> float:
    """Seconds until the tenant has `target` presence rows (polled every 10 ms)."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit:
        cursor = await db.execute(_ROWS, (TENANT,))
        (count,) = await cursor.fetchone()
        if count == target:
            return time.perf_counter() - started
        await asyncio.sleep(0.01)
    raise RuntimeError(f"presence rows never reached {target} (last {count})")


async def storm_round(
    broker: RunningBroker, users: dict[str, str], db: psycopg.AsyncConnection | None
) -> dict[str, float]:
    stats = Stats()
    gate = asyncio.Semaphore(500)

    async def one(user: str, secret: str):
        async with gate:  # a refused CONNACK raises: the run fails rather than flatters
            return await connect("127.0.0.1", broker.port, stats, user.split("/")[1], user, secret)

    started = time.perf_counter()
    clients = await asyncio.gather(*(one(u, s) for u, s in users.items()))
    connect_s = time.perf_counter() - started
    out = {"connects_per_s": len(users) / connect_s}
    if db is not None:
        out["lag_up_s"] = await _rows_reach(db, len(users))  # from the last CONNACK
    started, wall_started = time.perf_counter(), time.time()
    close_all(list(clients))
    # The broker's own share: a fresh CONNECT sent after every DISCONNECT is answered once the
    # broker has read them (one event loop), so its CONNACK marks the disconnects handled.
    user, secret = next(iter(users.items()))
    canary = await connect("127.0.0.1", broker.port, stats, "canary", user, secret)
    out["broker_drain_s"] = time.perf_counter() - started
    close_all([canary])
    if db is not None:
        await _rows_reach(db, 0)
        out["lag_down_s"] = time.perf_counter() - started  # from the DISCONNECTs sent
        out["disconnects_per_s"] = len(users) / out["lag_down_s"]
        # When the broker's hook saw the last disconnect (the time presence records with it):
        # what is left of the lag is presence's own.
        cursor = await db.execute(_LAST_SEEN, (TENANT,))
        (last,) = await cursor.fetchone()
        out["hooks_done_s"] = last - wall_started
    else:
        await asyncio.sleep(0.5)
    return out


async def run(dsn: str, users: dict[str, str], rounds: int) -> list[str]:
    results: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db:
        for presence in (True, False, False, True):
            broker = start_ours(dsn, presence)
            try:
                for index in range(rounds):
                    figures = await storm_round(broker, users, db if presence else None)
                    figures["warm"] = float(index > 0)
                    results[presence].append(figures)
                    print(broker.name, {k: round(v, 3) for k, v in figures.items()}, flush=True)
            finally:
                broker.stop()
    lines = []
    for presence in (True, False):
        warm = [r for r in results[presence] if r["warm"]]
        cold = [r for r in results[presence] if not r["warm"]]
        line = (
            f"presence {'on ' if presence else 'off'}  connects/s cold "
            f"{statistics.mean(r['connects_per_s'] for r in cold):>7,.0f}  warm median "
            f"{statistics.median(r['connects_per_s'] for r in warm):>7,.0f}  broker handled "
            f"the disconnects in (median) "
            f"{statistics.median(r['broker_drain_s'] for r in results[presence]) * 1000:,.0f} ms"
        )
        if presence:
            line += (
                f"  disconnects/s (rows gone) median "
                f"{statistics.median(r['disconnects_per_s'] for r in warm):>7,.0f}"
                f"  catch-up after the last CONNACK median "
                f"{statistics.median(r['lag_up_s'] for r in results[presence]) * 1000:,.0f} ms"
                f" (max {max(r['lag_up_s'] for r in results[presence]) * 1000:,.0f})"
                f", after the DISCONNECTs median "
                f"{statistics.median(r['lag_down_s'] for r in results[presence]) * 1000:,.0f} ms"
                f" (max {max(r['lag_down_s'] for r in results[presence]) * 1000:,.0f}), of which "
                f"the broker's hooks took (median) "
                f"{statistics.median(r['hooks_done_s'] for r in results[presence]) * 1000:,.0f} ms"
            )
        lines.append(line)
    mosquitto = start_mosquitto_with_passwords(users)
    try:
        rates = [(await storm_round(mosquitto, users, None))["connects_per_s"] for _ in range(2)]
    finally:
        mosquitto.stop()
    lines.append(f"mosquitto (password file)  connects/s {statistics.median(rates):>7,.0f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    dsn = _django()
    users = _seed(args.devices)
    try:
        import uvloop

        uvloop.install()
        for line in asyncio.run(run(dsn, users, args.rounds)):
            print(line, flush=True)
    finally:
        _cleanup()


if __name__ == "__main__":
    main()
