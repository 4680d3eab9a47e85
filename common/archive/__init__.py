"""The message archive: its Parquet schema and object-store layout (`schema`),
reading and compacting it (`files`), and what a tenant's archive keeps (`history_policy`)."""
