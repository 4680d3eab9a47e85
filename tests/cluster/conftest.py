"""Broker processes (`python -m data_plane`) joined into one cluster on a real Redis."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from common.runtime import embedded
from common.runtime.processes import data_plane_command
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.conftest import BrokerProcess, start_broker

HEARTBEAT = 1.0  # seconds: short, so a dead node is noticed within the tests' patience


def start_node(
    tmp: Path,
    redis_url: str,
    cluster: str,
    *extra: str,
    heartbeat: float = HEARTBEAT,
    **broker: Any,
) -> BrokerProcess:
    """A node of `cluster` on a static tenants file (`broker`: start_broker's own options)."""
    folder = tmp / uuid.uuid4().hex[:8]
    folder.mkdir()
    return start_broker(
        folder,
        "--redis-url",
        redis_url,
        "--cluster-name",
        cluster,
        "--cluster-heartbeat",
        str(heartbeat),
        "--metrics-port",
        "0",
        "--sys-interval",
        "0.5",
        *extra,
        **broker,
    )


def metric(node: BrokerProcess, name: str, labels: str = "") -> float:
    """One sample of the node's /metrics (0 when absent)."""
    host, port = node.listeners["metrics"]
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    suffix = re.escape(labels) if labels else r"(\{\})?"
    pattern = rf"^{re.escape(name)}{suffix} (\S+)$"
    found = re.search(pattern, text, re.M)
    return float(found.group(found.lastindex)) if found else 0.0


def wait_for(condition, timeout: float, step: float = 0.05) -> float:
    """Seconds until `condition()` held; fails after `timeout`."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout}s: {condition}")
        time.sleep(step)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def redis_url() -> str:
    """The test session's Redis (control_plane.pytest_plugin keeps it under .data/test-redis)."""
    return os.environ.get("REDIS_URL") or embedded.redis_url()


class PrivateRedis:
    """A Redis of one test's own, to stop and start without disturbing anyone else's."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = embedded.free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [shutil.which("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
        )
        wait_for(lambda: embedded.port_open(self.port), 10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(5)


@pytest.fixture
def private_redis(tmp_path):
    redis = PrivateRedis(tmp_path)
    redis.start()
    yield redis
    redis.stop()


def until_routed(publisher, subscriber, topic: str, timeout: float = 5.0) -> float:
    """Probe (QoS 0) until the subscriber on another node gets one: the route has reached the
    publisher's node. Returns the seconds it took; the probes are drained."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        publisher.publish(topic, "probe")
        if subscriber.expect(1, timeout=0.1):
            time.sleep(0.2)
            while subscriber.expect(1, timeout=0.05):
                pass
            return time.monotonic() - start
    raise AssertionError(f"{topic}: not routed across nodes within {timeout}s")


class PgNode:
    """A broker process on the test database (persistent sessions in Postgres), in a cluster."""

    def __init__(
        self, redis_url: str, cluster: str, heartbeat: float = 1.0, archive: bool = False
    ) -> None:
        """`archive`: to the object store OBJECT_STORE_URL names, every 0.2 s (else none)."""
        db = connection.settings_dict
        url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        extra = [
            "--redis-url",
            redis_url,
            "--cluster-name",
            cluster,
            "--cluster-heartbeat",
            str(heartbeat),
        ]
        self.process = subprocess.Popen(
            data_plane_command(
                port=0,
                ws_port=0,
                database_url=url,
                extra=[
                    *extra,
                    "--metrics-port",
                    "0",
                    *(("--archive-interval", "0.2") if archive else ("--no-archive",)),
                    "--log-level",
                    "INFO",
                ],
            ),
            cwd=settings.BASE_DIR,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.listeners: dict[str, tuple[str, int]] = {}
        while not {"mqtt", "ws", "metrics"} <= set(self.listeners):
            line = self.process.stdout.readline()
            assert line, "broker exited"
            if line.startswith("LISTENING"):
                _, name, address = line.split()
                host, port = address.rsplit(":", 1)
                self.listeners[name] = (host, int(port))
        connection.close()  # the brokers and the test share the database

    @property
    def port(self) -> int:
        return self.listeners["mqtt"][1]

    def stop(self) -> None:
        """A graceful stop, bounded: a node that does not stop is killed (left running on the
        test database it would take other tests' notifications, e.g. shadow changes), and the
        test fails, since operators' orchestrators would kill it too."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError("the node did not stop within 15 s of SIGTERM") from None
        self.process.stdout.close()

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=5)


@pytest.fixture
def tenant_user():
    tenant = tenant_services.tenant_create(f"roam{uuid.uuid4().hex[:6]}")
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    return f"{tenant.slug}/d", secret


@pytest.fixture
def nodes(redis_url):
    """Three broker processes on Postgres, one cluster; they may be killed by the test."""
    cluster = f"sess-{uuid.uuid4().hex[:6]}"
    started = [PgNode(redis_url, cluster, HEARTBEAT) for _ in range(3)]
    for node in started:
        wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 3, 10)
    yield cluster, started
    for node in started:
        node.stop()
