"""The live job's alarms, as one collaborator of `LiveJob` (`live.py`): what to evaluate beside
the rules, each batch's alarm rows to the keeper (`alarms.py`), the timers on the feed's clock,
the states written with the feed's position, and the notifications' sender (`alarm_notices.py`).

Threads: the feed's (or the file stream's batch) calls `rules`, `take` and `tick`; the job's
recorder calls `record`; the sender runs on its own. The keeper's states are touched under this
object's lock only; its writes use a connection of its own.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from common.archive.schema import device_of_username
from common.stores.object_store import ObjectStore
from spark.rules import store as db
from spark.rules.actions import ActionRunner
from spark.rules.alarm_notices import BATCH, AlarmNotifier
from spark.rules.alarms import AlarmKeeper
from spark.rules.feed import stream_id
from spark.rules.journey import RuleJourney
from spark.rules.metering import UsageTally, UsageWriter
from spark.rules.plan import RuleSpec
from spark.rules.presence import ALARM_NOTIFIERS, Presence

log = logging.getLogger("spark.rules.live")

# The alarms' clock is the feed's writers' lowest mark (`feed.Watermarks`): a timer fires once
# every broker says all it received before the timer's instant is in the stream. Without marks
# (no writer heard, or a broker of an older release among them) the clock keeps these seconds
# behind the newest entry: a message's way from its PUBLISH into the stream. A message later
# than the clock is read at its key's time (a transition's instant, never lost).
FEED_LAG = float(os.environ.get("RULES_ALARM_FEED_LAG", "0.5"))
FILE_LAG = 5.0  # a file stream's segments come seconds late: its clock keeps this (and a trigger)


class LiveAlarms:
    def __init__(
        self,
        dsn: str,
        store: ObjectStore,
        stream: str,
        usage: UsageWriter,
        journey: RuleJourney,
        record: Callable[[UsageTally], None],
    ) -> None:
        self.dsn, self.store = dsn, store
        self.keeper = AlarmKeeper(stream, lambda a, b: stream_id(a) > stream_id(b))
        self.usage, self.journey, self._record = usage, journey, record
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._stop = threading.Event()
        self._idle_read = 0.0  # when an idle feed last had the alarms read (`tick`)
        self._wake = threading.Event()  # transitions written: their notifications are due now
        self._sender: threading.Thread | None = None

    # -- the feed's thread ---------------------------------------------------------------------

    def rules(self, conn: psycopg.Connection[Any]) -> list[RuleSpec]:
        """The enabled alarms as rules of the dialect, for this batch's plan (read again when
        they changed; the devices they watch looked at every minute)."""
        with self._lock:
            self.keeper.refresh(conn)
            self.keeper.watch_devices(conn)
            return self.keeper.rules()

    def take(self, rows: list[Any], position: str | None) -> None:
        """A batch's alarm rows to their keys' machines — unless a restart's replay brings a
        batch whose transitions were written before it; their evaluations metered as rules'."""
        if not self.keeper.alarms or self.keeper.taken(position):
            return
        with self._lock:
            self.keeper.take(rows, position)
            changes, self.keeper.journey = self.keeper.journey, []
        self.journey.alarms(changes)
        if rows:  # evaluations metered as the rules' are (`rules_triggered`, 5 KiB units)
            tally = self.usage.new_tally()
            for row in rows:
                tally.add(row.tenant, rules_triggered=row.units or 0)
                device = device_of_username(row.username)
                tally.add_device(row.tenant, device, rules_triggered=row.units or 0)
            self._record(tally)

    def tick(self, clock: float, idle: bool = False) -> None:
        """Fire the timers due by `clock` and write what changed — called between the feed's
        batches, so every message read before `clock` was taken first: a raise after `for`
        is written at the end of the batch that read the writers' marks past its instant. `idle`: the feed had nothing
        new, so no batch read the alarms: they (and the devices they watch) are read here, or
        an alarm enabled over a silent fleet would never start (the independent probe's find)."""
        with self._lock:
            if idle and time.monotonic() - self._idle_read >= 1.0:  # a probe a second at most
                self._idle_read = time.monotonic()
                conn = self._connection()
                if conn is None:
                    return
                self.keeper.refresh(conn)
                self.keeper.watch_devices(conn)
            if not self.keeper.alarms:
                return
            if self.keeper.tick(clock) or self.keeper.changed:
                self._save()

    def early(self, table: pa.Table, clock: float, position: str) -> None:
        """A batch was just read, with the writers' marks that move the clock to `clock`:
        the timers due by then of keys it carries no message for fire now, not after its
        evaluation (a third of a second at 2,000 msg/s on this 2-core machine); the others
        wait for `tick`. Skipped for a batch a restart reads again (its transitions are
        written)."""
        if not self.keeper.alarms or self.keeper.taken(position):
            return
        with self._lock:
            due = self.keeper.due(clock)
            if not due:
                return
            tenants = sorted({self.keeper.alarms[a].tenant for a in due})
            rows = table.filter(pc.is_in(table["tenant"], pa.array(tenants, pa.string())))
            held = self.keeper.in_flight(rows.to_pylist(), due)
            if self.keeper.tick(clock, held):
                self._save()

    # -- the recorder's thread -----------------------------------------------------------------

    def record(self, file_stream: bool, trigger_seconds: float) -> None:
        """Write what is not written yet (and read acknowledgements back); a file stream's
        timers fire here, its clock FILE_LAG and a trigger behind now."""
        if not self.keeper.alarms:
            return
        with self._lock:
            if file_stream:
                self.keeper.tick(time.time() - trigger_seconds - FILE_LAG)
            self._save()

    def _connection(self) -> psycopg.Connection[Any] | None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = db.connect(self.dsn)
        except Exception as exc:
            log.warning("alarms: the database is away (%s): kept for the next try", exc)
            return None
        return self._conn

    def _save(self) -> None:
        if self._connection() is None:
            return
        assert self._conn is not None
        written = len(self.keeper.transitions)
        if self.keeper.save(self._conn) and written:
            self._wake.set()
            log.debug("alarms: %d transition(s) written", written)

    # -- the notifications' sender ---------------------------------------------------------------

    def start(self) -> None:
        self._sender = threading.Thread(target=self._send, name="alarm-notices", daemon=True)
        self._sender.start()

    def _send(self, seconds: float = 0.5) -> None:
        """The alarms' webhooks and republishes, from their outbox (`alarm_notices.py`)."""
        notifier, conn = None, None
        while not self._stop.is_set():
            self._wake.wait(seconds)  # woken by a write, else every `seconds` (retries, acks)
            self._wake.clear()
            try:
                if conn is None or conn.closed:
                    conn = db.connect(self.dsn)
                if notifier is None:
                    notifier = AlarmNotifier(
                        ActionRunner(self.store, max_workers=4),
                        Presence(self.dsn, ALARM_NOTIFIERS),
                    )
                while notifier.send_due(conn) >= BATCH and not self._stop.is_set():
                    pass  # a full claim: there may be more due
            except Exception:
                log.exception("alarm notifications not sent (tried again)")
                conn = None
        if notifier is not None:
            notifier.runner.close()
            notifier.presence.close()
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._sender is not None:
            self._sender.join(15)
        with self._lock:
            self._save()
            if self._conn is not None:
                self._conn.close()
