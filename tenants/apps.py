from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from tenants import audit
        from tenants.accounts import throttles
        from tenants.accounts import trust as accounts

        audit.connect_signals()  # every write of the domain, whatever the door, is audited
        accounts.connect_signals()  # a new password ends the account's API tokens
        throttles.connect_signals()  # a login's address becomes one of the account's usual ones
