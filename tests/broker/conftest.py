"""A real broker process (`python -m data_plane`) with a static tenants file, on free ports."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common.runtime.processes import data_plane_command

REPO = Path(__file__).resolve().parents[2]
TENANTS = {
    "acme": {
        "devices": {
            **{f"d{i}": {"password": f"pw{i}", "client_ids": "any"} for i in range(1, 9)},
            "exact": {"password": "pw-exact"},
            "gw": {"password": "pw-gw", "client_ids": "gw-*"},
        }
    },
    "other": {"devices": {"d1": {"password": "other-pw", "client_ids": "any"}}},
}


@dataclass
class BrokerProcess:
    process: subprocess.Popen
    listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    log: Path | None = None

    @property
    def port(self) -> int:
        return self.listeners["mqtt"][1]

    @property
    def ws_port(self) -> int:
        return self.listeners["ws"][1]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                return self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait()


def start_broker(tmp: Path, *extra: str, tenants: dict | None = None) -> BrokerProcess:
    auth = tmp / "tenants.json"
    auth.write_text(json.dumps({"tenants": TENANTS if tenants is None else tenants}))
    log = tmp / "broker.log"
    process = subprocess.Popen(
        data_plane_command(
            port=0, ws_port=0, auth_file=auth, extra=["--log-level", "INFO", *extra]
        ),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),
        text=True,
    )
    broker = BrokerProcess(process, log=log)
    flags = {"--tls-port": "mqtts", "--wss-port": "wss", "--metrics-port": "metrics"}
    expected = {"mqtt", "ws"} | {name for flag, name in flags.items() if flag in extra}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith("LISTENING"):
            _, name, address = line.split()
            host, port = address.rsplit(":", 1)
            broker.listeners[name] = (host, int(port))
            if expected <= set(broker.listeners):
                return broker
    broker.stop()
    raise RuntimeError(f"broker did not start: {log.read_text()}")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("broker"), "--sys-interval", "1")
    yield process
    process.stop()
