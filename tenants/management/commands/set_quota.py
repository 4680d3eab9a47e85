from django.core.management.base import BaseCommand, CommandError

from tenants.management.commands._output import print_json, run_service, tenant_or_error
from tenants.tenant import selectors as tenant_selectors
from tenants.tenant import services as tenant_services


class Command(BaseCommand):
    help = "Override a tenant's plan limits: set_quota TENANT KEY=VALUE ...; prints the quota."

    def add_arguments(self, parser):
        parser.add_argument("tenant")
        parser.add_argument("limits", nargs="+", metavar="KEY=VALUE")

    def handle(self, *args, tenant, limits, **options):
        owner = tenant_or_error(tenant)
        overrides = {}
        for item in limits:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CommandError(f"Expected KEY=VALUE, got {item!r}.")
            overrides[key.strip()] = value.strip()
        run_service(lambda: tenant_services.tenant_set_quota(owner, overrides))
        print_json(
            self,
            {
                "tenant": owner.slug,
                "quota": tenant_selectors.effective_quota(owner),
                "overrides": owner.quota_overrides,
            },
        )
