"""Rules over history on a cluster: `spark-submit [--py-files platform.zip] run_rules.py ARGS`.

The job of `manage.py run_rules` and of a tenant's run (`spark.rules.backfill.run_backfill`),
as a script a cluster runs: the arguments say the range, the rules (tenant, rule), which actions
fire (`--action N`: only the rule's action N, from 1), the RuleRun it is (`--run-id`: its `new-only` claims are that run's), the object store and
where to report (`--report`, a folder of the store: `progress.json` as it goes, `result.json` at
the end; `spark.entry.reports`). The database comes from `--database-url` or `DATABASE_URL`,
its password from `PGPASSWORD` or, with `--database-secret-arn`, from that Secrets Manager
secret's `password` (the job role may read it); it is never an argument.

Exit status 0 when the job ended (done, or failed for a reason of the tenant's: the rule is
gone), 1 when it failed on the platform's side (the cluster then says FAILED).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Any

log = logging.getLogger("spark.entry.run_rules")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="run_rules.py", description=__doc__.splitlines()[0])
    parser.add_argument("--from-ms", type=int, required=True, help="start (inclusive), epoch ms")
    parser.add_argument("--to-ms", type=int, required=True, help="end (exclusive), epoch ms")
    parser.add_argument("--tenant")
    parser.add_argument("--rule")
    parser.add_argument("--actions", choices=["all", "new-only", "none"], default="all")
    parser.add_argument("--run-id", help="the RuleRun this is (owns its new-only claims)")
    parser.add_argument("--action", type=int, help="fire only this action of the rule (from 1)")
    parser.add_argument("--object-store-url", help="default: OBJECT_STORE_URL")
    parser.add_argument("--report", required=True, help="folder of the store for the JSON")
    parser.add_argument("--database-url", help="libpq conninfo; default: DATABASE_URL")
    parser.add_argument("--database-secret-arn", help="Secrets Manager secret with `password`")
    parser.add_argument("--progress-seconds", type=float, default=2.0)
    return parser.parse_args(argv)


def database_password(secret_arn: str) -> str:
    import boto3

    secret = boto3.client("secretsmanager").get_secret_value(SecretId=secret_arn)
    password: str = json.loads(secret["SecretString"])["password"]
    return password


def figures(step: Any) -> dict[str, int]:
    """The figures of a RuleRun from a backfill's `Progress`."""
    summary = step.summary
    return {
        "read": step.rows_read,
        "considered": summary.matched,
        "matched": summary.passed,
        "failed": summary.failed,
        "actions_fired": summary.actions_ok + summary.actions_failed,
        "actions_failed": summary.actions_failed,
        "actions_skipped": summary.actions_skipped,
        "chunks_done": step.chunk,
        "chunks": step.chunks,
    }


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    args = parse(sys.argv[1:] if argv is None else argv)
    if args.database_secret_arn:
        os.environ["PGPASSWORD"] = database_password(args.database_secret_arn)
    dsn = args.database_url or os.environ.get("DATABASE_URL") or None

    from common.stores.object_store import open_object_store
    from spark.entry import reports
    from spark.rules.backfill import NoRules, run_backfill
    from spark.session import build_session

    store = open_object_store(args.object_store_url)
    spark = build_session("rules-backfill")  # on the master spark-submit was given
    last = [0.0]

    def progress(step: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= args.progress_seconds or step.chunk == step.chunks:
            last[0] = now
            reports.write(store, args.report, reports.PROGRESS, figures(step))

    result: dict[str, Any]
    status = 0
    try:
        summary = run_backfill(
            spark,
            dsn,
            store,
            args.from_ms,
            args.to_ms,
            tenant=args.tenant,
            rule=args.rule,
            actions=args.actions,
            progress=progress,
            run_id=args.run_id,
            only_action=args.action,
        )
        result = {"state": "done", "summary": summary, "error": ""}
    except NoRules as exc:
        result = {"state": "failed", "summary": None, "error": "the rule is gone", "why": str(exc)}
    except Exception:
        log.exception("rules over history failed")
        result = {
            "state": "failed",
            "summary": None,
            "error": "the run failed on the platform's side (the operators have the details); "
            "run it again",
        }
        status = 1
    result["master"] = spark.sparkContext.master  # where it ran (operators, tests)
    reports.write(store, args.report, reports.RESULT, result)
    spark.stop()
    log.info("rules over history ended %s", result["state"])
    return status


if __name__ == "__main__":
    sys.exit(main())
