"""bench/rules_eval.py runs and prints one figure per rule (the benchmark itself is not a test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rules_eval_bench_prints_figures():
    done = subprocess.run(
        [sys.executable, "bench/rules_eval.py", "--rows", "3000"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 5
    assert all("evaluations/s" in line for line in lines)
    assert "(1,350 of 3,000 matched)" in lines[0]  # temp 31..39 of 20..39: 9 of every 20
