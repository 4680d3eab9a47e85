"""The HTTP batch sink: a send's outputs in one signed POST, a JSON array of them in order.

The request is the rules' webhook call (`common.webhooks.delivery`), so it is signed, bounded and
vetted the same way: `X-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>` over the exact
body (the key is the action's `secret`, empty without one), the destination's every address
vetted and the connection pinned to one, redirects never followed. It adds `X-Batch-Id:
{first outbox id}-{last outbox id}`: a batch sent again after a lost answer has the same id, so a
receiver can drop the copy.

The receiver's answer is the batch's: 2xx, every record ok; 429, 5xx, a network error or a
refused destination, every record retried; any other 4xx (and a redirect), every record failed
permanently (the receiver refuses the batch as it is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.sinks.base import OK, Record, Result, failed, optional, setting
from common.sinks.endpoints import url_host_port
from common.webhooks.delivery import Timeouts, post_signed

TIMEOUTS = Timeouts(connect=3.0, first_byte=15.0, total=30.0)


def batch_body(records: Sequence[Record]) -> str:
    """The JSON array of the records' outputs, each its exact JSON text."""
    return "[" + ",".join(r.body for r in records) + "]"


class HttpBatchWriter:
    def __init__(self, action: dict[str, Any], tenant: str) -> None:
        self.url = setting(action, "url")
        url_host_port(self.url)  # ValueError in words for one that is no http(s) URL
        self.secret = optional(action, "secret") or ""
        self.tenant = tenant

    def _post(self, body: str, batch_id: str) -> Result:
        answer = post_signed(
            self.url,
            self.secret,
            None,
            rule_id=None,
            attempts=1,
            timeouts=TIMEOUTS,
            body_text=body,
            headers=(("X-Batch-Id", batch_id),),
        )
        if answer.ok:
            return OK
        words = answer.error.removeprefix("webhook: ").replace("webhooks call", "sinks connect to")
        permanent = words.startswith("HTTP ") or words.startswith("invalid url")
        return Result(False, f"HTTP batch: {words}", retry=answer.retry or not permanent)

    def send(self, records: Sequence[Record]) -> list[Result]:
        if not records:
            return []
        ids = [r.id for r in records]
        result = self._post(batch_body(records), f"{min(ids)}-{max(ids)}")
        return (
            [OK] * len(records) if result.ok else failed(records, result.error or "", result.retry)
        )

    def check(self) -> str | None:
        """The receiver takes an empty batch (`[]`, `X-Batch-Id: 0-0`) with a 2xx."""
        result = self._post("[]", "0-0")
        return None if result.ok else result.error

    def close(self) -> None:
        pass
