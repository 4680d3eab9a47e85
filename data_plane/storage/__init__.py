"""Durable storage: the object store (S3 or a local directory) and, later, the session store."""
