from data_plane.broker.rates import TenantRates, TokenBucket


def test_bucket_grants_burst_then_rate():
    bucket = TokenBucket(rate=10, capacity=10)
    now = bucket.updated
    assert all(bucket.take(1, now) == 0 for _ in range(10))
    assert bucket.take(1, now) > 0
    assert bucket.take(1, now + 0.1) == 0  # 0.1 s refills one token


def test_zero_rate_means_unlimited():
    assert TokenBucket(rate=0, capacity=1).take(10**9) == 0


def test_tenant_rates_limit_messages_and_bytes():
    rates = TenantRates({"max_publish_rate": 5, "max_inbound_bytes_rate": 1000})
    assert [rates.admit(100) == 0 for _ in range(6)] == [True] * 5 + [False]
    rates = TenantRates({"max_publish_rate": 100, "max_inbound_bytes_rate": 1000})
    assert rates.admit(900) == 0
    assert rates.admit(900) > 0
    assert rates.exceeded == 1
