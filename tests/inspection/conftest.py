from tests.cluster.conftest import redis_url  # noqa: F401 (the cluster tests' Redis fixture)
