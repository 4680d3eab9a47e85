"""A signal sent to `make` alone reaches `make run`'s supervisor (issue 41): with real GNU make, a
recipe that watches make as runplatform does (common/runtime/parent_watch.py) hears of SIGINT,
SIGTERM and SIGHUP sent to make's pid, and of make killed, within a second or so. The whole
platform stopped that way: tests/deploy/test_make_run.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The supervisor's loop, in short: check the watch (and its own signals) every 0.1 s.
WATCHER = """
import signal, sys, time
from common.runtime.parent_watch import ParentWatch
heard = []
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda s, f: heard.append(signal.Signals(s).name))
watch = ParentWatch()
print("watching" if watch.active else "not watching", flush=True)
while not heard and not (why := watch.stopping()):
    time.sleep(0.1)
print("stopped:", heard[0] if heard else why, flush=True)
"""


def _watcher(tmp_path: Path) -> list[str]:
    script = tmp_path / "watcher.py"
    script.write_text(WATCHER)
    return [sys.executable, str(script)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _make(tmp_path: Path) -> subprocess.Popen:
    (tmp_path / "Makefile").write_text(f"run:\n\t@exec {' '.join(_watcher(tmp_path))}\n")
    return subprocess.Popen(
        ["make", "-s", "-f", str(tmp_path / "Makefile"), "run"],
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # no terminal, no process group in common with pytest
        preexec_fn=default_signals,
    )


def default_signals() -> None:
    """make as a terminal starts it: SIGINT and SIGHUP at their default action. A suite run in
    the background of a script (`make test &`, `nohup`) has them ignored, and make, as every
    program, leaves a signal ignored at its start ignored: nothing would reach it."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("sent", "said"),
    [
        (signal.SIGINT, "make got SIGINT"),  # make alone would wait for its child for ever
        (signal.SIGTERM, "SIGTERM"),  # make passes it on: heard either way
        (signal.SIGHUP, "make got SIGHUP"),
        (signal.SIGKILL, "make is gone"),
    ],
)
def test_a_signal_to_make_reaches_the_supervisor(tmp_path, sent, said):
    make = _make(tmp_path)
    try:
        assert make.stdout.readline().strip() == "watching"
        os.kill(make.pid, sent)
        started = time.monotonic()
        line = make.stdout.readline().strip()
        assert said in line and line.startswith("stopped:"), line
        assert time.monotonic() - started < 3
        assert make.wait(timeout=10) == -sent  # make then dies of its signal
    finally:
        if make.poll() is None:
            make.kill()
            make.wait()


def test_without_make_above_nothing_is_watched(tmp_path):
    # Started by a shell or nohup directly: its own signals only, whatever its parent does.
    alone = subprocess.Popen(_watcher(tmp_path), env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert alone.stdout.readline().strip() == "not watching"
    finally:
        alone.terminate()
        assert alone.stdout.readline().strip() == "stopped: SIGTERM"
        alone.wait(timeout=10)
