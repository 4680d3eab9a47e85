"""The import contracts of pyproject.toml ([tool.importlinter]): the planes independent of each
other, common/ of both, spark/ of both, the data plane and the broker's core in layers, no
cycles. `make test` runs `lint-imports` too; this keeps a bare `pytest` honest."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-logo", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_broker_module_grows_past_450_lines():
    """Issue 16's measure of a room a newcomer can read: a module that outgrows it wants a split
    (as the connection's jobs became handshake, admission, inbound, acks, flow, writer...)."""
    broker = ROOT / "data_plane" / "broker"
    sizes = {p.name: len(p.read_text().splitlines()) for p in broker.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 450} == {}
    assert "connection.py" in sizes and "broker.py" in sizes  # the folder is where we think
