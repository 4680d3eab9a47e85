from datetime import UTC, date, datetime

from django.core.management.base import BaseCommand, CommandError

from tenants.management.commands._output import print_json, run_service, tenant_or_error
from tenants.tenant import services as tenant_services


class Command(BaseCommand):
    help = (
        "Move a tenant to another plan: set_plan TENANT PLAN [--from YYYY-MM-DD]. The change is "
        "recorded for billing (the base fee is prorated by UTC days: the new plan from that day, "
        "00:00 UTC; today by default, never a future day nor an invoiced month) and the brokers "
        "apply the new plan's limits at once. Prints the change as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant")
        parser.add_argument("plan")
        parser.add_argument("--from", dest="effective_from", metavar="YYYY-MM-DD")

    def handle(self, *args, tenant, plan, effective_from=None, **options):
        found = tenant_or_error(tenant)
        at = None
        if effective_from:
            try:
                day = date.fromisoformat(effective_from)
            except ValueError:
                raise CommandError(f"--from {effective_from!r}: use YYYY-MM-DD.") from None
            at = datetime(day.year, day.month, day.day, tzinfo=UTC)
        before = found.plan.slug
        changed = run_service(lambda: tenant_services.tenant_change_plan(found, plan, at=at))
        change = changed.plan_changes.order_by("-effective_at", "-id").first()
        print_json(
            self,
            {
                "tenant": changed.slug,
                "plan": changed.plan.slug,
                "from_plan": before,
                "changed": before != changed.plan.slug,
                "effective_at": change.effective_at.isoformat()
                if change is not None and before != changed.plan.slug
                else None,
            },
        )
