"""One log format for every process of the platform: web, broker, workers, jobs.

Text by default (one line per record: time, level, logger, message, then any structured fields
as `key=value`), JSON lines with `LOG_FORMAT=json` (one object per record, for a log pipeline).
Structured fields travel in `extra={"fields": {...}}`; both formats show them.

    from common.runtime import logs
    logs.configure()                       # the broker, jobs: plain Python processes
    LOGGING = logs.dict_config()           # Django settings (web, Celery worker and beat)

This module imports nothing of the project.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import logging.config
import os
from collections.abc import Mapping
from typing import Any

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _format_name(fmt: str | None) -> str:
    name = (fmt or os.environ.get("LOG_FORMAT") or "text").strip().lower()
    if name not in FORMATS:
        raise ValueError(f"LOG_FORMAT must be one of {', '.join(FORMATS)} (got {name!r})")
    return name


def _fields(record: logging.LogRecord) -> Mapping[str, Any]:
    fields = getattr(record, "fields", None)
    return fields if isinstance(fields, Mapping) else {}


def _text_value(value: Any) -> str:
    text = str(value)
    # Quote what would otherwise split the line into ambiguous tokens.
    if not text or any(c.isspace() or c in '"=' for c in text):
        return json.dumps(text)
    return text


class TextFormatter(logging.Formatter):
    """`2026-11-23 22:10:01,123 WARNING data_plane.refusals: message key=value …`"""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = _fields(record)
        if fields:
            extra = " ".join(f"{key}={_text_value(value)}" for key, value in fields.items())
            first, newline, rest = line.partition("\n")  # a traceback stays below the line
            line = f"{first} {extra}{newline}{rest}"
        return line


class JsonFormatter(logging.Formatter):
    """`{"ts": "…Z", "level": "WARNING", "logger": "…", "message": "…", …fields}`"""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for key, value in _fields(record).items():
            document.setdefault(key, value)
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str, ensure_ascii=False)


def dict_config(level: str | None = None, fmt: str | None = None) -> dict[str, Any]:
    """The `logging.config.dictConfig` document (Django's `LOGGING`): one stderr handler on the
    root logger with the chosen format; `LOG_LEVEL` (INFO) and `LOG_FORMAT` (text) by default."""
    name = _format_name(fmt)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "platform": {
                "()": f"{__name__}.{'JsonFormatter' if name == 'json' else 'TextFormatter'}"
            }
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "platform",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {
            "handlers": ["console"],
            "level": (level or os.environ.get("LOG_LEVEL") or "INFO").upper(),
        },
    }


def configure(level: str | None = None, fmt: str | None = None) -> None:
    """Apply the platform's format to this process's root logger."""
    logging.config.dictConfig(dict_config(level, fmt))
