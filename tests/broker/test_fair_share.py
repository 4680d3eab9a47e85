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


class _Transport:
    """A socket as the read gate sees it: writes go nowhere, pausing is recorded."""

    def __init__(self) -> None:
        self.paused = False

    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, key, default=None):
        return ("127.0.0.1", 1) if key == "peername" else default

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass


def _broker(*tenant_names: str):
    """A real broker with these tenants (device "d", password "p"), and the tenants of the
    messages it handles, in the order it handles them."""
    from data_plane.broker.broker import Broker
    from data_plane.config import BrokerConfig
    from data_plane.tenancy.static import StaticAuthenticator

    device = {"password": "p", "client_ids": "any"}
    tenants = {name: {"devices": {"d": device}} for name in tenant_names}
    broker = Broker(BrokerConfig(sys_interval=0), StaticAuthenticator(tenants))
    handled: list[str] = []
    broker.hooks.add("message.publish", lambda message: handled.append(message.tenant))
    return broker, handled


def _connected(broker, tenant: str, client_id: str):
    from common.mqtt.codec import encode
    from common.mqtt.packets import MQTT_3_1_1, Connect
    from data_plane.broker.connection import MQTTConnection

    conn = MQTTConnection(broker)
    conn.connection_made(_Transport())
    login = Connect(client_id, MQTT_3_1_1, username=f"{tenant}/d", password=b"p")
    conn.data_received(encode(login, MQTT_3_1_1))
    return conn


def _publishes(count: int, payload: bytes = b"x") -> bytes:
    from common.mqtt.codec import encode
    from common.mqtt.packets import MQTT_3_1_1, Publish

    return b"".join(encode(Publish("t", payload, 0), MQTT_3_1_1) for _ in range(count))


def test_a_tenant_that_had_its_share_of_a_loop_turn_waits_for_the_next():
    """Issue 28, a noisy neighbour: one tenant's connections that all have packets ready take
    at most its share of a turn of the event loop (`turns.PER_TURN`, plus the read that crossed
    it); another tenant's packet read in the same turn is handled in that turn, and the flood's
    are all handled over the next turns, in order."""
    from data_plane.broker.flow import SHARE_CHECK
    from data_plane.broker.turns import PER_TURN

    async def run() -> tuple:
        broker, handled = _broker("noisy", "calm")
        noisy = [_connected(broker, "noisy", f"n{i}") for i in range(6)]
        calm = _connected(broker, "calm", "c")
        await asyncio.sleep(0.05)  # CONNACKs
        flood = _publishes(300)
        for _ in range(3):  # heavy turns where both are at it: the broker learns who is busy
            noisy[0].data_received(flood)
            noisy[1].data_received(flood)
            calm.data_received(_publishes(1, b"y"))
            for _ in range(3):
                await asyncio.sleep(0)
        for _ in range(200):  # what the warm-up turns held back is handled by now
            if handled.count("noisy") == 3 * 2 * 300:
                break
            await asyncio.sleep(0)
        handled.clear()
        for conn in noisy:  # one loop turn: every noisy connection's socket had 300 ready
            conn.data_received(flood)
        calm.data_received(_publishes(1, b"y"))
        first_turn = list(handled)
        for _ in range(200):  # (each turn its share: 1,800 packets take about 30)
            await asyncio.sleep(0)
        return first_turn, handled

    first_turn, everything = asyncio.run(run())
    assert "calm" in first_turn
    # Its share, and at most the few packets after it that a read handled before it looked.
    assert first_turn.count("noisy") < PER_TURN + SHARE_CHECK
    assert everything.count("noisy") == 6 * 300  # none lost: the rest went in later turns


def test_a_read_of_tenants_busy_alike_or_of_one_alone_is_handled_whole():
    """The shares slice a flood beside quiet tenants only: a read of a tenant alone, or of one
    of several tenants busy alike (each with room in the turn), is handled in the callback
    that brought it, not a `flow.READ_SLICE` at a time (each slice a loop turn: ~5 % more CPU
    per message with ten tenants busy alike, bench.limiter)."""
    from data_plane.broker.flow import READ_SLICE

    read = 5 * READ_SLICE

    async def run() -> list[int]:
        handled_in_callback = []
        broker, handled = _broker("solo")
        solo = _connected(broker, "solo", "s")
        await asyncio.sleep(0.05)
        for _ in range(3):
            before = len(handled)
            solo.data_received(_publishes(read))
            handled_in_callback.append(len(handled) - before)
            await asyncio.sleep(0.011)  # (the shares move once per `turns.SAMPLE`)

        broker, handled = _broker("a", "b", "c")
        alike = [_connected(broker, tenant, tenant) for tenant in ("a", "b", "c")]
        await asyncio.sleep(0.05)
        for _ in range(5):  # turns where all three are at it alike: the shares apply
            for conn in alike:
                before = len(handled)
                conn.data_received(_publishes(read))
                handled_in_callback.append(len(handled) - before)
            await asyncio.sleep(0.011)
        assert broker.turns.limiting
        return handled_in_callback

    assert asyncio.run(run()) == [read] * (3 + 5 * 3)


def test_tenants_busy_alike_or_alone_are_never_held_back():
    """Holding a tenant back only helps when others wait: tenants all busy alike, or one
    alone, keep their whole turn (splitting it would only make more, smaller writes)."""
    from data_plane.broker.turns import PER_TURN, TenantTurns

    async def run() -> list[bool]:
        turns = TenantTurns()
        held = []
        for _ in range(5):
            for tenant in ("a", "b", "c"):  # three tenants, each 3x the floor every turn
                turns.spend(tenant, 3 * PER_TURN)
                held.append(turns.over(tenant))
            await asyncio.sleep(0)
        lone = TenantTurns()
        for _ in range(5):
            lone.spend("solo", 10 * PER_TURN)
            held.append(lone.over("solo"))
            await asyncio.sleep(0)
        return held

    assert not any(asyncio.run(run()))


def test_connections_that_waited_for_a_later_turn_resume_in_the_order_they_came():
    """A tenant over its share: its connections wait in one queue (not a look each per turn)
    and go in order, each turn while the tenant is under its share, the rest in later turns."""
    from data_plane.broker.turns import PER_TURN, TenantTurns

    async def run() -> list[list[str]]:
        turns = TenantTurns()
        for _ in range(3):  # a quiet tenant and a busy one: shares apply
            turns.spend("calm", 1)
            turns.spend("noisy", 10 * PER_TURN)
            await asyncio.sleep(0.011)  # (the shares move once per SAMPLE)
        assert turns.limiting
        turns.spend("noisy", 10 * PER_TURN)  # over its share in this turn
        resumed: list[str] = []
        per_turn: list[list[str]] = []

        def connection(name: str):
            def resume() -> None:
                resumed.append(name)
                turns.spend("noisy", PER_TURN)  # each handles a share's worth

            return resume

        for name in ("n1", "n2", "n3"):
            turns.wait_turn("noisy", connection(name))
        for _ in range(4):
            await asyncio.sleep(0)
            per_turn.append(list(resumed))
            resumed.clear()
        return per_turn

    # One a turn (each takes the share), first come first served, none left behind.
    assert [names for names in asyncio.run(run()) if names] == [["n1"], ["n2"], ["n3"]]


def test_a_connect_and_publishes_in_one_read_sliced_under_the_shares_are_all_answered_in_order():
    """While the shares apply, a read is handled a slice at a time (`flow.ReadGate.read_slice`):
    a client that pipelines CONNECT and 300 QoS 1 PUBLISHes in one write gets CONNACK and every
    PUBACK, in order — the packets after the CONNECT wait while it is judged, the rest of the
    read waits in the reader, and both follow without more bytes from the client."""
    from common.mqtt.codec import Reader, encode
    from common.mqtt.packets import MQTT_3_1_1, Connack, Connect, PubAck, Publish
    from data_plane.broker.connection import MQTTConnection
    from data_plane.broker.flow import READ_SLICE, SHARE_CHECK
    from data_plane.broker.turns import TenantTurns

    class Shares(TenantTurns):
        """Shares that apply and stay put: every tenant (and "", before CONNACK) gets a slice."""

        def __init__(self) -> None:
            super().__init__()
            self.limiting, self.default_limit = True, READ_SLICE

        def _share_out(self) -> None:
            pass

    class Recording(_Transport):
        def __init__(self) -> None:
            super().__init__()
            self.written = bytearray()

        def write(self, data: bytes) -> None:
            self.written += data

    async def run() -> list:
        broker, handled = _broker("solo")
        broker.turns = Shares()
        conn = MQTTConnection(broker)
        transport = Recording()
        conn.connection_made(transport)
        login = Connect("pipe", MQTT_3_1_1, username="solo/d", password=b"p")
        publishes = (Publish(f"t/{i}", b"x", 1, packet_id=i + 1) for i in range(300))
        conn.data_received(
            encode(login, MQTT_3_1_1) + b"".join(encode(p, MQTT_3_1_1) for p in publishes)
        )
        per_turn = []  # publishes handled in each loop turn
        for _ in range(200):
            before = len(handled)
            await asyncio.sleep(0)
            per_turn.append(len(handled) - before)
            if len(handled) == 300:
                break
        await asyncio.sleep(0.01)  # the last PUBACKs' write
        written = Reader(server_side=False, protocol_version=MQTT_3_1_1).feed(transport.written)
        return per_turn, written

    per_turn, answers = asyncio.run(run())
    # Sliced: a slice a turn of the shares (one loop iteration may hold the end of one such
    # turn and the start of the next), never the whole read at once.
    assert sum(per_turn) == 300 and max(per_turn) <= 2 * (READ_SLICE + SHARE_CHECK)
    assert type(answers[0]) is Connack and answers[0].reason_code == 0
    assert [(type(a), a.packet_id) for a in answers[1:]] == [(PubAck, i + 1) for i in range(300)]
