"""`manage.py create_operator EMAIL [--send]`: an operator of the platform, who logs in to the
portal by email like everyone else and lands on the overview of every tenant (`/operator/`), with
the admin besides. Django's `createsuperuser` makes an account the portal's email login cannot
find unless its username is the email: this one can."""

from django.core.management.base import BaseCommand

from tenants.management.commands._output import print_link, run_service
from tenants.people import services as people


class Command(BaseCommand):
    help = (
        "Make EMAIL an operator (staff and superuser; a new account gets no password) and print "
        "JSON with operator, created and a one-time login_url. --send also mails the link."
    )

    def add_arguments(self, parser):
        parser.add_argument("email")
        parser.add_argument("--send", action="store_true", help="also mail the link")

    def handle(self, *args, email, send=False, **options):
        user, created = run_service(lambda: people.operator_ensure(email))
        url = people.portal_url(people.one_time_login_path(user))
        body = {"operator": user.email, "created": created, "login_url": url, "sent": False}
        print_link(
            self, body, send=send, mail=lambda: people.operator_link_mail(user, url), to=user.email
        )
