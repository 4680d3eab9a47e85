"""The decisions of `CredentialWatch`, alone: which connections a device's current credentials
still carry (the end to end behaviour is in test_broker_tenancy.py)."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from data_plane.tenancy.credential_watch import doomed, live_credentials
from data_plane.tenancy.store import CredentialRecord, DeviceRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def record(*credentials, enabled=True):
    return DeviceRecord(1, "acme", True, 7, "d1", enabled, credentials=list(credentials))


def conn(credential_id):
    return SimpleNamespace(auth=SimpleNamespace(credential_id=credential_id))


def test_live_credentials_drop_the_expired_and_everything_of_a_disabled_device():
    new = CredentialRecord(2, "h2", None)
    retiring = CredentialRecord(1, "h1", NOW + timedelta(hours=1))
    expired = CredentialRecord(0, "h0", NOW - timedelta(seconds=1))
    assert set(live_credentials(record(new, retiring, expired), NOW)) == {1, 2}
    assert live_credentials(record(new, enabled=False), NOW) == {}
    assert live_credentials(None, NOW) == {}


def test_only_connections_on_a_gone_secret_are_doomed():
    on_new, on_old, service = conn(2), conn(1), conn(None)
    live = {2: CredentialRecord(2, "h2", None)}
    assert doomed([on_new, on_old, service], live) == [on_old]
    assert doomed([on_new, on_old], {}) == [on_new, on_old]
