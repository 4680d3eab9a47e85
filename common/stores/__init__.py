"""Where things are kept: the object store, S3 or a local folder (`object_store`),
and values made storable in Postgres' text and jsonb (`postgres_text`)."""
