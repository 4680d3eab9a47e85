"""What the planes and the Spark jobs share, importing nothing else of the project.

- `object_store`: one interface over S3 (boto3) and a local directory.
- `archive_schema`: the archive's (and the usage log's) Parquet schemas and object-store layout,
  the single definition every writer (the broker) and reader (`spark/`, DuckDB, tests) uses.
- `rules`: the rule SQL dialect (EMQX's), parsed and evaluated with one set of semantics for the
  dry run in the API and the Spark jobs.
- `mqtt`: the sans-IO MQTT codec, packets, reason codes (one `ReasonCode` enum) and topics (one
  matcher: validation, the `$` rule, matching on pre-split levels) — the broker's wire format,
  which the portal's live views and the rule actions validate against too.
- `notifications`: the `mqtt_config` NOTIFY channel and its change kinds (control plane sends,
  broker listens).
- `quota_keys`, `secrets` (credential hashing and SCRAM verifiers), `service_token` (the portal's
  and the rule jobs' broker tokens), `client_id_pattern`, `pricing`.
- `embedded`: the embedded Postgres/Redis launcher behind every default (`make run`, tests, the
  broker run alone).
- `processes`: the table of the platform's processes and their command lines.

The control plane (`control_plane/`, `tenants/`), the broker (`data_plane/`) and the jobs
(`spark/`) may import this package; it imports none of them.
"""
