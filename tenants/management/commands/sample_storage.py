"""`manage.py sample_storage`: this hour's storage sample into the usage log (once per hour)."""

from django.core.management.base import BaseCommand

from tenants.management.commands._output import print_json
from tenants.usage.storage import storage_sample


class Command(BaseCommand):
    help = (
        "Measure the bytes each tenant stores (retained and queued messages in Postgres, its "
        "archive in the object store) and write them to the usage log as this hour's storage "
        "byte-hours. Celery beat runs it hourly; a second run in the same hour writes nothing. "
        "Prints what it measured as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--full",
            action="store_true",
            help="list the whole archive history again (rebuilds the index of settled days)",
        )

    def handle(self, *args, full=False, **options):
        print_json(self, storage_sample(full=full))
