"""PySpark jobs: tenants' rules (live and backfill) and billing. Imports `common`, never a plane."""
