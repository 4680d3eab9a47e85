"""Waiting in tests for what another process does (a broker, the rules job, a far end)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def until(what: Callable[[], Any], seconds: float, why: str | Callable[[], str]) -> Any:
    """`what()`'s first truthy answer within `seconds`, or an AssertionError saying `why` (a
    callable: worked out then, to show what was seen)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {why() if callable(why) else why}")
