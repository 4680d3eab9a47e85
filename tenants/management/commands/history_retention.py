"""`manage.py history_retention [--tenant T] [--dry-run]`: delete history past its retention."""

from django.core.management.base import BaseCommand

from tenants.history.retention import retention_run
from tenants.management.commands._output import print_json, tenant_or_error


class Command(BaseCommand):
    help = (
        "Delete each tenant's archive history (whole hours of archive/tenant=…/) older than it "
        "keeps: its longest history policy, its plan's default while it has none, a day while "
        "it has enabled rules. Celery beat runs it hourly; safe to re-run. Prints what it "
        "deleted as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", help="only this tenant (its slug)")
        parser.add_argument(
            "--dry-run", action="store_true", help="say what would be deleted, delete nothing"
        )

    def handle(self, *args, tenant=None, dry_run=False, **options):
        if tenant:
            tenant_or_error(tenant)
        print_json(self, retention_run(tenant=tenant, dry_run=dry_run))
