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
