"""The benchmark's own generator works: a short QoS 1 pairs run loses nothing, on both brokers."""

import pytest

from bench import brokers, scenarios


@pytest.mark.parametrize("broker_name", ["mosquitto", "ours"])
async def test_pairs_qos1_short_run_loses_nothing(broker_name):
    broker = brokers.start(broker_name)
    try:
        result = await scenarios.pairs(broker, n=5, qos=1, seconds=1.0)
    finally:
        broker.stop()
    assert result.received > 100
    assert result.loss == 0
    assert result.cpu_per_1000 > 0


async def test_pairs_across_tenants_log_each_pair_in_as_its_tenant():
    """Pairs spread over two tenants (bench.archive --tenants): each pair's clients share a
    login, so every pair's subscriber gets its publisher's messages in its own tenant."""
    broker = brokers.start("ours")
    try:
        logins = [(brokers.USERNAME, brokers.PASSWORD), brokers.SECOND_TENANT]
        result = await scenarios.pairs(broker, n=4, qos=1, seconds=1.0, creds=logins)
    finally:
        broker.stop()
    assert result.received > 100
    assert result.loss == 0
