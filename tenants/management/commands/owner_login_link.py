from django.core.management.base import BaseCommand

from tenants.management.commands._output import print_link, run_service, tenant_or_error
from tenants.people import services as people


class Command(BaseCommand):
    help = (
        "Issue a new one-time login link for an owner of a tenant (who lost the first one, or "
        "their password); prints JSON with owner and login_url. --send also mails it."
    )

    def add_arguments(self, parser):
        parser.add_argument("tenant")
        parser.add_argument(
            "--email", metavar="EMAIL", help="which owner (needed when the tenant has several)"
        )
        parser.add_argument("--send", action="store_true", help="also mail the link to the owner")

    def handle(self, *args, tenant, email=None, send=False, **options):
        found = tenant_or_error(tenant)
        user = run_service(lambda: people.owner_for_login_link(found, email))
        url = people.portal_url(people.one_time_login_path(user))
        body = {"tenant": found.slug, "owner": user.email, "login_url": url, "sent": False}
        print_link(
            self,
            body,
            send=send,
            mail=lambda: people.login_link_mail(user, found, url),
            to=user.email,
        )
