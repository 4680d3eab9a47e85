"""A tenant's monthly budget: writes, reads, and the alerts Celery beat checks."""
