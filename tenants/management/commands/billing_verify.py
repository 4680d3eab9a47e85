from django.core.management.base import BaseCommand, CommandError

from tenants.billing import services as billing
from tenants.management.commands._output import print_json, run_service


class Command(BaseCommand):
    help = (
        "Re-run the billing job for a period and report every difference from its issued "
        "invoices (none expected): billing_verify --period YYYY-MM. Exit status 1 on a difference."
    )

    def add_arguments(self, parser):
        parser.add_argument("--period", required=True, metavar="YYYY-MM")

    def handle(self, *args, period, **options):
        report = run_service(lambda: billing.billing_verify(period))
        print_json(self, report)
        if report["differences"]:
            raise CommandError(f"{len(report['differences'])} difference(s) from issued invoices")
