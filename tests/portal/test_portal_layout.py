"""The portal's frame, server side: the one time format (`{{ moment|utc }}`), the side
navigation defined once (grouped, the current page marked, the owner's and operators' links
only for them), messages styled by their level, and a viewer shown no form that would be
refused. Django's test client on real Postgres; the browser half is test_layout_browser.py."""

import re
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from django.contrib.auth import get_user_model
from django.template import Context, Template
from django.test import Client

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import Membership
from tenants.portal.navigation import PAGES
from tenants.rules import services as rule_services

PASSWORD = "a long passphrase"


def _render(source: str, **context) -> str:
    return Template("{% load portal_time %}" + source).render(Context(context))


def test_utc_filter_is_iso_like_in_utc_to_the_second_with_a_machine_time():
    paris = timezone(timedelta(hours=1))
    moment = datetime(2026, 11, 27, 15, 2, 3, 456789, tzinfo=paris)
    assert _render("{{ t|utc }}", t=moment) == (
        '<time datetime="2026-11-27T14:02:03.456Z" title="2026-11-27 14:02:03 UTC">'
        "2026-11-27 14:02:03 UTC</time>"
    )
    assert ">2026-11-27 14:02:03.456 UTC</time>" in _render("{{ t|utc_ms }}", t=moment)


def test_utc_filter_reads_naive_times_as_utc_dates_as_days_and_none_as_nothing():
    assert ">2026-01-02 03:04:05 UTC<" in _render("{{ t|utc }}", t=datetime(2026, 1, 2, 3, 4, 5))
    assert _render("{{ d|utc }}", d=date(2026, 12, 31)) == (
        '<time datetime="2026-12-31">2026-12-31</time>'
    )
    assert _render('{{ t|utc|default:"never" }}', t=None) == "never"


def test_the_journey_keeps_its_millisecond_format_from_the_same_place():
    from tenants.journey.display import time_text

    moment = datetime(2026, 11, 27, 14, 2, 3, 123000, tzinfo=UTC)
    assert time_text(moment) == "2026-11-27 14:02:03.123 UTC"


def test_every_nav_page_is_a_portal_url_and_no_label_twice():
    labels = [page.label for page in PAGES]
    assert len(labels) == len(set(labels))
    groups = {page.group for page in PAGES}
    assert {"Devices", "Data", "Plan & billing", "Settings"} <= groups


@pytest.fixture
def owner_client():
    tenant, _, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    device_services.device_create(tenant=tenant, name="lamp")
    client = Client()
    client.post("/login/", {"email": "me@acme.io", "password": PASSWORD})
    return tenant, client


def _nav(html: str) -> str:
    return html[html.index("<nav>") : html.index("</nav>")]


@pytest.mark.django_db
def test_the_nav_is_grouped_marks_the_page_and_uses_no_other_time_format(owner_client):
    _, client = owner_client
    html = client.get("/devices/lamp/").content.decode()
    nav = _nav(html)
    headings = re.findall(r'class="nav-heading"[^>]*>([^<]+)<', nav)
    assert headings[:4] == ["Devices", "Data", "Plan &amp; billing", "Settings"]
    # The device's page is under Devices, and only that link is current.
    assert re.findall(r'<a href="([^"]+)" aria-current="page"', nav) == ["/devices/"]
    assert 'href="/audit/"' in nav  # an owner's
    assert 'href="/operator/"' not in nav
    # Times on the page: ISO-like UTC in a <time>, never Django's "Nov. 27, 2026, 2:02 p.m.".
    assert re.search(
        r'<time datetime="[^"]+Z" title="[^"]+">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<', html
    )
    assert not re.search(r"[ap]\.m\.", html)


@pytest.mark.django_db
def test_an_error_message_is_an_error_banner_not_a_success_one(owner_client):
    _, client = owner_client
    html = client.post("/retained/delete/", {"topic": "a/#/b"}, follow=True).content.decode()
    banners = re.findall(r'<p class="flash ([a-z ]+)" role="(\w+)">([^<]*)</p>', html)
    assert [(c, r) for c, r, text in banners if "Nothing deleted" in text] == [("error", "alert")]
    html = client.post("/retained/delete/", {"topic": "a/b"}, follow=True).content.decode()
    banners = re.findall(r'<p class="flash ([a-z ]+)" role="(\w+)">([^<]*)</p>', html)
    assert [(c, r) for c, r, text in banners if "Deleted" in text] == [("success", "status")]


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/devices/", "/devices/lamp/", "/rules/", "/rules/hot/"])
def test_a_viewer_sees_no_form_that_would_be_refused(owner_client, path):
    tenant, _ = owner_client
    rule_services.rule_create(tenant=tenant, name="hot", sql='SELECT * FROM "t/#"', actions=[])
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", PASSWORD)
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    client = Client()
    client.post("/login/", {"email": "v@acme.io", "password": PASSWORD})
    html = client.get(path).content.decode()
    posts = re.findall(r'<form[^>]*method="post"[^>]*>', html)
    # The account's own forms (log out, confirm the address) are the viewer's to use.
    tenant_forms = [f for f in posts if "/logout/" not in f and "/account/" not in f]
    assert tenant_forms == []
    assert "(viewer)" in html and 'href="/audit/"' not in _nav(html)
