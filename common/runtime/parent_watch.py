"""Whether the `make` that started this process is stopping (`make run`'s supervisor asks).

Ctrl-C in a terminal reaches every process of the foreground group, the supervisor included. A
signal sent to the `make` process alone does not: GNU make, on SIGTERM, passes SIGTERM on to its
children and waits for them, but on SIGINT (or SIGHUP, SIGQUIT) it only waits, so `kill -INT`
of make would leave everything running, and make with it. What make does first in its handler of
those signals is to reset the signal to its default action (so that it can die of it once its
children are gone): the signal leaves the set make catches (`SigCgt` in /proc/PID/status). This
watch sees that, and also make gone altogether (killed: this process is re-parented), so the
supervisor can stop everything as Ctrl-C would. It watches only a parent named `make`: a shell or
`nohup` that started the command directly is left to its own signals. Linux only (/proc);
elsewhere it never fires.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

MAKES = frozenset({"make", "gmake"})
# The signals make handles by waiting for its children and then dying of them.
FATAL = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _caught(pid: int) -> int | None:
    """The mask of signals `pid` catches (`SigCgt`); None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


class ParentWatch:
    """Made at start-up; `stopping()` says why the `make` above is going away (or "")."""

    def __init__(self) -> None:
        self.parent = os.getppid()
        caught = _caught(self.parent) if _name(self.parent) in MAKES else None
        # The fatal signals make handles now (one it ignored from the start, as under `&` in a
        # script, it never handles: nothing to watch there).
        self.watched = [s for s in FATAL if caught & (1 << (s - 1))] if caught is not None else None

    @property
    def active(self) -> bool:
        return self.watched is not None

    def stopping(self) -> str:
        """ "" while make runs as before; else what happened to it, in words."""
        if self.watched is None:
            return ""
        if os.getppid() != self.parent:
            return "make is gone"
        caught = _caught(self.parent)
        if caught is None:
            return "make is gone"
        for sig in self.watched:
            if not caught & (1 << (sig - 1)):
                return f"make got {signal.Signals(sig).name}"
        return ""
