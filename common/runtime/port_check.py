"""Before a process binds its ports: which are taken, by whom, and which variable moves each.

`check(host, {"WEB_PORT": 8000, …})` tries to bind each port the way the servers will
(SO_REUSEADDR, so a port in TIME_WAIT is free) and returns one `Conflict` per port that cannot
be had, naming the listening process when this user can see it (`/proc/net/tcp*` and
`/proc/*/fd`, Linux). No third-party dependency; imports nothing of the project.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Conflict:
    variable: str
    host: str
    port: int
    problem: str  # "in use", "used twice", "permission denied", …
    owner: str = ""  # "pid 1234 (mosquitto -c …)" when known

    def message(self) -> str:
        who = f" by {self.owner}" if self.owner else ""
        return (
            f"port {self.port} ({self.variable}) on {self.host} is {self.problem}{who}: "
            f"free it or choose another, e.g. `make run {self.variable}={_suggest(self.port)}`"
        )


def _suggest(port: int) -> int:
    return port + 10000 if port < 55000 else port - 10000


def check(host: str, ports: Mapping[str, int]) -> list[Conflict]:
    """The ports of `ports` (variable → port) that cannot be bound on `host`, in order."""
    conflicts = []
    seen: dict[int, str] = {}
    for variable, port in ports.items():
        if port in seen:
            conflicts.append(Conflict(variable, host, port, f"also given to {seen[port]}"))
            continue
        seen[port] = variable
        problem = _bind_problem(host, port)
        if problem:
            owner = listener(port) if problem == "in use" else ""
            conflicts.append(Conflict(variable, host, port, problem, owner))
    return conflicts


def _bind_problem(host: str, port: int) -> str:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1)  # a listener on the port only shows at listen() with SO_REUSEADDR
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return "in use"
            if error.errno == errno.EACCES:
                return "not allowed for this user (below 1024?)"
            if error.errno == errno.EADDRNOTAVAIL:
                return "not an address of this machine"
            return error.strerror or str(error)
    return ""


def listener(port: int, proc: Path = Path("/proc")) -> str:
    """Who listens on TCP `port`: 'pid N (command line)', or '' when this user cannot tell."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: LISTEN
                continue
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    if not inodes:
        return ""
    targets = {f"socket:[{inode}]" for inode in inodes}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                if os.readlink(fd) in targets:
                    return f"pid {entry.name} ({_command(entry)})"
        except OSError:  # another user's process, or gone meanwhile
            continue
    return "another user's process"


def _command(entry: Path) -> str:
    try:
        argv = (entry / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(" ".join(part.decode(errors="replace").split()) for part in argv if part)
    return text if len(text) <= 120 else text[:117] + "..."
