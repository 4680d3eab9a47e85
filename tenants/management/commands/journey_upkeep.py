"""`manage.py journey_upkeep`: compact the journey's closed hours, apply each plan's retention."""

from django.core.management.base import BaseCommand

from tenants.journey.upkeep import upkeep
from tenants.management.commands._output import print_json


class Command(BaseCommand):
    help = (
        "Keep the journey: compact each closed hour's live segments into per-tenant files and "
        "delete the hours each tenant's plan no longer keeps (journey_retention_hours). Safe to "
        "re-run; Celery beat runs it every 10 minutes. Prints what it did as JSON."
    )

    def handle(self, *args, **options):
        print_json(self, upkeep())
