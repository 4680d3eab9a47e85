"""The rules' webhook call: a signed JSON POST, retried with back-off. One implementation for the
rule jobs (spark/rules/actions.py) and the replay of dead letters (the control plane).

`X-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>` signs the exact body sent. Network
errors, 5xx and 429 are retried (`attempts`, back-off doubling from `backoff` seconds); any other
4xx is final.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WebhookResult:
    ok: bool
    error: str = ""
    attempts: int = 1


def output_json(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"), default=str)


def post_signed(
    url: str,
    secret: str,
    output: Any,
    *,
    rule_id: int,
    attempts: int = 4,
    backoff: float = 0.25,
    timeout: float = 5.0,
) -> WebhookResult:
    if not url.startswith(("http://", "https://")):
        return WebhookResult(False, f"webhook: invalid url {url!r}")
    body = output_json(output).encode()
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "mqtt-platform-rules/1",
        "X-Signature-256": f"sha256={signature}",
        "X-Rule-Id": str(rule_id),
    }
    error = ""
    attempts = max(1, attempts)
    for attempt in range(1, attempts + 1):
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                response.read(1024)
            return WebhookResult(True, attempts=attempt)
        except urllib.error.HTTPError as exc:
            error = f"webhook: HTTP {exc.code}"
            if exc.code < 500 and exc.code != 429:
                return WebhookResult(False, error, attempt)
        except Exception as exc:
            error = f"webhook: {type(exc).__name__}: {exc}"
        if attempt < attempts:
            time.sleep(backoff * 2 ** (attempt - 1))
    return WebhookResult(False, error[:500], attempts)
