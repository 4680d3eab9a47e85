"""The database the Spark jobs use, as Django resolved it (the configured or embedded one; a test
run's test database), as a libpq connection string for the jobs' psycopg: the jobs (`spark/`)
never import Django."""

from __future__ import annotations


def database_url() -> str:
    from django.db import connection
    from psycopg.conninfo import make_conninfo

    db = connection.settings_dict
    params = {
        "host": db.get("HOST") or None,
        "port": str(db["PORT"]) if db.get("PORT") else None,
        "dbname": db.get("NAME"),
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
    }
    return make_conninfo(**{k: v for k, v in params.items() if v is not None})
