"""The portal as `make run` starts it (the `web` role of the table of processes), for tests that
drive it with a real browser against a real broker."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection

from common.runtime import processes
from common.runtime.embedded import free_port, port_open


@contextmanager
def running_portal(mqtt_port: int, **env_overrides: str) -> Iterator[str]:
    """The portal on a free port, on the tests' database, its live views on the broker at
    `mqtt_port`; yields its URL and stops it afterwards."""
    db = connection.settings_dict
    http_port = free_port()
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        MQTT_INTERNAL_HOST="127.0.0.1",
        MQTT_INTERNAL_PORT=str(mqtt_port),
        ALLOWED_HOSTS="127.0.0.1,localhost",
        BIND_HOST="127.0.0.1",
        WEB_PORT=str(http_port),
        **env_overrides,
    )
    web = subprocess.Popen(
        processes.command("web", env),
        cwd=settings.BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not port_open(http_port):
            assert web.poll() is None, web.stderr.read().decode()
            assert time.monotonic() < deadline, "portal did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        web.terminate()
        web.wait(timeout=10)


def log_in(page, url: str, email: str, password: str) -> None:
    """Log in through the portal's form, as a person would; returns on the dashboard."""
    page.goto(f"{url}/login/")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
