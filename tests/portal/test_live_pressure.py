"""The live view under attack (issue 28): one portal member opened 150 `/ws/live/` sockets, each
its own broker connection, and every other tenant's API slowed from 31 ms to 2.34 s.

From the attacker's side, with the real broker and portal processes: sockets beyond a member's
or a tenant's bound are refused with a close code and words the page shows; a tenant's sockets
share one broker connection per web process; another tenant's API keeps its latency while one
tenant holds its bound of sockets under a flood; tenants sharing the hub never see each other;
viewers are told when the broker goes and comes back."""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from common.runtime import embedded
from common.runtime.embedded import free_port
from common.runtime.processes import data_plane_command
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.portal.live_sockets import (
    LiveSocket,
    broker_connections,
    open_live,
    open_many,
    session_cookie,
)
from tests.portal.web import log_in, running_portal

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "live-pressure-test-key"
PASSWORD = "a long passphrase"
REFUSED = 4429  # the live view's close code for a socket over its bound


class LiveClients:
    """An asyncio loop on a thread of its own for the sockets, so that they stay open (and read)
    while the test body drives a browser or measures the API."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def stop(self) -> None:
        async def cancel_the_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_the_rest(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


async def every(*coroutines):
    return list(await asyncio.gather(*coroutines))


@contextmanager
def live_clients() -> Iterator[LiveClients]:
    clients = LiveClients()
    try:
        yield clients
    finally:
        clients.stop()


def start_broker(port: int) -> subprocess.Popen:
    """A broker on the test database at a fixed port (so that one started again takes its place)."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    process = subprocess.Popen(
        data_plane_command(
            port=port, ws_port=0, database_url=url, extra=["--sys-interval", "0.5", "--no-archive"]
        ),
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    while True:
        line = process.stdout.readline()
        assert line, "broker exited"
        if line.startswith("LISTENING mqtt"):
            break
    threading.Thread(target=process.stdout.read, daemon=True).start()  # never block its stdout
    connection.close()
    return process


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=10)


@contextmanager
def platform(monkeypatch, **portal_env: str) -> Iterator[tuple[str, int, subprocess.Popen]]:
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    mqtt_port = free_port()
    broker = start_broker(mqtt_port)
    try:
        with running_portal(mqtt_port, **portal_env) as url:
            yield url, mqtt_port, broker
    finally:
        if broker.poll() is None:
            stop(broker)


def member(tenant, email: str, role: str = "viewer"):
    user = get_user_model().objects.create_user(email, email, PASSWORD)
    account_services.membership_add(tenant=tenant, user=user, role=role)
    return user


def outcomes(clients: LiveClients, sockets: list[LiveSocket]) -> list[str]:
    return clients.run(every(*(sock.outcome() for sock in sockets)))


def refusal_words(sock: LiveSocket) -> str:
    errors = sock.of_type("error")
    return errors[-1]["error"] if errors else ""


@pytest.fixture
def two_members():
    """Made before the browser starts (Playwright's sync API runs the test body where Django
    would refuse a database call)."""
    acme, owner, _ = account_services.signup(tenant="acme", email="ops@acme.io", password=PASSWORD)
    colleague = member(acme, "dev@acme.io")
    return session_cookie(owner), session_cookie(colleague)


@pytest.fixture
def tight_platform(monkeypatch, two_members):
    """Three live pages a member, five a tenant; started before the browser (as `two_members`)."""
    with platform(monkeypatch, LIVE_SOCKETS_PER_MEMBER="3", LIVE_SOCKETS_PER_TENANT="5") as up:
        yield up


@pytest.mark.browser
def test_sockets_beyond_a_members_or_tenants_bound_are_refused_in_words(
    two_members, tight_platform, page
):
    mine, theirs = two_members
    url, _, _ = tight_platform
    with live_clients() as live:
        own = live.run(open_many(url, [mine] * 4))
        assert sorted(outcomes(live, own)) == ["live", "live", "live", "refused"]
        over = next(sock for sock in own if sock.closed)
        assert over.close_code == REFUSED
        assert "3 live pages" in refusal_words(over), over.frames

        # The colleague's own bound is not reached, the tenant's is.
        other = live.run(open_many(url, [theirs] * 3))
        assert sorted(outcomes(live, other)) == ["live", "live", "refused"]
        over = next(sock for sock in other if sock.closed)
        assert over.close_code == REFUSED
        assert "acme" in refusal_words(over) and "5 live pages" in refusal_words(over)

        # A page that closes gives its place back.
        opened = [sock for sock in own if not sock.closed]
        live.run(opened[0].close())
        again = live.run(open_live(url, theirs))
        assert live.run(again.outcome()) == "live"

        # The page says why it shows nothing live, in words.
        log_in(page, url, "ops@acme.io", PASSWORD)
        page.wait_for_function(
            "el => el.textContent.includes('5 live pages')",
            arg=page.locator("#live-status").element_handle(),
        )
        # ...and with a place free, the dashboard shows how many are open, against the bounds.
        live.run(again.close())
        page.reload()
        page.wait_for_selector("#live-status.on")
        page.wait_for_function(
            "el => el.textContent === '5'", arg=page.locator("[data-live=viewers]").element_handle()
        )
        assert page.locator("[data-live=viewer_limit]").text_content() == "5"
        assert page.locator("[data-live=yours]").text_content() == "3"
        assert page.locator("[data-live=your_limit]").text_content() == "3"


def test_thirty_sockets_share_one_broker_connection_and_tenants_stay_apart(monkeypatch):
    acme, owner, _ = account_services.signup(tenant="acme", email="ops@acme.io", password=PASSWORD)
    _, acme_secret = device_services.device_create(tenant=acme, name="sensor-a")
    other, stranger, _ = account_services.signup(
        tenant="other", email="ops@other.io", password=PASSWORD
    )
    _, other_secret = device_services.device_create(tenant=other, name="sensor-b")
    acme_cookie, other_cookie = session_cookie(owner), session_cookie(stranger)
    env = {"LIVE_SOCKETS_PER_MEMBER": "40", "LIVE_SOCKETS_PER_TENANT": "40"}
    with platform(monkeypatch, **env) as (url, mqtt_port, _), live_clients() as live:
        acme_views = live.run(open_many(url, [acme_cookie] * 30))
        other_view = live.run(open_live(url, other_cookie))
        assert outcomes(live, [*acme_views, other_view]) == ["live"] * 31
        assert broker_connections(mqtt_port) == 2  # one per tenant, not one per socket

        everything, sensors = acme_views[:15], acme_views[15:]
        live.run(every(*(sock.watch("#") for sock in [*everything, other_view])))
        live.run(every(*(sock.watch("sensors/#") for sock in sensors)))
        assert broker_connections(mqtt_port) == 2

        device = Paho(mqtt_port, "acme/sensor-a", acme_secret, "sensor-a")
        neighbour = Paho(mqtt_port, "other/sensor-b", other_secret, "sensor-b")
        device.publish("sensors/t", "acme secret", 1)
        device.publish("alerts/t", "acme alert", 1)
        neighbour.publish("sensors/t", "other hello", 1)

        def got(*payloads):
            return lambda sock: all(p in sock.payloads() for p in payloads)

        assert live.run(other_view.wait_for(got("other hello")))
        for sock in everything:
            assert live.run(sock.wait_for(got("acme secret", "acme alert"))), sock.frames[-5:]
        for sock in sensors:
            assert live.run(sock.wait_for(got("acme secret"))), sock.frames[-5:]
        time.sleep(0.5)
        for sock in acme_views:
            assert "other hello" not in sock.payloads()
            assert not any(f.get("device") == "sensor-b" for f in sock.of_type("presence"))
        for sock in sensors:
            assert "acme alert" not in sock.payloads()  # each viewer gets its own filter only
        assert other_view.payloads() == ["other hello"]
        assert not any(f.get("device") == "sensor-a" for f in other_view.of_type("presence"))
        assert not any(
            isinstance(f["online"], list) and "sensor-a" in f["online"]
            for f in other_view.of_type("presence")
        )
        device.close()
        neighbour.close()

        # The tenant's connection goes with its last viewer; the other tenant's stays.
        live.run(every(*(sock.close() for sock in acme_views)))
        deadline = time.monotonic() + 10
        while broker_connections(mqtt_port) != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert broker_connections(mqtt_port) == 1
        live.run(other_view.close())


def test_the_bounds_hold_across_web_processes_sharing_a_redis(monkeypatch):
    """Two web processes behind one load balancer: a member cannot get around the bound by
    landing on the other one."""
    import redis

    acme, owner, _ = account_services.signup(tenant="acme", email="ops@acme.io", password=PASSWORD)
    cookie = session_cookie(owner)
    redis_url = embedded.redis_url().rsplit("/", 1)[0] + "/13"  # a database of its own
    redis.Redis.from_url(redis_url).flushdb()
    env = {"REDIS_URL": redis_url, "LIVE_SOCKETS_PER_MEMBER": "2"}
    with (
        platform(monkeypatch, **env) as (url, mqtt_port, _),
        running_portal(mqtt_port, **env) as second_url,
        live_clients() as live,
    ):
        here = live.run(open_many(url, [cookie] * 2))
        assert outcomes(live, here) == ["live", "live"]
        there = live.run(open_live(second_url, cookie))
        assert outcomes(live, [there]) == ["refused"]
        assert there.close_code == REFUSED and "2 live pages" in refusal_words(there)

        live.run(here[0].close())
        there = live.run(open_live(second_url, cookie))
        assert outcomes(live, [there]) == ["live"]
        # Each page counts the pages open in both processes.
        figures = live.run(there.wait_for(lambda s: s.of_type("live")))
        assert figures[-1]["viewers"] == 2 and figures[-1]["yours"] == 2
        # One broker connection per tenant and web process.
        assert broker_connections(mqtt_port) == 2


def test_viewers_are_told_when_the_broker_goes_and_see_messages_when_it_is_back(monkeypatch):
    acme, owner, _ = account_services.signup(tenant="acme", email="ops@acme.io", password=PASSWORD)
    _, secret = device_services.device_create(tenant=acme, name="sensor-a")
    cookie = session_cookie(owner)
    with platform(monkeypatch) as (url, mqtt_port, broker), live_clients() as live:
        device = Paho(mqtt_port, "acme/sensor-a", secret, "sensor-a")
        device.publish("sensors/state", "retained state", 1, retain=True)
        device.close()
        views = live.run(open_many(url, [cookie] * 3))
        assert outcomes(live, views) == ["live"] * 3
        for sock in views:  # one after the other: each new watch makes the broker send it again
            live.run(sock.watch("sensors/#"))
            assert live.run(sock.wait_for(lambda s: "retained state" in s.payloads()))
        time.sleep(0.5)
        for sock in views:  # each page shown the retained message once, when it began watching
            assert sock.payloads().count("retained state") == 1, sock.payloads()

        stop(broker)
        for sock in views:
            told = live.run(
                sock.wait_for(lambda s: any(not f["connected"] for f in s.of_type("status")))
            )
            assert told, sock.frames[-5:]
        before = [len(sock.of_type("status")) for sock in views]

        broker = start_broker(mqtt_port)
        try:
            for sock, seen in zip(views, before, strict=True):
                back = live.run(
                    sock.wait_for(
                        lambda s, seen=seen: any(f["connected"] for f in s.of_type("status")[seen:])
                    ),
                )
                assert back, sock.frames[-5:]
            device = Paho(mqtt_port, "acme/sensor-a", secret, "sensor-a")
            device.publish("sensors/t", "after the restart", 1)
            for sock in views:  # the watched filters were subscribed again
                assert live.run(sock.wait_for(lambda s: "after the restart" in s.payloads()))
            device.close()
        finally:
            stop(broker)


def _api_latencies(url: str, token: str, seconds: float) -> list[float]:
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {token}"
    latencies = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        response = session.get(f"{url}/api/v1/devices", timeout=30)
        latencies.append(time.monotonic() - started)
        assert response.status_code == 200
    return latencies


def _flood(port: int, secret: str, stop_at: threading.Event, rate: int = 2000) -> int:
    publisher = Paho(port, "acme/sensor-a", secret, "sensor-a")
    assert publisher.reason_code == 0
    sent = 0
    started = time.monotonic()
    while not stop_at.is_set():
        publisher.client.publish("sensors/flood", b"x" * 200, 0)
        sent += 1
        ahead = sent / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    publisher.close()
    return sent


def _metrics(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}  # asserted below, after the latency
    figures = {}
    for line in text.splitlines():
        if line.startswith("portal_live_"):
            name, value = line.rsplit(" ", 1)
            figures[name] = float(value)
    return figures


@pytest.mark.serial  # measures latency: not beside other tests
def test_another_tenants_api_keeps_its_latency_while_one_tenant_floods_its_live_views(
    monkeypatch,
):
    acme, owner, _ = account_services.signup(tenant="acme", email="ops@acme.io", password=PASSWORD)
    tenant_services.tenant_set_quota(acme, {"max_publish_rate": 100_000})
    _, secret = device_services.device_create(tenant=acme, name="sensor-a")
    members = [owner] + [member(acme, f"m{i}@acme.io") for i in range(4)]
    cookies = [session_cookie(user) for user in members]
    _, _, token = account_services.signup(tenant="other", email="ops@other.io", password=PASSWORD)
    metrics_port = free_port()
    # The default bounds (5 per member, 20 per tenant).
    with (
        platform(monkeypatch, WEB_METRICS_PORT=str(metrics_port)) as (url, mqtt_port, _),
        live_clients() as live,
    ):
        _api_latencies(url, token, 0.5)  # warm
        baseline = _api_latencies(url, token, 2)

        # 150 sockets, as the attack opened: 30 from each of five members.
        sockets = live.run(open_many(url, [cookie for cookie in cookies for _ in range(30)]))
        settled = outcomes(live, sockets)
        opened = [sock for sock, how in zip(sockets, settled, strict=True) if how == "live"]
        live.run(every(*(sock.watch("#") for sock in opened)))

        stop_flood = threading.Event()
        flooded: list[int] = []
        flood = threading.Thread(
            target=lambda: flooded.append(_flood(mqtt_port, secret, stop_flood)), daemon=True
        )
        flood.start()
        time.sleep(1)
        during = _api_latencies(url, token, 4)
        stop_flood.set()
        flood.join(10)
        figures = _metrics(metrics_port)
        base_p50, flood_p50 = statistics.median(baseline), statistics.median(during)
        print(
            f"other tenant's API p50 {base_p50 * 1000:.1f} ms alone, {flood_p50 * 1000:.1f} ms "
            f"beside the flood ({flooded} messages); max {max(during) * 1000:.0f} ms; "
            f"sockets {Counter(settled)}"
        )
        # Asserted here: the old code's portal did not even stop within 10 s afterwards.
        assert flood_p50 < max(4 * base_p50, base_p50 + 0.05), (base_p50, flood_p50)

    assert Counter(settled) == {"live": 20, "refused": 130}
    assert all(sock.close_code == REFUSED for sock in sockets if sock.closed)
    # Each page is still shown at most 50 messages a second, the rest counted.
    for sock in opened:
        per_second = Counter(frame["at"] // 1000 for frame in sock.of_type("message"))
        assert per_second and max(per_second.values()) <= 50, sock.frames[-3:]
        assert sock.of_type("dropped")

    # Counted for the operators, per tenant (existing tenants only: the label is checked).
    assert figures['portal_live_viewers{tenant="acme"}'] == 20
    assert figures["portal_live_broker_connections"] == 1
    refused = sum(v for k, v in figures.items() if k.startswith("portal_live_refused_total{"))
    assert refused == 130
    assert figures['portal_live_messages_shown_total{tenant="acme"}'] >= 20
    assert figures['portal_live_messages_not_shown_total{tenant="acme"}'] > 0


def test_a_new_password_ends_the_accounts_open_live_pages(monkeypatch, two_members):
    """Issue 28: a password reset ends every session of the account, an open live page too (a
    WebSocket is authenticated once, when it opens): within the re-check interval it is told and
    closed; a colleague's page stays."""
    mine, theirs = two_members
    with platform(monkeypatch, LIVE_SESSION_RECHECK="0.5") as (url, _, _):
        with live_clients() as live:
            own, other = live.run(open_many(url, [mine, theirs]))
            assert outcomes(live, [own, other]) == ["live", "live"]
            owner = get_user_model().objects.get(email="ops@acme.io")
            owner.set_password("a brand new long password")
            owner.save()
            connection.close()
            live.run(own.wait_for(lambda sock: sock.closed, timeout=5))
            assert own.close_code == 4401
            assert "signed out" in refusal_words(own)
            assert not other.closed
