"""What the planes and the Spark jobs share, importing nothing else of the project.

- `object_store`: one interface over S3 (boto3) and a local directory.
- `archive_schema`: the archive's (and the usage log's) Parquet schemas and object-store layout,
  the single definition every writer (the broker) and reader (`spark/`, DuckDB, tests) uses.
- `rules`: the rule SQL dialect (EMQX's), parsed and evaluated with one set of semantics for the
  dry run in the API and the Spark jobs.

The control plane (`control_plane/`, `tenants/`), the broker (`data_plane/`) and the jobs
(`spark/`) may import this package; it imports none of them.
"""
