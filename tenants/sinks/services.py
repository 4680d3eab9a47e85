"""The connection test of a tenant's sink (issue 47): `POST /api/v1/rules/{name}/actions/{n}/test`
and the portal's Test connection button. The writers' own check (`common.sinks.check_action`)
connects to the far end with the sink's settings and credentials and says in words what went
wrong; nothing is delivered. Throttled per tenant (`SINK_TEST_RATE`, default 20/min): each test
makes connections to an address the tenant chose (vetted like a webhook's, at save time and
again when the writers connect)."""

from __future__ import annotations

import logging
import os
from typing import Any

from common.security.sealed import SEALED_FIELDS, is_sealed
from tenants.models import Rule
from tenants.sinks.selectors import sink_action_get

logger = logging.getLogger(__name__)

SINK_TEST_RATE_DEFAULT = "20/min"
MAX_ERROR_CHARS = 2000


class SinkTestThrottled(Exception):
    """The tenant tested its sinks too often; `wait` seconds until it may again."""

    def __init__(self, wait: float):
        self.wait = wait
        super().__init__(f"Sinks were tested too often; try again in {wait:.0f} s.")


def _test_allowed(rule: Rule) -> None:
    from django.conf import settings

    from tenants.accounts.throttles import hit

    rate = (
        getattr(settings, "SINK_TEST_RATE", None)
        or os.environ.get("SINK_TEST_RATE")
        or SINK_TEST_RATE_DEFAULT
    )
    wait = hit("sink-test", str(rule.tenant_id), rate)
    if wait:
        raise SinkTestThrottled(wait)


def sink_test(*, rule: Rule, number: int) -> dict[str, Any]:
    """Test the connection of the rule's action `number` (1-based; a 404 unless it is a sink):
    `{"ok": True}` or `{"ok": False, "error": words}`. SinkTestThrottled past the rate."""
    action = sink_action_get(rule=rule, number=number)
    _test_allowed(rule)
    unopened = [field for field in SEALED_FIELDS if is_sealed(action.get(field))]
    if unopened:
        return {
            "ok": False,
            "error": f"the sink's {', '.join(unopened)} was sealed under a key this platform no "
            "longer has: save the rule with it again",
        }
    from common.sinks import check_action  # at the call: tests stand a fake in for it

    try:
        error = check_action(action, rule.tenant.slug)
    except Exception as exc:  # the check answers in words; anything else is still an answer
        logger.exception("sink test of rule %s action %s failed unexpectedly", rule.id, number)
        error = f"the test failed unexpectedly ({type(exc).__name__})"
    if error is None:
        return {"ok": True}
    return {"ok": False, "error": str(error)[:MAX_ERROR_CHARS]}
