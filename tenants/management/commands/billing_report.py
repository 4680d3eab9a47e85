import sys

from django.core.management.base import BaseCommand, CommandError

from tenants.billing import services as billing
from tenants.billing.cluster import BillingJobFailed
from tenants.management.commands._output import print_json, run_service, tenant_or_error

STEPS = (
    "loading price books",
    "starting Spark",
    "listing usage log",
    "summing",
    "pricing",
    "storing invoices",
)


class Progress:
    """A progress bar on stderr (stdout carries only the JSON summary)."""

    def __init__(self, stream=sys.stderr, width: int = 30) -> None:
        self.stream, self.width, self.done = stream, width, 0

    def __call__(self, step: str) -> None:
        self.done = next((i + 1 for i, s in enumerate(STEPS) if step.startswith(s)), self.done)
        filled = self.width * self.done // len(STEPS)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r[{bar}] {self.done}/{len(STEPS)} {step:<40}")
        if self.done == len(STEPS):
            self.stream.write("\n")
        self.stream.flush()


class Command(BaseCommand):
    help = (
        "The billing job for a period (usage log + price books → invoices, in Spark): "
        "billing_report --period YYYY-MM [--tenant T] [--issue [--force]]; prints a JSON "
        "summary. --issue refuses a month that has not ended unless --force."
    )

    def add_arguments(self, parser):
        parser.add_argument("--period", required=True, metavar="YYYY-MM")
        parser.add_argument("--tenant")
        parser.add_argument("--issue", action="store_true", help="issue the invoices")
        parser.add_argument(
            "--force",
            action="store_true",
            help="with --issue: issue a month that has not ended yet (a partial bill, frozen)",
        )

    def handle(self, *args, period, tenant, issue, force, **options):
        owner = tenant_or_error(tenant) if tenant else None
        try:
            summary = run_service(
                lambda: billing.billing_report(
                    period,
                    tenant=owner,
                    issue=issue,
                    force=force,
                    progress=Progress(self.stderr._out),
                )
            )
        except (ValueError, BillingJobFailed) as exc:
            raise CommandError(str(exc)) from None
        print_json(self, summary)
