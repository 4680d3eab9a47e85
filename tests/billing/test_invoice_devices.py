"""The invoice CSV's per-device drill-down (issue 33, point 4): under the lines, each line metered
per device (messages, connection minutes, rules triggered, actions executed) by device, its units and its share of the line's amount
in whole cents that add up to the line (largest remainder). Known traffic from real MQTT clients
through a real broker for two tenants: each tenant's CSV names its own two devices, with the units
they sent, and never the other tenant's; the exact bytes of a known invoice's CSV; the PDF and the
totals unchanged."""

from __future__ import annotations

import csv
import io
import subprocess
from collections import defaultdict
from datetime import date

import pytest
from django.db.models import Sum

from common.charges.pricing import build_invoice
from tenants.accounts import services as account_services
from tenants.billing import invoicing
from tenants.billing import services as billing
from tenants.billing.invoice_devices import line_shares, split_cents
from tenants.billing.services import price_book_for
from tenants.devices import services as device_services
from tenants.models import DeviceUsage, Invoice, Tenant, Usage
from tests.api.conftest import acme, attacker, client_for  # noqa: F401 (fixtures)
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import running_pg_broker

# Per unit, so a line's amount has cents to share out: 13 message units → 15.99 → 16 ¢.
PRICES = {
    "messages": {"included": 0, "per": 1, "tiers": [{"up_to": None, "price": "0.0123"}]},
    "connection_minutes": {"included": 0, "per": 1, "tiers": [{"up_to": None, "price": "0.05"}]},
}


def issued(tenant: Tenant, period: str, usage: dict[str, int]) -> Invoice:
    """The invoice the billing job makes of `usage` (the same document function), issued."""
    book = price_book_for(tenant.plan, period)
    document = build_invoice(
        tenant=tenant.slug,
        period=period,
        usage=usage,
        usage_digest="test",
        price_book=book.as_document(),
    )
    invoice = Invoice.objects.create(
        tenant=tenant,
        period=period,
        status="draft",
        currency=document["currency"],
        total_cents=document["total_cents"],
        line_items=document["lines"],
        price_book=book,
        price_book_version=book.version,
        checksum="c" * 64,
    )
    return invoicing.invoice_issue(invoice.id)


def csv_rows(api, period: str) -> list[dict[str, str]]:
    response = api.get(f"/api/v1/invoices/{period}.csv")
    assert response.status_code == 200, response.content
    return list(csv.DictReader(io.StringIO(response.content.decode())))


@pytest.mark.parametrize(
    "amount, weights, shares",
    [
        (16, [6, 7], [7, 9]),  # 7.38 and 8.62: the one cent left goes to .62
        (10, [1, 1, 1], [4, 3, 3]),  # a tie: the earlier row
        (100, [1, 2, 3, 4], [10, 20, 30, 40]),
        (1, [5, 5], [1, 0]),
        (0, [3, 4], [0, 0]),
        (-50, [1, 2], [-17, -33]),  # a credit shares the same way, negated
        (999, [1] * 7, [143, 143, 143, 143, 143, 142, 142]),
    ],
)
def test_split_cents_adds_up_to_the_amount_by_largest_remainder(amount, weights, shares):
    assert split_cents(amount, weights) == shares
    assert sum(shares) == amount


def test_line_shares_with_more_device_units_than_the_line():
    """An invoice issued before its month ended (`--force`): its devices went on, their rows now
    hold more than the line; the line's amount is shared over them alone, still to the cent."""
    line = {"code": "messages", "quantity": 10, "amount_cents": 100}
    shares = line_shares(line, {"a": 8, "b": 7})
    assert [(s.device, s.quantity, s.amount_cents) for s in shares] == [("a", 8, 53), ("b", 7, 47)]
    fewer = line_shares({**line, "quantity": 20}, {"a": 8, "b": 7})
    assert [(s.device, s.quantity, s.amount_cents) for s in fewer] == [
        ("a", 8, 40),
        ("b", 7, 35),
        (None, 5, 25),  # the units no device row holds
    ]
    nothing = line_shares(line, {})  # no per-device record at all: one row, the whole line
    assert [(s.device, s.quantity, s.amount_cents) for s in nothing] == [(None, 10, 100)]
    assert line_shares({**line, "quantity": 0, "amount_cents": 0}, {}) == []  # no section


def test_split_cents_refuses_no_weight():
    with pytest.raises(ValueError):
        split_cents(10, [0, 0])


def _traffic(port: int, tenant: str, secrets: dict[str, str], *, publishes: list[int]) -> None:
    """Device `sensor-b` subscribes to `t/#`; `sensor-a` publishes one message per size in
    `publishes` (topic `t/x`, 3 bytes) and sensor-b receives each; both disconnect."""
    subscriber = Paho(port, f"{tenant}/sensor-b", secrets["sensor-b"], "sensor-b")
    subscriber.subscribe("t/#", 1)
    publisher = Paho(port, f"{tenant}/sensor-a", secrets["sensor-a"], "sensor-a")
    for size in publishes:
        publisher.publish("t/x", b"x" * size, 1)
    assert len(subscriber.expect(len(publishes), 10)) == len(publishes)
    publisher.close()
    subscriber.close()


@pytest.mark.django_db(transaction=True)
def test_known_traffic_drills_down_to_each_device_and_sums_to_the_line():
    tenants, apis, secrets = {}, {}, defaultdict(dict)
    for slug in ("acme", "rival"):
        tenant, _, token = account_services.signup(
            tenant=slug, email=f"owner@{slug}.io", password=f"pass-w0rd-{slug}"
        )
        tenants[slug], apis[slug] = tenant, client_for(token)
    for slug, names in (("acme", ("sensor-a", "sensor-b")), ("rival", ("sensor-a", "sensor-b"))):
        for name in names:
            _, secrets[slug][name] = device_services.device_create(
                tenant=tenants[slug], name=name, client_id_policy="any"
            )
    _, rival_only = device_services.device_create(tenant=tenants["rival"], name="rival-only")
    with running_pg_broker("--no-archive", "--usage-flush-interval", "0.5") as port:
        # acme: 3 × 1,000 bytes (1 unit each) and 6,000 (2 units) → sensor-a 1 CONNECT + 5,
        # sensor-b 1 CONNECT + 1 SUBSCRIBE + 5 delivered.
        _traffic(port, "acme", secrets["acme"], publishes=[1_000, 1_000, 1_000, 6_000])
        # rival: one 20,000-byte message (4 units) and a device acme does not have.
        _traffic(port, "rival", secrets["rival"], publishes=[20_000])
        other = Paho(port, "rival/rival-only", rival_only, "rival-only")
        other.publish("n", b"y" * 100, 1)
        other.close()
    # The broker's final flush has written every minute; the invoices are priced from them.
    known = {
        "acme": {"sensor-a": (6, 1), "sensor-b": (7, 1)},
        "rival": {"sensor-a": (1 + 4, 1), "sensor-b": (1 + 1 + 4, 1), "rival-only": (2, 1)},
    }
    period = DeviceUsage.objects.values_list("day", flat=True).first().strftime("%Y-%m")
    billing.price_book_set(  # both are on the free plan
        tenants["acme"].plan, effective_from=date(2020, 1, 1), base_fee_cents=0, dimensions=PRICES
    )
    for slug, tenant in tenants.items():
        sums = Usage.objects.filter(tenant=tenant).aggregate(
            messages=Sum("message_units"), connection_minutes=Sum("connection_minutes")
        )
        assert sums == {
            "messages": sum(units for units, _ in known[slug].values()),
            "connection_minutes": sum(minutes for _, minutes in known[slug].values()),
        }
        issued(tenant, period, {key: int(value) for key, value in sums.items()})

    rows = csv_rows(apis["acme"], period)
    lines = {row["code"]: row for row in rows if row["code"] not in ("per_device", "device")}
    assert lines["messages"]["amount_cents"] == "16"  # 13 units × 1.23 ¢ = 15.99 → 16
    assert lines["connection_minutes"]["amount_cents"] == "10"
    headers = [row for row in rows if row["code"] == "per_device"]
    assert [(h["line_code"], h["item"], h["amount_cents"]) for h in headers] == [
        ("messages", "Messages (5 KB units) by device", "16"),
        ("connection_minutes", "Connection minutes by device", "10"),
    ]
    devices = [row for row in rows if row["code"] == "device"]
    assert [(d["line_code"], d["device"], d["quantity"], d["amount_cents"]) for d in devices] == [
        # 16 ¢ over 7 and 6 units: 8.62 and 7.38 → the cent left over goes to .62.
        ("messages", "sensor-b", "7", "9"),
        ("messages", "sensor-a", "6", "7"),
        ("connection_minutes", "sensor-a", "1", "5"),
        ("connection_minutes", "sensor-b", "1", "5"),
    ]
    for code in ("messages", "connection_minutes"):
        mine = [d for d in devices if d["line_code"] == code]
        assert sum(int(d["amount_cents"]) for d in mine) == int(lines[code]["amount_cents"])
        assert sum(int(d["quantity"]) for d in mine) == int(lines[code]["quantity"])
    # The section sits between the lines and the totals, which still close the file.
    assert [row["code"] for row in rows[-3:]] == ["subtotal", "tax", "total"]
    assert rows[-3]["amount_cents"] == "26"
    acme_text = apis["acme"].get(f"/api/v1/invoices/{period}.csv").content.decode()
    assert "rival-only" not in acme_text and "rival" not in acme_text

    rival = [row for row in csv_rows(apis["rival"], period) if row["code"] == "device"]
    assert {(d["line_code"], d["device"], d["quantity"]) for d in rival} == {
        (line, device, str(counts[i]))
        for device, counts in known["rival"].items()
        for i, line in enumerate(("messages", "connection_minutes"))
    }
    # Each tenant reaches only its own invoice.
    assert apis["rival"].get(f"/api/v1/invoices/{period}.csv").content != acme_text.encode()
    Invoice.objects.filter(tenant=tenants["rival"]).delete()
    assert apis["rival"].get(f"/api/v1/invoices/{period}.csv").status_code == 404


def test_a_known_invoice_csv_byte_for_byte(acme, attacker, settings, tmp_path):  # noqa: F811
    """The whole file, so a change of format is a deliberate change of these bytes: the lines
    as before, the per-device section under them (device names as text, a formula's start
    escaped, the units no device row holds on a row of their own), then the totals."""
    settings.INVOICE_ISSUER = {"key": "golden", "name": "Brokerage GmbH"}
    settings.INVOICE_NUMBER_PREFIX = "G-"
    tenant, api = acme
    evil, _ = attacker
    september = date(2026, 9, 1)
    for device, day, units, minutes in (
        ("sensor-1", september, 1_200_000, 30_000),
        ("sensor-1", date(2026, 9, 30), 800_000, 10_000),
        ("sensor-2", date(2026, 9, 2), 1_499_999, 3_200),
        ("$console", september, 500_000, 0),
        ("=cmd|' /C calc'!A0", september, 1, 0),
        ("sensor-1", date(2026, 8, 31), 777, 777),  # another month
        ("sensor-1", date(2026, 10, 1), 888, 888),
    ):
        DeviceUsage.objects.create(
            tenant=tenant, device=device, day=day, message_units=units, connection_minutes=minutes
        )
    # The rules job's per-device figures: 6 of the line's 10 rule units were sensor-1's messages.
    DeviceUsage.objects.filter(tenant=tenant, device="sensor-1", day=september).update(
        rules_triggered=6
    )
    DeviceUsage.objects.create(
        tenant=evil, device="evil-sensor", day=september, message_units=9, rules_triggered=4
    )
    invoice = issued(
        tenant,
        "2026-09",
        {"messages": 4_500_000, "connection_minutes": 43_200, "rules_triggered": 10},
    )
    assert (invoice.total_cents, invoice.tax_cents) == (350, 0)
    text = api.get("/api/v1/invoices/2026-09.csv").content.decode()
    # 350 ¢ over 2,000,000 / 1,499,999 / 500,000 / 1 / 500,000 (unrecorded) units of 4,500,000:
    # floors 155, 116, 38, 0, 38 (347); the 3 ¢ left go to the largest remainders: .889 ($console,
    # then the unrecorded row: a tie goes to the earlier row), then .667 (sensor-2).
    assert text == EXPECTED_CSV, text
    assert api.get("/api/v1/invoices/2026-09.csv").content.decode() == text  # as often as asked

    # The PDF is the invoice as before: its lines and totals, no per-device rows.
    pdf = tmp_path / "invoice.pdf"
    pdf.write_bytes(api.get("/api/v1/invoices/2026-09.pdf").content)
    words = subprocess.run(
        ["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    assert "3.50 USD" in words and "G-000001" in words
    assert "sensor-1" not in words and "by device" not in words


EXPECTED_CSV = (
    "code,description,quantity,included,billable,unit_price,per,invoice_number,period,customer,item,unit,line_code,device,currency,amount,amount_cents\n"
    "base_fee,Monthly base fee,1,0,1,0,1,G-000001,2026-09,acme,Monthly base fee,month,,,USD,0.00 USD,0\n"
    'messages,Messages (5 KB units),4500000,1000000,3500000,1.00,1000000,G-000001,2026-09,acme,"Messages (per million, 5 KB units)",messages (5 KB units),,,USD,3.50 USD,350\n'
    "connection_minutes,Connection minutes,43200,43200,0,0.08,1000000,G-000001,2026-09,acme,Connection minutes (per million),minutes,,,USD,0.00 USD,0\n"
    'rules_triggered,Rules triggered (5 KB units),10,10,0,0.15,1000000,G-000001,2026-09,acme,"Rules triggered (per million, 5 KB units)",rule runs (5 KB units),,,USD,0.00 USD,0\n'
    "actions_executed,Actions executed,0,0,0,0.15,1000000,G-000001,2026-09,acme,Rule actions executed (per million),actions,,,USD,0.00 USD,0\n"
    "storage_gb_hours,Storage (GB-hours),0,0,0,0.0002,1,G-000001,2026-09,acme,Storage (GB-hours),GB-hours,,,USD,0.00 USD,0\n"
    'per_device,by device: shares of the line\'s amount (not added to the total again),4500000,,,,,G-000001,2026-09,acme,"Messages (per million, 5 KB units) by device",messages (5 KB units),messages,,USD,3.50 USD,350\n'
    'device,,2000000,,,,,G-000001,2026-09,acme,"Messages (per million, 5 KB units)",messages (5 KB units),messages,sensor-1,USD,1.55 USD,155\n'
    'device,,1499999,,,,,G-000001,2026-09,acme,"Messages (per million, 5 KB units)",messages (5 KB units),messages,sensor-2,USD,1.17 USD,117\n'
    'device,Browser client (console),500000,,,,,G-000001,2026-09,acme,"Messages (per million, 5 KB units)",messages (5 KB units),messages,$console,USD,0.39 USD,39\n'
    "device,,1,,,,,G-000001,2026-09,acme,\"Messages (per million, 5 KB units)\",messages (5 KB units),messages,'=cmd|' /C calc'!A0,USD,0.00 USD,0\n"
    'device,units of the line with no per-device record (metered before per-device metering began),500000,,,,,G-000001,2026-09,acme,"Messages (per million, 5 KB units)",messages (5 KB units),messages,(not recorded per device),USD,0.39 USD,39\n'
    "per_device,by device: shares of the line's amount (not added to the total again),43200,,,,,G-000001,2026-09,acme,Connection minutes (per million) by device,minutes,connection_minutes,,USD,0.00 USD,0\n"
    "device,,40000,,,,,G-000001,2026-09,acme,Connection minutes (per million),minutes,connection_minutes,sensor-1,USD,0.00 USD,0\n"
    "device,,3200,,,,,G-000001,2026-09,acme,Connection minutes (per million),minutes,connection_minutes,sensor-2,USD,0.00 USD,0\n"
    'per_device,by device: shares of the line\'s amount (not added to the total again),10,,,,,G-000001,2026-09,acme,"Rules triggered (per million, 5 KB units) by device",rule runs (5 KB units),rules_triggered,,USD,0.00 USD,0\n'
    'device,,6,,,,,G-000001,2026-09,acme,"Rules triggered (per million, 5 KB units)",rule runs (5 KB units),rules_triggered,sensor-1,USD,0.00 USD,0\n'
    'device,units of the line with no per-device record (metered before per-device metering began),4,,,,,G-000001,2026-09,acme,"Rules triggered (per million, 5 KB units)",rule runs (5 KB units),rules_triggered,(not recorded per device),USD,0.00 USD,0\n'
    "subtotal,,,,,,,G-000001,2026-09,acme,Subtotal,,,,USD,3.50 USD,350\n"
    "tax,,,,,,,G-000001,2026-09,acme,Tax,,,,USD,0.00 USD,0\n"
    "total,,,,,,,G-000001,2026-09,acme,Total due,,,,USD,3.50 USD,350\n"
)


def test_an_issued_invoices_csv_never_changes_when_device_rows_come_later(acme):  # noqa: F811
    """Issued, downloaded; then the month's device rows grow (a broker's late flush, devices
    going on after an invoice issued with `--force`) and a new device appears: the CSV is the
    same bytes, its drill-down kept from when it was issued. An invoice issued before that
    snapshot existed (none kept) still reads the rows as they are now."""
    tenant, api = acme
    october = date(2026, 10, 3)
    DeviceUsage.objects.create(
        tenant=tenant, device="sensor-1", day=october, message_units=600, rules_triggered=8
    )
    DeviceUsage.objects.create(tenant=tenant, device="sensor-2", day=october, message_units=400)
    invoice = issued(tenant, "2026-10", {"messages": 1_000, "rules_triggered": 10})
    assert invoice.device_units == {
        "messages": {"sensor-1": 600, "sensor-2": 400},
        "connection_minutes": {},
        "rules_triggered": {"sensor-1": 8},
        "actions_executed": {},
    }
    before = api.get("/api/v1/invoices/2026-10.csv").content

    DeviceUsage.objects.filter(tenant=tenant, device="sensor-1").update(
        message_units=5_000, rules_triggered=10
    )
    DeviceUsage.objects.create(
        tenant=tenant, device="late-sensor", day=date(2026, 10, 31), message_units=900
    )
    after = api.get("/api/v1/invoices/2026-10.csv").content
    assert after == before
    assert b"late-sensor" not in after

    # Issued before snapshots existed: read from the rows now (as before this change).
    Invoice.objects.filter(id=invoice.id).update(device_units=None)
    legacy = api.get("/api/v1/invoices/2026-10.csv").content.decode()
    assert "late-sensor" in legacy and legacy.encode() != before
