"""bench.routes_memory works: a small run finds one route per distinct (tenant, filter), one per
filter shared by many subscribers, and measures every figure it reports."""

import tempfile
from pathlib import Path

from bench import routes_memory


def test_small_run_counts_routes_and_measures_memory():
    with tempfile.TemporaryDirectory() as folder:
        process, port = routes_memory.start_redis(Path(folder))
        try:
            distinct = routes_memory.measure("distinct", 3000, 20, port)
            duplicate = routes_memory.measure("duplicate", 3000, 20, port)
        finally:
            process.kill()
            process.wait(5)
    assert distinct.routes == 3000
    assert duplicate.routes == 3000 // routes_memory.DUPLICATES
    for figures in (distinct, duplicate):
        assert figures.redis_bytes > 0 and figures.router_bytes > 0 and figures.replica_bytes > 0
    # A route stands for a filter, not a subscriber: far less per subscription when shared.
    assert duplicate.redis_bytes < distinct.redis_bytes / 10
    assert "| distinct | 3,000 | 3,000 |" in routes_memory.table([distinct, duplicate])
