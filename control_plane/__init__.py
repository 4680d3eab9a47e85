"""The Django project. Its Celery app is loaded with it, so any process that sends a task (the
web process included) sends it to the project's broker (`control_plane/celery.py`)."""

from control_plane.celery import app as celery_app

__all__ = ("celery_app",)
