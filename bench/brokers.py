"""Start and stop the brokers under comparison on loopback: ours, Mosquitto and amqtt."""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from common.runtime.processes import data_plane_command

REPO = Path(__file__).resolve().parents[1]
USERNAME, PASSWORD = "bench/d", "bench-password"
SECOND_TENANT = ("bench2/d", PASSWORD)  # the same device in another tenant of `ours`


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass
class RunningBroker:
    name: str
    process: subprocess.Popen
    port: int
    workdir: Path

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def thread_cpu_seconds(self) -> dict[str, float]:
        """CPU seconds so far by thread name (`/proc/…/task/*/comm`; the main thread, the
        event loop, as "event loop"; threads of one name summed)."""
        pid, tick = self.process.pid, os.sysconf("SC_CLK_TCK")
        seconds: dict[str, float] = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
                name = (task / "comm").read_text().strip()
            except FileNotFoundError:  # the thread ended meanwhile
                continue
            label = "event loop" if task.name == str(pid) else name
            seconds[label] = seconds.get(label, 0.0) + (int(stat[11]) + int(stat[12])) / tick
        return seconds

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print(f"  {self.name}: still running 10 s after SIGTERM, killed", flush=True)
                self.process.kill()
        if os.environ.get("BENCH_KEEP_STDERR") and (self.workdir / "stderr.log").exists():
            print((self.workdir / "stderr.log").read_text()[-3000:], flush=True)
        shutil.rmtree(self.workdir, ignore_errors=True)


def _wait_port(process: subprocess.Popen, port: int, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{name} did not listen on {port}")


def _pinned(cmd: list[str]) -> list[str]:
    # Broker on core 0, the generator on the other: both stay on one core each.
    return (["taskset", "-c", "0"] + cmd) if shutil.which("taskset") and os.cpu_count() > 1 else cmd


def start(name: str, *, max_queued: int = 5000, repo: Path = REPO) -> RunningBroker:
    """`repo`: the checkout whose broker `ours` runs (another build, for A/B comparisons)."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    port = _free_port()
    if name == "ours":
        auth = workdir / "tenants.json"
        auth.write_text(
            json.dumps(
                {
                    "tenants": {  # a second tenant for pairs across tenants (SECOND_TENANT)
                        name: {"devices": {"d": {"password": PASSWORD, "client_ids": "any"}}}
                        for name in ("bench", "bench2")
                    }
                }
            )
        )
        cmd = data_plane_command(
            port=port,
            ws_port=0,
            auth_file=auth,
            extra=["--sys-interval", "0", "--max-queued", str(max_queued)],
        )
    elif name == "mosquitto":
        config = workdir / "mosquitto.conf"
        config.write_text(
            f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            f"max_queued_messages {max_queued}\nmax_inflight_messages 0\nlog_type error\n"
        )
        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        cmd = [binary, "-c", str(config)]
    elif name == "amqtt":
        config = workdir / "amqtt.yaml"
        config.write_text(
            "listeners:\n  default:\n    type: tcp\n"
            f"    bind: 127.0.0.1:{port}\n    max_connections: 0\n"
            "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n"
        )
        cmd = [str(Path(sys.executable).parent / "amqtt"), "-c", str(config)]
    else:
        raise ValueError(name)
    process = subprocess.Popen(
        _pinned(cmd),
        cwd=repo,
        stdout=subprocess.DEVNULL,
        stderr=open(workdir / "stderr.log", "w"),
        preexec_fn=_raise_nofile,
    )
    _wait_port(process, port, name)
    return RunningBroker(name, process, port, workdir)
