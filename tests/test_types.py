"""The type checker over what pyproject's [tool.mypy] lists (`files`: common/ at least), strict:
`make test` runs `mypy` too; this keeps a bare `pytest` honest."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_passes_on_the_checked_files():
    mypy = Path(sys.executable).parent / "mypy"
    result = subprocess.run(
        [str(mypy), "--no-incremental"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout
