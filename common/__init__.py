"""What the planes and the Spark jobs share, importing nothing else of the project.

Sub-packages, each one job:

- `contracts`: what the planes agree on, written once: the tables other planes read and write,
  the NOTIFY channel and its change kinds, the quota keys, the shape of a rule's actions.
- `mqtt`: the sans-IO MQTT codec, packets, reason codes (one `ReasonCode` enum) and topics (one
  matcher and its one regex translation) — the broker's wire format, which the portal's live
  views, the journey and the rule jobs validate and match against too.
- `rules`: the rule SQL dialect (EMQX's), parsed and evaluated with one set of semantics for the
  dry run in the API and the Spark jobs; `rule_preview`: a rule over a tenant's history (DuckDB).
- `access`: ACL rules and client-id patterns.
- `archive`, `journey`: the Parquet schemas, object-store layouts and files of the message
  archive and of the journey; `stores`: the object store (S3 or a folder) and Postgres-safe text.
- `charges`: metering (billed units per packet) and pricing (price books, invoices).
- `security`: device secrets and API tokens, sealed secrets, service tokens, key files, device
  certificates and JWT passwords.
- `webhooks`: the rules' signed webhook call and where it may go.
- `runtime`: the table of processes, the embedded Postgres/Redis launcher, the port check before
  binding, the log format, stopping background tasks.
- `jobs`, `shadow`, `fleet`: AWS IoT Jobs, Device Shadows and fleet provisioning, as both planes
  speak them.

The control plane (`control_plane/`, `tenants/`), the broker (`data_plane/`) and the jobs
(`spark/`) may import this package; it imports none of them.
"""
