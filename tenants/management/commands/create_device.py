from django.core.management.base import BaseCommand

from tenants.devices import services as device_services
from tenants.management.commands._output import print_json, run_service, tenant_or_error


class Command(BaseCommand):
    help = "Create a device with its first secret; prints username and password as JSON."

    def add_arguments(self, parser):
        parser.add_argument("tenant")
        parser.add_argument("name")
        parser.add_argument("--password", help="use this secret (>= 16 chars) instead of a new one")
        parser.add_argument(
            "--client-ids", default="exact", help="exact (default), any, or a regex pattern"
        )

    def handle(self, *args, tenant, name, password, client_ids, **options):
        owner = tenant_or_error(tenant)
        policy, pattern = (
            (client_ids, "") if client_ids in ("exact", "any") else ("pattern", client_ids)
        )
        device, secret = run_service(
            lambda: device_services.device_create(
                tenant=owner,
                name=name,
                password=password,
                client_id_policy=policy,
                client_id_pattern=pattern,
            )
        )
        print_json(
            self,
            {
                "tenant": owner.slug,
                "name": device.name,
                "username": device.username,
                "password": secret,
                "client_id_policy": device.client_id_policy,
                "client_id_pattern": device.client_id_pattern,
            },
        )
