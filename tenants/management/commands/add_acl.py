from django.core.management.base import BaseCommand, CommandError

from tenants.acls import services as acl_services
from tenants.management.commands._output import print_json, run_service, tenant_or_error
from tenants.models import Device


class Command(BaseCommand):
    help = "Add an ACL rule (placeholders ${tenant}, ${client}); prints it as JSON."

    def add_arguments(self, parser):
        parser.add_argument("tenant")
        parser.add_argument("--device", help="device name; tenant-wide when omitted")
        parser.add_argument("--action", required=True, choices=["publish", "subscribe", "both"])
        parser.add_argument("--topic", required=True)
        parser.add_argument("--position", type=int)
        permission = parser.add_mutually_exclusive_group(required=True)
        permission.add_argument("--allow", dest="permission", action="store_const", const="allow")
        permission.add_argument("--deny", dest="permission", action="store_const", const="deny")

    def handle(self, *args, tenant, device, action, topic, position, permission, **options):
        owner = tenant_or_error(tenant)
        target = None
        if device:
            target = Device.objects.filter(tenant=owner, name=device).first()
            if target is None:
                raise CommandError(f"Unknown device {device!r} in tenant {owner.slug!r}.")
        rule = run_service(
            lambda: acl_services.acl_add(
                tenant=owner,
                device=target,
                action=action,
                permission=permission,
                topic=topic,
                position=position,
            )
        )
        print_json(
            self,
            {
                "id": rule.id,
                "tenant": owner.slug,
                "device": device,
                "action": action,
                "permission": permission,
                "topic": topic,
                "position": rule.position,
            },
        )
