"""Rule evaluation alone: compiled rule SQL applied to archive rows, evaluations/s on one core.

.venv/bin/python bench/rules_eval.py [--rows N]

Rows are archive rows as the jobs see them (payload bytes, ts in ms); each rule is compiled once
and applied to every row, as the Spark jobs do per partition. Half the rows match the WHERE.
"""

from __future__ import annotations

import argparse
import json
import time

from common.rules import compile_rule

RULES = {
    "simple: JSON path WHERE": (
        'SELECT payload.temp AS t, clientid FROM "sensors/+/temp" WHERE payload.temp > 30'
    ),
    "no payload decode (columns only)": (
        "SELECT clientid, topic, qos FROM \"sensors/#\" WHERE qos = 1 AND clientid != 'x'"
    ),
    "functions + CASE": (
        "SELECT upper(clientid) AS c, topic(2) AS dev, round(payload.temp * 1.8 + 32) AS f, "
        "CASE WHEN payload.temp > 30 THEN 'hot' ELSE 'ok' END AS level, "
        "format_date('millisecond', 0, '%Y-%m-%d', timestamp) AS day "
        'FROM "sensors/+/temp" WHERE payload.temp > 30'
    ),
    "FOREACH over 4 items": (
        'FOREACH payload.readings AS r DO r.v AS v, clientid INCASE r.v > 1 FROM "sensors/#"'
    ),
    "SELECT * (every column)": 'SELECT * FROM "sensors/#"',
}


def rows(count: int) -> list[dict]:
    out = []
    for index in range(count):
        payload = {
            "temp": 20 + (index % 20),
            "hum": 40,
            "unit": "C",
            "readings": [{"v": 1}, {"v": 2}, {"v": 3}, {"v": index % 5}],
        }
        out.append(
            {
                "event": "message.publish",
                "tenant": "acme",
                "ts": 1_700_000_000_000 + index,
                "client_id": f"dev-{index % 100}",
                "username": "acme/dev",
                "topic": f"sensors/dev-{index % 100}/temp",
                "qos": 1,
                "retain": False,
                "payload": json.dumps(payload).encode(),
                "user_properties": [],
            }
        )
    return out


def measure(sql: str, data: list[dict]) -> tuple[float, int]:
    rule = compile_rule(sql)
    apply = rule.apply
    for row in data[:1000]:  # warm up
        apply(row)
    matched = 0
    started = time.perf_counter()
    for row in data:
        if apply(row).matched:
            matched += 1
    elapsed = time.perf_counter() - started
    return len(data) / elapsed, matched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    data = rows(args.rows)
    for label, sql in RULES.items():
        rate, matched = measure(sql, data)
        print(f"{label:36} {rate:>12,.0f} evaluations/s  ({matched:,} of {len(data):,} matched)")


if __name__ == "__main__":
    main()
