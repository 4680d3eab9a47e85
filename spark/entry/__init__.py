"""The scripts a cluster runs (`spark-submit … spark/entry/NAME.py ARGS`): each parses its
arguments, builds the session on the master spark-submit gave it, runs one job of `spark/` and
writes its progress and result as JSON to the object store, where the platform that submitted
it reads them (`spark.entry.reports`). Run locally by the tests under `spark-submit`, and on EMR
Serverless from the uploaded package (`python -m spark.package`)."""
