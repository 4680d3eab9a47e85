"""The evaluator's budgets per message (`common.rules.budget`), on the compiled rule itself: each
budget fails the message with its name, and what the budgets changed inside functions
(`subbits` reads only the bytes it needs, `tokens` splits in C) still gives EMQX's answers."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from common.rules import Budget, compile_rule
from common.rules.functions import FUNCTIONS
from common.rules.values import from_bytes


def row(payload: str = "{}") -> dict:
    return {"event": "message.publish", "topic": "t/1", "payload": payload.encode(), "ts": 0}


def test_each_budget_fails_the_message_and_names_itself():
    cases = {
        "time": (
            "FOREACH [1..100000] AS i DO i INCASE sha256(payload) = 'x' FROM \"#\"",
            "x" * 500_000,
        ),
        "outputs": ('FOREACH [1..101] AS i DO i FROM "#"', "{}"),
        "string": (
            "SELECT pad('', 10000, 'trailing', pad('', 1000, 'trailing', 'x')) AS x FROM \"#\"",
            "{}",
        ),
        "memory": (
            "FOREACH [1..100] AS i DO i INCASE pad('', 1000000, 'trailing', 'x') = '' FROM \"#\"",
            "{}",
        ),
        "integer": ('SELECT 2 * bitsl(1, 4096) * bitsl(1, 4096) AS x FROM "#"', "{}"),
        "depth": ('SELECT json_decode(payload) AS x FROM "#"', "[" * 200 + "]" * 200),
        "array": ("SELECT split(payload, ',') AS x FROM \"#\"", "a," * 100_001),
    }
    for kind, (sql, payload) in cases.items():
        started = time.perf_counter()
        result = compile_rule(sql).apply(row(payload), Budget(seconds=0.2))
        assert result.budget == kind, (kind, result)
        assert result.error.startswith(f"rule exceeded its budget ({kind})"), result.error
        assert not result.matched and time.perf_counter() - started < 1.5


def test_a_plan_may_allow_more_outputs():
    rule = compile_rule('FOREACH [1..500] AS i DO i FROM "#"')
    assert rule.apply(row(), Budget(max_outputs=100)).budget == "outputs"
    assert len(rule.apply(row(), Budget(max_outputs=500)).outputs) == 500


def _subbits_reference(data: bytes, start: int, length: int) -> int | None:
    bits = "".join(f"{b:08b}" for b in data)
    begin = start - 1
    if begin < 0 or begin >= len(bits) or length <= 0:
        return None
    return int(bits[begin : begin + length], 2)


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=40), st.integers(-3, 330), st.integers(-2, 80))
def test_subbits_reads_the_same_bits_from_a_slice(data, start, length):
    text = from_bytes(data)
    assert FUNCTIONS["subbits"](text, start, length) == _subbits_reference(data, start, length)


def _tokens_reference(s: str, seps: str) -> list[str]:
    out, current = [], []
    for char in s:
        if char in seps:
            if current:
                out.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        out.append("".join(current))
    return out


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab /-^]\\\n", max_size=30), st.text(alphabet=" /-^]\\", max_size=3))
def test_tokens_splits_as_before(s, seps):
    assert FUNCTIONS["tokens"](s, seps) == _tokens_reference(s, seps)
