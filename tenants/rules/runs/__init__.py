"""A tenant's rules over its archived history (issue 31): the preview (DuckDB, in the request:
`services.run_preview`), runs on Spark (`services.run_start` queues a `RuleRun`, a Celery task
runs it with `execute.execute`, the same backfill as `manage.py run_rules`), their progress and
cancellation. Reads are in `selectors`."""
