"""The broker's config listener (`data_plane.tenancy.notifications`): once it listens, its
followers read everything again, the first time too. What they loaded before it listened (the
archive's needs at start-up, read before any client connects) would otherwise miss each change
committed in between: a broker started while a tenant saved rules archived and fed nothing for
those rules, and their actions never ran (bench.rules_live, 39 of 200 rules)."""

from __future__ import annotations

import asyncio

import pytest
from django.db import connection

from common.contracts.notifications import ChangeKind
from data_plane.tenancy.notifications import ConfigListener

pytestmark = pytest.mark.django_db(transaction=True)


def _dsn() -> str:
    params = connection.get_connection_params()
    return f"host={params['host']} port={params['port']} user={params['user']} dbname={params['dbname']}"


async def test_the_followers_reload_once_listening_the_first_time_too():
    seen: list[dict] = []

    async def follower(change: dict) -> None:
        seen.append(change)

    listener = ConfigListener(_dsn(), follower)
    listener.start()
    try:
        await asyncio.wait_for(listener.connected.wait(), 20)
    finally:
        await listener.stop()
    assert seen and seen[0]["kind"] == ChangeKind.RELOAD.value
