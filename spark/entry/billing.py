"""The billing job on a cluster: `spark-submit [--py-files platform.zip] billing.py ARGS`.

`spark.billing.job.run` for `--period`, over the accounts the platform wrote to the object store
(`--accounts`, a key: the JSON of `spark.billing.job.Account`s, their price books, issued months
and credits, which only the platform's database knows); its result (the invoice documents, the
segments and rows summed, the revenue) goes to `--report`/result.json, and the platform stores
the invoices (`tenants.billing.services`). Progress steps go to `--report`/progress.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict
from typing import Any

log = logging.getLogger("spark.entry.billing")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="billing.py", description=__doc__.splitlines()[0])
    parser.add_argument("--period", required=True, help="YYYY-MM")
    parser.add_argument("--accounts", required=True, help="key of the accounts' JSON")
    parser.add_argument("--object-store-url", help="default: OBJECT_STORE_URL")
    parser.add_argument("--report", required=True, help="folder of the store for the JSON")
    parser.add_argument("--database-secret-arn", help="(unused: billing reads no database)")
    return parser.parse_args(argv)


def accounts_of(body: list[dict[str, Any]]) -> list[Any]:
    from spark.billing.job import Account, IssuedPeriod

    return [
        Account(
            tenant=a["tenant"],
            price_book=a["price_book"],
            issued=tuple(IssuedPeriod(**i) for i in a.get("issued", ())),
            credits=tuple(a.get("credits", ())),
            terms=tuple(a.get("terms", ())),
        )
        for a in body
    ]


def accounts_json(accounts: list[Any]) -> bytes:
    """What the platform writes for `--accounts` (the inverse of `accounts_of`)."""
    return json.dumps([asdict(a) for a in accounts], sort_keys=True, default=str).encode()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse(sys.argv[1:] if argv is None else argv)

    from common.stores.object_store import open_object_store
    from spark.billing import job
    from spark.entry import reports
    from spark.session import build_session

    store = open_object_store(args.object_store_url)
    spark = build_session("billing")  # on the master spark-submit was given
    steps: list[str] = []

    def progress(step: str) -> None:
        steps.append(step)
        reports.write(store, args.report, reports.PROGRESS, {"step": step, "steps": steps})

    status = 0
    try:
        accounts = accounts_of(json.loads(store.get(args.accounts)))
        result = job.run(spark, store, args.period, accounts, progress)
        body: dict[str, Any] = {"state": "done", "result": asdict(result), "error": ""}
    except Exception as exc:
        log.exception("billing %s failed", args.period)
        body = {"state": "failed", "result": None, "error": f"{type(exc).__name__}: {exc}"}
        status = 1
    body["master"] = spark.sparkContext.master  # where it ran (operators, tests)
    reports.write(store, args.report, reports.RESULT, body)
    spark.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
