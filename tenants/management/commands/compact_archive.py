"""`manage.py compact_archive [--hour ISO]`: compact the archive's closed hours (or one hour)."""

from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError

from common.archive.files import compact_due, compact_hour, hour_start
from common.stores.object_store import open_object_store
from tenants.archive_lock import archive_lock
from tenants.management.commands._output import print_json


class Command(BaseCommand):
    help = (
        "Compact the message archive: each closed hour's live Parquet segments (all tenants of a "
        "broker) into per-tenant history files. Without --hour, every hour closed for more than "
        "--grace minutes; safe to re-run. Prints what it did as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--hour", help="one hour to compact, ISO 8601 (e.g. 2026-11-23T14 or ...T14:00Z; UTC)"
        )
        parser.add_argument("--grace", type=float, default=5.0, help="minutes (default 5)")

    def handle(self, *args, hour, grace, **options):
        store = open_object_store()
        now = datetime.now(UTC)
        if hour:
            start = _parse_hour(hour)
            if start.timestamp() + 3600 > now.timestamp():
                raise CommandError(f"--hour {hour}: that hour is not over yet.")
        with archive_lock():  # markers are rewritten by retention too
            if hour:
                results = [compact_hour(store, start)]
            else:
                results = compact_due(store, now, timedelta(minutes=grace))
        print_json(
            self,
            {
                "store": store.url,
                "hours": [r.as_dict() for r in results],
                "rows": sum(r.rows for r in results),
            },
        )


def _parse_hour(text: str) -> datetime:
    value = text.strip()
    if len(value) == 13 and value[10] == "T":  # 2026-11-23T14
        value += ":00"
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise CommandError(
            f"--hour {text!r} is not an ISO 8601 time (e.g. 2026-11-23T14:00Z)."
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)  # the archive's hours are UTC
    return hour_start(moment)
