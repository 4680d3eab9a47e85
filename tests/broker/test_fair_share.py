"""The tenant's publish rate shared among its publishers: turns, patience, leaving (unit level,
on a real event loop and the real token buckets)."""

import asyncio

from data_plane.broker.fair_share import Held, OverTooLong, PublishShare
from data_plane.broker.rates import TenantRates


class Publisher:
    """A waiter as the read gate is one: woken, it sends what it held, one publish per take."""

    def __init__(self, share: PublishShare, name: str, backlog: int, log: list) -> None:
        self.share, self.name, self.backlog, self.log = share, name, backlog, log
        self.closing = False
        self.waiting = False

    def send(self) -> None:
        while self.backlog and not self.waiting:
            if self.share.take(self, self.name, 10, False) is not None:
                self.waiting = True
                return
            self.backlog -= 1
            self.log.append(self.name)

    def wake(self) -> None:
        self.waiting = False
        self.send()


def test_waiting_publishers_take_turns():
    async def run() -> list:
        log: list = []
        share = PublishShare(TenantRates({"max_publish_rate": 200}), {}, asyncio.get_running_loop())
        flood = Publisher(share, "flood", 400, log)
        flood.send()  # the burst (200), then it waits
        calm = Publisher(share, "calm", 3, log)
        calm.send()
        await asyncio.sleep(0.2)
        return log

    log = asyncio.run(run())
    assert log[:200] == ["flood"] * 200
    turns = log[200:]
    # From the first round on, the calm publisher goes every other turn until it is done.
    assert turns[:6] == ["flood", "calm"] * 3 or turns[:6] == ["calm", "flood"] * 3


def test_a_device_rate_holds_only_that_device():
    async def run() -> list:
        log: list = []
        loop = asyncio.get_running_loop()
        share = PublishShare(None, {"max_device_publish_rate": 10}, loop)
        greedy = Publisher(share, "greedy", 15, log)
        other = Publisher(share, "other", 10, log)
        greedy.send(), other.send()
        await asyncio.sleep(0.25)
        return log

    log = asyncio.run(run())
    assert log.count("other") == 10  # within its own rate: never held
    assert 10 <= log.count("greedy") <= 13  # its burst, then 10/s


def test_a_publisher_over_its_rate_past_the_patience_is_refused_not_held():
    async def run() -> list:
        now = [0.0]
        loop = asyncio.get_running_loop()
        share = PublishShare(
            TenantRates({"max_publish_rate": 1}), {}, loop, patience=5, clock=lambda: now[0]
        )
        waiter = Publisher(share, "d", 0, [])
        results = [share.take(waiter, "d", 1, True)]  # the burst
        results.append(share.take(waiter, "d", 1, True))  # held: its run over the rate starts
        now[0] = 6.0
        results.append(share.take(waiter, "d", 1, True))  # over for 6 s: refused
        results.append(share.take(waiter, "d", 1, False))  # QoS 0 / 3.1.1: held, never refused
        return results

    results = asyncio.run(run())
    assert results[0] is None
    assert type(results[1]) is Held and results[1].quota == "publish_rate"
    assert type(results[2]) is OverTooLong
    assert type(results[3]) is Held


def test_a_closed_waiter_loses_its_turn():
    async def run() -> list:
        log: list = []
        share = PublishShare(TenantRates({"max_publish_rate": 100}), {}, asyncio.get_running_loop())
        first = Publisher(share, "gone", 200, log)
        first.send()
        second = Publisher(share, "stays", 5, log)
        second.send()
        first.closing = True
        await asyncio.sleep(0.15)
        return log

    log = asyncio.run(run())
    assert log.count("gone") == 100  # the burst, and nothing after it closed
    assert log.count("stays") == 5
