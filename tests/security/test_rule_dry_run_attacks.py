"""The rule dry run (POST /api/v1/rules/test, which the portal's editor calls as the user types)
from the attacker's side (issue 29, point 5). Any member, a viewer too, may call it, and it runs
in the web process: a rule that builds a gigabyte, burns the CPU or makes a number Python cannot
print must be answered with a 400 naming the budget it went over, within 2 s, never a 500, and
without the process growing by its bomb."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest
from django.conf import settings

from tests.api.conftest import acme  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db

ONE_MB_PAD = "pad('', 1000000, 'trailing', 'x')"
BOMBS = {
    # 1,000 copies of a 1 MB string: a gigabyte in one call.
    "memory": f"SELECT pad('', 1000, 'trailing', {ONE_MB_PAD}) AS x FROM \"#\"",
    # CPU: sha256 of a megabyte, a hundred thousand times (INCASE: no output to stop it early).
    "cpu": f"FOREACH [1..100000] AS i DO i INCASE sha256({ONE_MB_PAD}) = 'x' FROM \"#\"",
    # Gigabytes again, through replace and join.
    "replace": f"SELECT replace({ONE_MB_PAD}, 'x', pad('', 1000, 'trailing', 'y')) AS x FROM \"#\"",
    "join": f'SELECT join_to_string({ONE_MB_PAD}, [1..100000]) AS x FROM "#"',
    # An integer Python will not print (over 4,300 digits): from subbits, and by multiplying.
    "subbits": "SELECT subbits(pad('', 3000, 'trailing', 'x'), 1, 24000) AS x FROM \"#\"",
    "multiply": "SELECT " + " * ".join(["9" * 1900] * 5) + ' AS x FROM "#"',
    # Outputs: a FOREACH of 20,000 outputs for one message.
    "outputs": 'FOREACH [1..20000] AS i DO i FROM "#"',
}


def dry(api, sql, **context):
    return api.post("/api/v1/rules/test", {"sql": sql, "context": context}, format="json")


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_is_a_400_naming_the_budget_within_two_seconds(acme, name):  # noqa: F811
    _, api = acme
    grown_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    response = dry(api, BOMBS[name], topic="t/1")
    took = time.monotonic() - started
    assert response.status_code == 400, (name, response.status_code, response.content[:300])
    message = response.json()["error"]["message"]
    assert "rule exceeded its budget" in message, message
    assert took < 2.0, f"{name}: answered after {took:.2f}s"
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - grown_before) / 1024
    assert grown < 300, f"{name}: the web process grew by {grown:.0f} MB"


def test_a_long_integer_literal_is_a_400_naming_where(acme):  # noqa: F811
    _, api = acme
    response = dry(api, "SELECT " + "1" * 5000 + ' AS x FROM "#"', topic="t/1")
    assert response.status_code == 400, response.content[:300]
    error = response.json()["error"]
    assert "at most 2000 digits" in error["message"] and error["column"] == 8


def test_a_payload_nested_too_deep_is_a_400(acme):  # noqa: F811
    _, api = acme
    deep = "[" * 900 + "]" * 900
    response = dry(api, 'SELECT json_decode(payload) AS x FROM "#"', topic="t", payload=deep)
    assert response.status_code == 400, response.content[:300]
    assert "nested deeper" in response.json()["error"]["message"]


def test_an_output_that_is_not_utf8_is_answered(acme):  # noqa: F811
    """A lone surrogate (valid JSON, `\\ud800`) in an output: escaped, not a 500."""
    _, api = acme
    response = dry(api, 'SELECT payload.s AS s FROM "#"', topic="t", payload='{"s": "a\\ud800"}')
    assert response.status_code == 200, response.content[:300]
    assert response.json() == {"match": True, "outputs": [{"s": "a\\ud800"}]}


def test_make_run_serves_no_django_debug_page():
    """`make run` runs with the embedded defaults (DJANGO_DEBUG unset): Django's DEBUG, whose
    error pages show tracebacks, settings and the URL list, is off there too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")}
    env["DJANGO_SETTINGS_MODULE"] = "control_plane.settings"
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s;"
            " print(s.DEBUG, s.SESSION_COOKIE_SECURE)",
        ],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # No debug pages, and still the embedded platform's cookies over plain HTTP.
    assert shown.stdout.split() == ["False", "False"], shown.stderr[-2000:]
