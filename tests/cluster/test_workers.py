"""`runbroker --workers N`: N broker processes on one port (SO_REUSEPORT), one cluster."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid

from common.runtime import embedded
from common.runtime.processes import data_plane_command
from tests.broker.clients import Paho
from tests.broker.conftest import REPO, TENANTS
from tests.cluster.conftest import metric, wait_for


class Worker:
    def __init__(self, metrics_port: int) -> None:
        self.listeners = {"metrics": ("127.0.0.1", metrics_port)}


def answers(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()
        return True
    except OSError:
        return False


def own_pid(port: int) -> int:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    return int(re.search(r'^mqtt_cluster_node\{.*pid="(\d+)"\} 1\.0$', text, re.M).group(1))


def test_two_workers_share_the_port_and_act_as_one_broker(tmp_path, redis_url):
    auth = tmp_path / "tenants.json"
    auth.write_text(json.dumps({"tenants": TENANTS}))
    port, ws_port = embedded.free_port(), embedded.free_port()
    metrics = [embedded.free_port(), embedded.free_port()]
    cluster = f"workers-{uuid.uuid4().hex[:6]}"
    commands = [
        data_plane_command(
            port=port,
            ws_port=ws_port,
            auth_file=auth,
            extra=["--reuse-port", "--redis-url", redis_url, "--cluster-name", cluster]
            + ["--cluster-heartbeat", "1", "--metrics-port", str(m), "--no-archive"]
            # A large tenant homed on both workers: its clients stay where the kernel puts them
            # and its messages cross between the workers (tenant affinity: test_affinity.py).
            + ["--large-tenants", "acme=2", "--worker-slot", str(index)],
        )
        for index, m in enumerate(metrics)
    ]
    # The supervisor runbroker --workers uses (common.runtime.processes.supervise), as its own process.
    script = textwrap.dedent(
        f"""
        import sys
        from common.runtime.processes import supervise
        sys.exit(supervise({commands!r}, restart_delay=0.2))
        """
    )
    log = open(tmp_path / "workers.log", "w")
    supervisor = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, stdout=log, stderr=subprocess.STDOUT
    )
    workers = [Worker(m) for m in metrics]
    clients = []
    try:
        for m in metrics:
            wait_for(lambda m=m: answers(m), 20)
        for worker in workers:
            wait_for(lambda w=worker: metric(w, "mqtt_cluster_nodes") == 2, 10)
        # The kernel spreads connections over both workers.
        clients = [Paho(port, "acme/d1", "pw1", f"spread-{i}") for i in range(24)]
        per_worker = [metric(w, "mqtt_clients_connected", '{tenant="acme"}') for w in workers]
        assert sum(per_worker) == 24 and min(per_worker) > 0, per_worker
        # Whichever worker each landed on, every subscriber gets every message once.
        for client in clients[:12]:
            client.subscribe("spread/t", qos=1)
        publisher = clients[-1]
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # until the routes reached both workers
            publisher.publish("spread/t", "probe", qos=1)
            if all(c.expect(1, timeout=0.2) for c in clients[:12]):
                break
        time.sleep(0.3)
        for client in clients[:12]:
            while client.expect(1, timeout=0.05):
                pass
        for i in range(10):
            publisher.publish("spread/t", str(i), qos=1)
        for client in clients[:12]:
            assert [m.payload for m in client.expect(10, timeout=5)] == [
                str(i).encode() for i in range(10)
            ]
            assert client.nothing(0.2)
        # A worker killed is started again by the supervisor, and rejoins.
        first = own_pid(metrics[0])
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: answers(metrics[0]) and own_pid(metrics[0]) != first, 20)
        # Both count two again: the new worker, too, counts its killed predecessor until that
        # one's heartbeat lapses (a dead node is noticed within 2 × heartbeat, here 2 s).
        for worker in workers:
            wait_for(lambda w=worker: metric(w, "mqtt_cluster_nodes") == 2, 10)
    finally:
        for client in clients:
            client.close()
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(20) == 0
        log.close()
    for m in metrics:
        assert not answers(m)  # every worker gone with the supervisor
