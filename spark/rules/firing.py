"""Which of a run's actions fire: the `actions` choice of a run over history.

- `all`: every action fires (as `manage.py run_rules` always did); those that succeed are
  recorded in the action ledger, so a later `new-only` run does not repeat them;
- `none`: the outputs are computed and counted, no action fires (each is `skipped`);
- `new-only`: an action fires only if the ledger does not hold it (done by the live job, an
  earlier run or a replay, for the same rule version and message, or claimed by a run under
  way): claimed for the run (`run_id`) before it runs, confirmed once it ran, released if it
  failed. Actions of messages without an id cannot be told apart: they fire.

With `only_action` (1-based, as users count), a run fires that action of its rules only (a
re-send from history to one sink): the jobs of the other actions are skipped before anything is
claimed, in every mode.

`Gate.admit` splits a group of jobs into those to run and the number skipped; `Gate.settle`
records (confirms, releases) after they ran. Database trouble while claiming is an error of the
run (it stops rather than fire what it cannot check); while recording, a run says so in its
summary. Claims a run could not settle (the database away, the actions' pool failing, the worker
killed) stay unconfirmed: `close` gives back what it can, and the control plane gives back the
rest when the run has ended (`tenants.rules.runs.services.runs_reclaim`): those actions fire
again in a later `new-only` run, at most once more each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import psycopg

from spark.rules import ledger
from spark.rules.actions import Job, Outcome

log = logging.getLogger("spark.rules.firing")

ALL, NEW_ONLY, NONE = "all", "new-only", "none"
MODES = (ALL, NEW_ONLY, NONE)


def _position(job: Job) -> int | None:
    """The job's action's 0-based place among its rule's."""
    if job.action_index is not None:
        return job.action_index
    return job.key.action if job.key is not None else None


class Gate:
    def __init__(
        self,
        mode: str,
        connect: Callable[[], psycopg.Connection] | None = None,
        run_id: str | None = None,
        only_action: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"actions must be one of {', '.join(MODES)}, not {mode!r}")
        if mode == NEW_ONLY and connect is None:
            raise ValueError("new-only needs the database (the action ledger)")
        if only_action is not None and only_action < 1:
            raise ValueError(f"only_action counts from 1, not {only_action!r}")
        self.mode = mode
        self.only_action = only_action  # 1-based; None: every action
        self._connect = connect
        self.run_id = run_id  # the RuleRun its claims belong to (None: an operator's backfill)
        self._conn: psycopg.Connection | None = None
        self._unsettled: list[ledger.ActionKey] = []  # claimed, not confirmed nor released
        self.unrecorded = 0  # successes the ledger could not take

    @property
    def fires(self) -> bool:
        return self.mode != NONE

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            assert self._connect is not None
            self._conn = self._connect()
        return self._conn

    def admit(self, jobs: Sequence[Job]) -> tuple[list[Job], int]:
        """(the jobs to run, how many are skipped)."""
        other = 0
        if self.only_action is not None:
            chosen = [j for j in jobs if _position(j) == self.only_action - 1]
            other, jobs = len(jobs) - len(chosen), chosen
        if self.mode == NONE:
            return [], other + len(jobs)
        if self.mode == ALL:
            return list(jobs), other
        keyed = [j.key for j in jobs if j.key is not None]
        taken = ledger.claim(self._connection(), keyed, self.run_id) if keyed else set()
        self._unsettled.extend(taken)
        run = [j for j in jobs if j.key is None or j.key in taken]
        return run, other + len(jobs) - len(run)

    def settle(self, outcomes: Sequence[Outcome]) -> None:
        """After the jobs ran: successes recorded (`all`) or confirmed and failed claims released
        (`new-only`)."""
        try:
            if self.mode == ALL:
                done = [o.job.key for o in outcomes if o.ok and o.job.key is not None]
                if done and self._connect is not None:
                    ledger.record(self._connection(), done, ledger.RUN, self.run_id)
            elif self.mode == NEW_ONLY:
                done = [o.job.key for o in outcomes if o.ok and o.job.key is not None]
                failed = [o.job.key for o in outcomes if not o.ok and o.job.key is not None]
                conn = self._connection()
                ledger.confirm(conn, done, self.run_id)
                ledger.release(conn, failed, self.run_id)
                settled = set(done) | set(failed)
                self._unsettled = [k for k in self._unsettled if k not in settled]
        except psycopg.Error as exc:
            self._conn = None
            self.unrecorded += sum(1 for o in outcomes if o.job.key is not None)
            log.warning("action ledger not updated for %d actions: %s", len(outcomes), exc)

    def close(self) -> None:
        """Give back the claims never settled (the actions' pool failed under them: they may
        have fired, or not); a worker killed first leaves them to `runs_reclaim`."""
        if self._unsettled:
            try:
                ledger.release(self._connection(), self._unsettled, self.run_id)
                self._unsettled = []
            except psycopg.Error as exc:
                log.warning(
                    "action ledger: %d claims not given back: %s", len(self._unsettled), exc
                )
        if self._conn is not None:
            self._conn.close()
            self._conn = None
