"""Celery tasks of the tenant domain (scheduled by CELERY_BEAT_SCHEDULE in settings)."""

from celery import shared_task

from tenants import services


@shared_task(name="tenants.tasks.expire_credentials")
def expire_credentials() -> int:
    """Revoke credentials past their expiry; the broker hears it through NOTIFY and disconnects."""
    return services.credentials_expire()
