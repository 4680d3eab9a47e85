"""`manage.py reseal_secrets`: the last step of a SEALING_KEY rotation."""

from django.core.management.base import BaseCommand, CommandError

from tenants.accounts.login_tokens import login_tokens_reseal
from tenants.budgets.services import budgets_reseal_secrets
from tenants.management.commands._output import print_json
from tenants.rules.services import rules_reseal_secrets


class Command(BaseCommand):
    help = (
        "Seal every stored webhook secret and login token under the current SEALING_KEY (run once every process "
        "has the new key, with the old one in SEALING_KEY_PREVIOUS; then drop the previous key). "
        "Secrets stored in the clear before sealing existed are sealed too. Prints counts as "
        "JSON; exits 1 if a secret opens with neither key."
    )

    def handle(self, *args, **options):
        counts = rules_reseal_secrets()
        budgets = budgets_reseal_secrets()  # the budget alerts' webhook secrets
        counts["budgets"] = budgets.pop("budgets")
        for key, value in budgets.items():
            counts[key] += value
        # The login tokens `POST /auth/token` hands out again. One no key opens is not an error:
        # it works by its digest until the member's next login replaces it.
        tokens = login_tokens_reseal()
        counts["login_tokens"] = tokens.pop("login_tokens")
        counts["login_tokens_unopened"] = tokens.pop("login_tokens_unopened")
        for key, value in tokens.items():
            counts[key] += value
        print_json(self, counts)
        if counts["unopened"]:
            raise CommandError(
                f"{counts['unopened']} webhook secret(s) open with neither SEALING_KEY nor "
                "SEALING_KEY_PREVIOUS: set the key they were sealed with as SEALING_KEY_PREVIOUS "
                "and run again, or give those rules (or budgets) new secrets."
            )
