"""Keys the platform's processes share: from an environment variable in deployments, else from a
file of the embedded default (`.data/…`), created once with a random value, so that a laptop's
processes agree without configuration."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import common

DATA_DIR = Path(common.__file__).resolve().parent.parent / ".data"  # the checkout's


def shared_key(variable: str, default_file: Path) -> bytes:
    """`variable`'s value, else the contents of `{variable}_FILE` or `default_file` (created with
    64 random hex digits if missing; by whichever process comes first)."""
    value = os.environ.get(variable)
    if value:
        return value.encode()
    path = Path(os.environ.get(f"{variable}_FILE", default_file))
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process created it first
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32))
    return path.read_text().strip().encode()
