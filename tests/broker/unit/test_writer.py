"""`writer.Writer` with a recording transport: one write per loop turn, CONNACK first while
held, and a shutdown that lets the client read what was written."""

from __future__ import annotations

import asyncio

from data_plane.broker.writer import Writer


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.eof = self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> None:
        return None

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def resume_reading(self) -> None: ...

    def close(self) -> None:
        self.closed = True


class Owner:
    def __init__(self) -> None:
        self.transport = Transport()
        self.session = None
        self.write_paused = False


async def test_everything_sent_in_one_turn_goes_out_in_one_write():
    owner = Owner()
    writer = Writer(owner, asyncio.get_running_loop())
    for data in (b"a", b"bc", b"d"):
        writer.send(data)
    assert owner.transport.writes == [] and writer.size == 4
    await asyncio.sleep(0)
    assert owner.transport.writes == [b"abcd"] and writer.size == 0


async def test_held_writes_wait_for_connack_which_goes_first():
    owner = Owner()
    writer = Writer(owner, asyncio.get_running_loop())
    writer.hold = True
    writer.send(b"delivery")
    await asyncio.sleep(0)
    assert owner.transport.writes == []
    writer.first(b"CONNACK")
    await asyncio.sleep(0)
    assert owner.transport.writes == [b"CONNACKdelivery"]


async def test_shut_writes_what_is_batched_then_half_closes_and_closes_after_the_linger():
    owner = Owner()
    writer = Writer(owner, asyncio.get_running_loop())
    writer.send(b"last")
    writer.shut(0.01)
    assert owner.transport.writes == [b"last"] and owner.transport.eof
    assert not owner.transport.closed
    writer.send(b"after")  # nothing more is written once shut
    await asyncio.sleep(0.03)
    assert owner.transport.closed and owner.transport.writes == [b"last"]
    writer.now(b"refusal")
    assert owner.transport.writes == [b"last"]
