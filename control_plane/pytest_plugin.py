"""pytest plugin (loaded with `-p control_plane.pytest_plugin` from pyproject): the tests' own
throwaway Postgres and Redis.

It runs before pytest-django imports the settings, so `control_plane.settings` sees
`EMBEDDED_PG_DIR` pointing at a fresh cluster under `.data/test-*` — the same start-up code as
`make run`, in another folder. A configured `DATABASE_URL` is used as it is.
"""

from __future__ import annotations

import os
import shutil

from common.runtime import embedded

_OWNED = not os.environ.get("DATABASE_URL") and "EMBEDDED_PG_DIR" not in os.environ

if _OWNED:
    os.environ["EMBEDDED_PG_DIR"] = str(embedded.DATA_DIR / "test-postgres")
    os.environ.setdefault("EMBEDDED_REDIS_DIR", str(embedded.DATA_DIR / "test-redis"))
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        embedded.stop_postgres()
        embedded.stop_redis()
        shutil.rmtree(embedded.postgres_dir(), ignore_errors=True)
        shutil.rmtree(embedded.redis_dir(), ignore_errors=True)


def pytest_unconfigure(config) -> None:
    if _OWNED:
        embedded.stop_postgres()
        embedded.stop_redis()
