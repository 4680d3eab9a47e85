from django.core.management.base import BaseCommand

from tenants import services
from tenants.management.commands._output import print_json, run_service


class Command(BaseCommand):
    help = "Create a tenant; prints it as JSON."

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--plan", default=services.DEFAULT_PLAN)
        parser.add_argument("--name", default="")

    def handle(self, *args, slug, plan, name, **options):
        tenant = run_service(lambda: services.tenant_create(slug, plan=plan, name=name))
        print_json(
            self,
            {
                "slug": tenant.slug,
                "name": tenant.name,
                "plan": tenant.plan.slug,
                "status": tenant.status,
            },
        )
