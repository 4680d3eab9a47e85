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
