"""What a request that goes wrong gets, and what every page's tab says: the API's JSON error
envelope on any /api/ 404 (an unknown URL included), the portal's own 404 and 500 pages under
the settings `make run` uses (never Django's DEBUG page with its URL list), tab titles free of
markup on every portal page, and the API docs page's way back. Django's test client on real
Postgres."""

import os
import re
import subprocess
import sys
from html import unescape

import pytest
from django.test import Client, override_settings
from django.urls import include, path, reverse
from django.urls.exceptions import NoReverseMatch

from control_plane import urls as root_urls
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.portal import urls as portal_urls

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"
DEBUG_PAGE_MARKS = ("URLconf", "URL patterns", "Traceback", "technical_404", "DEBUG = True")


def _debug_under_make_run() -> bool:
    """settings.DEBUG as `make run` gets it: `runplatform` with no DJANGO_DEBUG* set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DJANGO_DEBUG")}
    env["DJANGO_SETTINGS_MODULE"] = "control_plane.settings"
    out = subprocess.run(
        [sys.executable, "-c", "from django.conf import settings; print(settings.DEBUG)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return out.stdout.strip() == "True"


def _title(html: str) -> str:
    match = re.search(r"<title>(.*?)</title>", html, re.S)
    assert match, "no <title>"
    return unescape(match.group(1))


@pytest.mark.parametrize(
    "url", ["/api/v1/nope", "/api/nope/", "/api/v1/devices/lamp/no/such/thing", "/api/v2/devices"]
)
def test_every_api_404_is_the_json_error_envelope(url):
    for client in (Client(), Client(HTTP_AUTHORIZATION="Bearer mqp_whatever")):
        response = client.get(url)
        assert response.status_code == 404
        assert response["Content-Type"].startswith("application/json")
        error = response.json()["error"]
        assert error["code"] == "not_found" and url in error["message"]


def test_an_unknown_portal_url_is_the_product_404_under_make_run_settings():
    with override_settings(DEBUG=_debug_under_make_run()):
        anonymous = Client().get("/no/such/page/")
        assert anonymous.status_code == 404
        html = anonymous.content.decode()
        assert _title(html) == "Page not found · MQTT platform"
        assert 'class="brand"' in html and "/login/" in html  # the portal's layout, a way on
        assert not any(mark in html for mark in DEBUG_PAGE_MARKS)
        assert "devices/&lt;str:name&gt;" not in html and "portal:" not in html

        tenant, user, _ = account_services.signup(
            tenant="acme", email="me@acme.io", password=PASSWORD
        )
        member = Client()
        member.force_login(user)
        missing_device = member.get("/devices/nope/")
        assert missing_device.status_code == 404
        assert "Page not found" in missing_device.content.decode()
        assert "Dashboard" in missing_device.content.decode()  # the member's navigation


def _boom(request):
    raise RuntimeError("a bug in a view")


urlpatterns = [
    path("boom/", _boom),
    path("api/v1/boom", _boom),
    path("", include("control_plane.urls")),
]
# The real URLconf's handler, tried here (Django's own where it names none).
handler500 = getattr(root_urls, "handler500", "django.views.defaults.server_error")


@override_settings(ROOT_URLCONF=__name__, DEBUG=False)
def test_a_server_error_is_the_product_500_page_and_json_under_api():
    client = Client(raise_request_exception=False)
    page = client.get("/boom/")
    assert page.status_code == 500
    html = page.content.decode()
    assert _title(html) == "Something went wrong · MQTT platform" and 'class="brand"' in html
    assert "a bug in a view" not in html and "Traceback" not in html
    api = client.get("/api/v1/boom")
    assert api.status_code == 500 and api.json()["error"]["code"] == "server_error"


def _sample_kwargs(pattern) -> dict:
    names = list(getattr(pattern.pattern, "converters", {}) or pattern.pattern.regex.groupindex)
    samples = {"name": "lamp", "client_id": "lamp", "period": "2026-01", "slug": "acme"}
    return {n: samples.get(n, 1 if n.endswith("_id") else "x") for n in names if n != "fmt"}


def test_every_portal_page_title_is_plain_text():
    tenant, user, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    device_services.device_create(tenant=tenant, name="lamp")
    user.is_staff = True  # the operators' pages too
    user.save(update_fields=["is_staff"])
    client = Client(raise_request_exception=False)
    client.force_login(user)
    seen = {}
    for pattern in portal_urls.urlpatterns:
        try:
            url = reverse(f"portal:{pattern.name}", kwargs=_sample_kwargs(pattern))
        except NoReverseMatch:
            continue
        response = client.get(url)
        if not response["Content-Type"].startswith("text/html") or not response.content:
            continue
        title = _title(response.content.decode())
        assert title.strip() and "<" not in title and ">" not in title, (url, title)
        assert title == title.strip() and "\n" not in title, (url, title)
        seen[url] = (response.status_code, title)
    assert len(seen) >= 30, seen
    assert seen["/rules/"] == (200, "Rules · MQTT platform")
    assert seen["/operator/tenants/acme/topics/"][0] == 200
    assert all(title != "MQTT platform" for url, (_, title) in seen.items() if url != "/"), seen
    assert not [url for url, (status, _) in seen.items() if status >= 500], seen


def test_the_api_docs_page_links_back_to_the_portal():
    response = Client().get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(r'<a href="/">[^<]*portal', html) and "swagger-ui" in html
    assert _title(html) == "API reference · MQTT platform"
