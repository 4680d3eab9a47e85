"""Celery tasks of the tenant domain (scheduled by CELERY_BEAT_SCHEDULE in settings)."""

from celery import shared_task

from tenants import services


@shared_task(name="tenants.tasks.expire_credentials")
def expire_credentials() -> int:
    """Revoke credentials past their expiry; the broker hears it through NOTIFY and disconnects."""
    return services.credentials_expire()


@shared_task(name="tenants.tasks.compact_archive")
def compact_archive() -> list[dict]:
    """Compact the archive's hours closed for more than a few minutes (live segments of all
    tenants into per-tenant history); a crashed or overlapping run is finished by the next."""
    from common.archive_io import compact_due
    from common.object_store import open_object_store

    return [result.as_dict() for result in compact_due(open_object_store())]
