"""Celery's worker and beat as real processes, started from the table of processes as `make run`
and the deployment start them, on the test's database and the embedded Redis."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings

from common.runtime import embedded, processes


@contextmanager
def worker_and_beat(
    tmp_path: Path, database: str, roles: tuple[str, ...] = ("worker", "beat")
) -> Iterator[dict[str, str]]:
    """A worker and a beat as the table of processes runs them (separate processes, as in
    production: one beat in the fleet), with this process's environment as it is now."""
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{database}"
    env["REDIS_URL"] = os.environ.get("REDIS_URL") or embedded.redis_url()
    env["CREDENTIAL_EXPIRY_SWEEP_SECONDS"] = "1"
    env["PLATFORM_STATE_DIR"] = str(tmp_path)  # beat's schedule and pid file
    env["WORKER_CONCURRENCY"] = "1"
    tmp_path.mkdir(parents=True, exist_ok=True)
    logs, started = {}, []
    for role in roles:
        logs[role] = open(tmp_path / f"{role}.log", "w+")
        started.append(
            subprocess.Popen(
                processes.command(role, env),
                cwd=settings.BASE_DIR,
                env=env,
                stdout=logs[role],
                stderr=subprocess.STDOUT,
            )
        )
    try:
        yield env
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        for role, log in logs.items():
            log.seek(0)
            print(role, log.read()[-3000:])
