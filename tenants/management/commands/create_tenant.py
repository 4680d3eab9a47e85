from django.core.management.base import BaseCommand
from django.db import transaction

from tenants.management.commands._output import print_json, run_service
from tenants.people import services as people
from tenants.tenant import services as tenant_services


class Command(BaseCommand):
    help = (
        "Create a tenant; prints it as JSON. With --owner EMAIL, that person owns it and the JSON "
        "carries a one-time login link (login_url) where they choose a password."
    )

    def add_arguments(self, parser):
        parser.add_argument("slug")
        parser.add_argument("--plan", default=tenant_services.DEFAULT_PLAN)
        parser.add_argument("--name", default="")
        parser.add_argument("--owner", metavar="EMAIL", help="who owns it (account made if new)")

    def handle(self, *args, slug, plan, name, owner=None, **options):
        def create():
            with transaction.atomic():
                tenant = tenant_services.tenant_create(slug, plan=plan, name=name)
                user = people.owner_ensure(tenant, owner) if owner else None
            return tenant, user

        tenant, user = run_service(create)
        body = {
            "slug": tenant.slug,
            "name": tenant.name,
            "plan": tenant.plan.slug,
            "status": tenant.status,
        }
        if user is not None:
            body["owner"] = user.email
            body["login_url"] = people.portal_url(people.one_time_login_path(user))
        print_json(self, body)
