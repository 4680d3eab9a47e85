"""The embedded defaults: a private Postgres cluster and a Redis server started from local binaries.

Used when `DATABASE_URL` / `REDIS_URL` are unset (the one-command developer set-up and the tests).
Each service lives in a git-ignored folder under `.data/`, listens on 127.0.0.1 on a port chosen
once and remembered in that folder, and is started on demand by whichever process needs it first.
No Django import here: the broker uses it too.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import common

REPO_DIR = Path(common.__file__).resolve().parent.parent  # the checkout, at any depth
DATA_DIR = REPO_DIR / ".data"
PG_BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
DB_NAME = "mqtt_platform"
DB_USER = "postgres"


class EmbeddedServiceError(RuntimeError):
    pass


# The embedded services this process started (not found running): `make run` stops exactly
# these when it ends, and leaves the others as it found them.
STARTED: set[str] = set()


def postgres_dir() -> Path:
    return Path(os.environ.get("EMBEDDED_PG_DIR", DATA_DIR / "postgres"))


def redis_dir() -> Path:
    return Path(os.environ.get("EMBEDDED_REDIS_DIR", DATA_DIR / "redis"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialise start-up between processes (tests, runserver, the broker) racing to start it."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _remembered_port(folder: Path) -> int:
    port_file = folder / "port"
    if port_file.exists():
        return int(port_file.read_text())
    port = free_port()
    port_file.write_text(str(port))
    return port


def _wait_for_port(port: int, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if time.monotonic() > deadline:
            raise EmbeddedServiceError(f"{what} did not start listening on 127.0.0.1:{port}")
        time.sleep(0.05)


# -- Postgres ---------------------------------------------------------------------------------


def _pg_binary(name: str) -> str:
    for bin_dir in PG_BIN_DIRS:
        if (bin_dir / name).exists():
            return str(bin_dir / name)
    found = shutil.which(name)
    if not found:
        raise EmbeddedServiceError(
            f"Postgres server binary {name!r} not found: install the postgresql package "
            "or set DATABASE_URL"
        )
    return found


def _as_postgres_user(cmd: list[str]) -> list[str]:
    # Postgres refuses to run as root; CI and containers often are root.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _chown_to_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(path, entry.pw_uid, entry.pw_gid)


def postgres_url() -> str:
    """The embedded cluster's URL, starting the cluster (and creating it) if needed."""
    folder = postgres_dir()
    with _locked(folder):
        folder.mkdir(parents=True, exist_ok=True)
        port = _remembered_port(folder)
        cluster = folder / "cluster"
        if not (cluster / "PG_VERSION").exists():
            _init_cluster(cluster)
        if not port_open(port):
            _start_cluster(cluster, folder / "postgres.log", port)
            STARTED.add("postgres")
            _wait_for_port(port, "Postgres")
            _create_database(port)
    return f"postgres://{DB_USER}@127.0.0.1:{port}/{DB_NAME}"


def _init_cluster(cluster: Path) -> None:
    cluster.mkdir(parents=True, exist_ok=True)
    _chown_to_postgres(cluster)
    subprocess.run(
        _as_postgres_user(
            [
                _pg_binary("initdb"),
                "-D",
                str(cluster),
                "-U",
                DB_USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _start_cluster(cluster: Path, log: Path, port: int) -> None:
    log.touch()
    _chown_to_postgres(log)
    options = (
        f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
        "-c max_connections=300 -c fsync=on -c shared_buffers=128MB"
    )
    subprocess.run(
        _as_postgres_user(
            [_pg_binary("pg_ctl"), "-D", str(cluster), "-l", str(log), "-o", options, "-w", "start"]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _create_database(port: int) -> None:
    import psycopg  # local: keeps this module importable without the driver

    dsn = f"host=127.0.0.1 port={port} user={DB_USER} dbname=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def stop_postgres() -> None:
    cluster = postgres_dir() / "cluster"
    if (cluster / "postmaster.pid").exists():
        subprocess.run(
            _as_postgres_user([_pg_binary("pg_ctl"), "-D", str(cluster), "-m", "fast", "stop"]),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


# -- Redis ------------------------------------------------------------------------------------


def redis_url() -> str:
    """The embedded Redis's URL, starting it if needed (Celery's broker, the Channels layer)."""
    folder = redis_dir()
    with _locked(folder):
        folder.mkdir(parents=True, exist_ok=True)
        port = _remembered_port(folder)
        if not port_open(port):
            binary = shutil.which("redis-server")
            if not binary:
                raise EmbeddedServiceError(
                    "redis-server not found: install the redis-server package or set REDIS_URL"
                )
            subprocess.run(
                [
                    binary,
                    "--port",
                    str(port),
                    "--bind",
                    "127.0.0.1",
                    "--daemonize",
                    "yes",
                    "--dir",
                    str(folder),
                    "--pidfile",
                    str(folder / "redis.pid"),
                    "--logfile",
                    str(folder / "redis.log"),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            STARTED.add("redis")
            _wait_for_port(port, "Redis")
    return f"redis://127.0.0.1:{port}/0"


def stop_redis() -> None:
    pid_file = redis_dir() / "redis.pid"
    if pid_file.exists():
        try:
            pid = int(pid_file.read_text())
            os.kill(pid, 15)
        except (ProcessLookupError, ValueError):
            return
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # gone when this returns: the caller may report it stopped
