import json
from datetime import date

from django.core.management.base import BaseCommand, CommandError

from tenants.billing import services as billing
from tenants.management.commands._output import print_json, run_service
from tenants.models import Plan, PriceBook


def parse_tiers(text: str) -> list[dict]:
    """`1000000000:1.00,5000000000:0.80,:0.70` → tiers (an empty bound is no bound)."""
    tiers = []
    for part in text.split(","):
        bound, sep, price = part.partition(":")
        if not sep:
            raise CommandError(f"Tier {part!r}: use UP_TO:PRICE (UP_TO empty for the last tier).")
        try:
            tiers.append({"up_to": int(bound) if bound else None, "price": price})
        except ValueError:
            raise CommandError(f"Tier {part!r}: UP_TO must be a whole number.") from None
    return tiers


class Command(BaseCommand):
    help = (
        "A new price book version for a plan: set_price PLAN --from YYYY-MM-DD "
        "[--base-fee-cents N] [--currency USD] [--set DIMENSION.included=N] [--set DIMENSION.per=N] "
        "[--set DIMENSION.tiers=UP_TO:PRICE,...,:PRICE] [--json FILE]. Unset values are kept from "
        "the version in force; prints the new version as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument("plan")
        parser.add_argument(
            "--set",
            dest="prices",
            action="append",
            default=[],
            metavar="DIMENSION.FIELD=VALUE",
            help="included=N, per=N or tiers=UP_TO:PRICE,...,:PRICE of a dimension (repeatable)",
        )
        parser.add_argument("--from", dest="effective_from", required=True, metavar="YYYY-MM-DD")
        parser.add_argument("--base-fee-cents", type=int)
        parser.add_argument("--currency")
        parser.add_argument("--json", dest="json_file", help="a file with the `dimensions` object")

    def handle(self, *args, plan, effective_from, base_fee_cents, currency, json_file, prices, **o):
        target = Plan.objects.filter(slug=plan).first()
        if target is None:
            raise CommandError(f"Unknown plan {plan!r}.")
        try:
            start = date.fromisoformat(effective_from)
        except ValueError:
            raise CommandError(f"--from {effective_from!r}: use YYYY-MM-DD.") from None
        current = (
            PriceBook.objects.filter(plan=target, effective_from__lte=start)
            .order_by("-effective_from")
            .first()
        ) or billing.price_book_default(target)
        dimensions = json.loads(json.dumps(current.dimensions))
        if json_file:
            with open(json_file) as handle:
                dimensions = json.load(handle)
        for item in prices:
            key, sep, value = item.partition("=")
            name, dot, field = key.partition(".")
            if not sep or not dot or field not in ("included", "per", "tiers"):
                raise CommandError(f"Expected DIMENSION.included|per|tiers=VALUE, got {item!r}.")
            spec = dimensions.setdefault(name, {"included": 0, "per": 1, "tiers": []})
            if field == "tiers":
                spec["tiers"] = parse_tiers(value)
            else:
                try:
                    spec[field] = int(value)
                except ValueError:
                    raise CommandError(f"{key}: use a whole number, got {value!r}.") from None
        book = run_service(
            lambda: billing.price_book_set(
                target,
                effective_from=start,
                dimensions=dimensions,
                base_fee_cents=current.base_fee_cents if base_fee_cents is None else base_fee_cents,
                currency=currency or current.currency,
            )
        )
        print_json(self, book.as_document())
