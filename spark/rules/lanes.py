"""The live job's actions: asynchronous, and bounded per tenant, so no tenant's receiver can hold
up another tenant's actions or the micro-batches.

A batch hands its jobs over (`submit`, which never waits) and goes on; they run on one event
loop in a thread of their own, each tenant in its own lane:

- **webhooks**: at most `webhook_concurrency` calls of a tenant at once, each bounded (connect,
  first byte, total: `common.webhooks.delivery.Timeouts`). A receiver that never answers (a tarpit) holds
  only that tenant's calls, for the total at most; every other tenant's go on.
- **republish**: one connection per rule (`publisher.py`); when the broker slows the tenant down
  (it stops reading: its publish rate), that rule's sends wait, nothing else does.
- **datasets**: written off the loop, a few at a time.

A lane holds at most `max_queued` jobs and `max_queued_bytes` of outputs; beyond that, and for
an attempt worth repeating (a network error, 5xx or 429, a republish the broker did not take),
the job goes to the durable queue (`retry_store.py`, with its back-off: `backoff` × 2^n, up to
`attempts` attempts) and comes back when due and its lane has room. Without a durable queue
(tests), retries wait in memory. What cannot be kept becomes a dead letter.

Each job ends in one `Outcome` (ok, failed, dead letter), collected as it completes;
`completed()` hands them to the job's bookkeeping, which records them batch or no batch.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from common.contracts.rule_actions import QOS_LEVELS, republish_topic_problem
from common.security import sealed, service_token
from common.stores.object_store import ObjectStore
from common.webhooks.delivery import Timeouts, output_json, post_once
from spark.rules.actions import BROKER_AWAY, UNOPENED, ActionRunner, Job, Outcome, log_detail
from spark.rules.ledger import ActionKey
from spark.rules.outbox import SINKS, SinkOutbox
from spark.rules.publisher import PublishFailed, PublishRefused, RulePublisher
from spark.rules.retry_store import RetryStore, Waiting

log = logging.getLogger("spark.rules.lanes")
DEFAULT_TIMEOUTS = Timeouts()
FULL = "the tenant's action queue is full (its receivers are slower than its rules)"


@dataclass(frozen=True)
class LaneLimits:
    webhook_concurrency: int = 8  # calls of one tenant at once
    max_queued: int = 2000  # jobs waiting in one tenant's lane (then: the durable queue)
    max_queued_bytes: int = 8 << 20  # their outputs, as JSON
    attempts: int = 4  # per output, the first included
    backoff: float = 0.5  # seconds before the second attempt, doubling
    dataset_writers: int = 2  # datasets written at once (all tenants)
    poll_seconds: float = 0.5  # the durable queue, for what is due


class _Lane:
    def __init__(self, tenant: str) -> None:
        self.tenant = tenant
        self.webhooks: deque[Job] = deque()
        self.republish: dict[int, deque[Job]] = {}
        self.datasets: list[Job] = []
        self.sinks: list[Job] = []
        self.queued = 0
        self.bytes = 0
        self.sizes: dict[int, int] = {}  # id(job) -> its size, while queued
        self.webhook_workers = 0
        self.republish_workers: set[int] = set()
        self.dataset_worker = False
        self.sink_worker = False
        self.running = 0


class ActionLanes:
    def __init__(
        self,
        store: ObjectStore,
        *,
        mqtt_host: str | None = None,
        mqtt_port: int | None = None,
        service_key: bytes | None = None,
        limits: LaneLimits = LaneLimits(),
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retries: RetryStore | None = None,
        resolve: Callable[[int, dict], dict | None] | None = None,
        outbox: SinkOutbox | None = None,
    ) -> None:
        self.writer = ActionRunner(store, max_workers=1)  # datasets and templates only
        self.outbox = outbox  # sinks' outputs go there (`outbox.py`); None: no sink runs
        self.mqtt_host = mqtt_host or os.environ.get("MQTT_INTERNAL_HOST", "127.0.0.1")
        self.mqtt_port = int(
            mqtt_port
            or os.environ.get("MQTT_INTERNAL_PORT", os.environ.get("MQTT_PUBLIC_PORT", "1883"))
        )
        self.key = service_key if service_key is not None else service_token.load_key()
        self.limits, self.timeouts = limits, timeouts
        self.retries, self.resolve = retries, resolve
        # Told each live micro-batch job that leaves memory (its outcome, or the durable queue
        # has it): the live feed's position follows (`spark.rules.feed.FeedProgress`).
        self.on_settled: Callable[[int], None] | None = None
        self.lanes: dict[str, _Lane] = {}
        self.publishers: dict[int, RulePublisher] = {}
        self._done: list[Outcome] = []
        self._done_lock = threading.Lock()
        self._spill: list[Waiting] = []  # for the durable queue, written by the spiller
        self._delayed = 0  # in-memory retries waiting (no durable queue)
        self._closing = False
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name="rule-action-lanes", daemon=True)
        self.thread.start()
        self._dataset_slots: asyncio.Semaphore | None = None
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    @classmethod
    def like(cls, runner: ActionRunner, **kwargs: Any) -> ActionLanes:
        """Lanes with an ActionRunner's broker, key, attempts and back-off (tests build those)."""
        publishers = runner.publishers
        limits = LaneLimits(attempts=runner.attempts, backoff=runner.backoff)
        timeouts = Timeouts(min(3.0, runner.timeout), min(5.0, runner.timeout), runner.timeout)
        return cls(
            runner.store,
            mqtt_host=publishers.host,
            mqtt_port=publishers.port,
            service_key=publishers.key,
            limits=kwargs.pop("limits", limits),
            timeouts=kwargs.pop("timeouts", timeouts),
            **kwargs,
        )

    # -- the job's side (any thread) ----------------------------------------------------------

    def submit(self, jobs: Sequence[Job]) -> None:
        """Hand jobs to their tenants' lanes; returns at once."""
        if jobs:
            self.loop.call_soon_threadsafe(self._accept, list(jobs))

    def completed(self) -> list[Outcome]:
        """The outcomes since the last call."""
        with self._done_lock:
            done, self._done = self._done, []
        return done

    def busy(self) -> int:
        """Jobs queued, running or waiting for a retry in memory (not in the durable queue)."""
        return sum(self.backlog().values()) + self._delayed + len(self._spill)

    def backlog(self) -> dict[str, int]:
        """Jobs queued or running per tenant (read from another thread: a lane added meanwhile
        is simply seen next time)."""
        for _ in range(5):
            try:
                return {t: lane.queued + lane.running for t, lane in list(self.lanes.items())}
            except RuntimeError:  # the loop added a lane while we copied
                continue
        return {}

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if not self.loop.is_closed() and self.loop.is_running():
            # What was submitted before this call is in its lane first (callbacks run in order).
            asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop).result(timeout)
        while self.busy():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def close(self, grace: float = 10.0) -> None:
        """Finish what runs (up to `grace` seconds), keep what waits in the durable queue."""
        if self._closing:
            return
        self._closing = True
        self.wait_idle(grace)
        future = asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        try:
            future.result(grace + 10)
        except Exception:
            log.exception("action lanes did not stop cleanly")
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.writer.close()

    # -- the loop -----------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    async def _start(self) -> None:
        self._dataset_slots = asyncio.Semaphore(self.limits.dataset_writers)
        if self.retries is not None:
            self._tasks = [
                asyncio.create_task(self._poll_durable()),
                asyncio.create_task(self._spiller()),
            ]

    def _lane(self, tenant: str) -> _Lane:
        lane = self.lanes.get(tenant)
        if lane is None:
            lane = self.lanes[tenant] = _Lane(tenant)
        return lane

    def _accept(self, jobs: list[Job]) -> None:
        for job in jobs:
            lane = self._lane(job.tenant)
            size = len(output_json(job.output))
            full = (
                lane.queued >= self.limits.max_queued
                or lane.bytes + size > self.limits.max_queued_bytes
            )
            if full or self._closing:
                self._keep(job, "" if full else "the job stopped", delay=0.5 if full else 0.0)
                continue
            lane.queued += 1
            lane.bytes += size
            lane.sizes[id(job)] = size
            kind = job.action.get("type")
            if kind == "webhook":
                lane.webhooks.append(job)
                if lane.webhook_workers < self.limits.webhook_concurrency:
                    lane.webhook_workers += 1
                    asyncio.create_task(self._webhook_worker(lane))
            elif kind == "republish":
                lane.republish.setdefault(job.rule_id, deque()).append(job)
                if job.rule_id not in lane.republish_workers:
                    lane.republish_workers.add(job.rule_id)
                    asyncio.create_task(self._republish_worker(lane, job.rule_id))
            elif kind == "dataset":
                lane.datasets.append(job)
                if not lane.dataset_worker:
                    lane.dataset_worker = True
                    asyncio.create_task(self._dataset_worker(lane))
            elif kind in SINKS and self.outbox is not None:
                lane.sinks.append(job)
                if not lane.sink_worker:
                    lane.sink_worker = True
                    asyncio.create_task(self._sink_worker(lane))
            else:
                self._take(lane, job)
                self._finish(Outcome(job, False, "unknown action"))

    def _take(self, lane: _Lane, job: Job) -> None:
        lane.queued -= 1
        lane.bytes -= lane.sizes.pop(id(job), 0)

    def _finish(self, outcome: Outcome) -> None:
        outcome.done_ms = outcome.done_ms or int(time.time() * 1000)
        with self._done_lock:
            self._done.append(outcome)
        # After the outcome is in `_done`: whoever sees the batch settled finds its outcome.
        self._settled(outcome.job.batch)

    def _settled(self, batch: int | None) -> None:
        if batch is not None and self.on_settled is not None:
            self.on_settled(batch)

    def _again(self, job: Job, error: str, detail: str = "") -> None:
        """A failed attempt worth repeating: again after its back-off, or a dead letter once
        its attempts are spent."""
        tries = job.tries + 1
        if tries >= self.limits.attempts:
            self._finish(Outcome(job, False, error, attempts=tries, dead=True, detail=detail))
            return
        job = replace(job, tries=tries)
        self._keep(job, error, delay=self.limits.backoff * 2 ** (tries - 1))

    def _keep(self, job: Job, error: str, delay: float) -> None:
        """Into the durable queue (or, without one, back into the lane after `delay`)."""
        if self.retries is None:
            self._delayed += 1

            def back() -> None:
                self._delayed -= 1
                self._accept([job])

            if self._closing:
                self._delayed -= 1
                self._finish(Outcome(job, False, error or FULL, attempts=job.tries, dead=True))
                return
            self.loop.call_later(max(delay, 0.05), back)
            return
        action = sealed.without_secrets(job.action)
        body = output_json(job.output)
        self._spill.append(
            Waiting(
                job.rule_id,
                job.tenant,
                action,
                body,
                job.ts_ms,
                job.tries,
                error,
                delay,
                key=job.key.encode() if job.key is not None else "",
                topic=job.topic or "",
                client_id=job.client_id or "",
                batch=job.batch,
            )
        )

    # -- webhooks -----------------------------------------------------------------------------

    async def _webhook_worker(self, lane: _Lane) -> None:
        try:
            while lane.webhooks:
                job = lane.webhooks.popleft()
                self._take(lane, job)
                lane.running += 1
                try:
                    await self._webhook(job)
                finally:
                    lane.running -= 1
        finally:
            lane.webhook_workers -= 1

    async def _webhook(self, job: Job) -> None:
        secret = job.action.get("secret")
        if sealed.is_sealed(secret):
            self._finish(Outcome(job, False, f"webhook: {UNOPENED}", dead=True))
            return
        try:
            result = await post_once(
                str(job.action.get("url", "")),
                str(secret or ""),
                job.output,
                rule_id=job.rule_id,
                timeouts=self.timeouts,
            )
        except asyncio.CancelledError:  # the job stops: this one waits for the next
            self._keep(job, "", delay=0.0)
            raise
        if result.ok:
            self._finish(Outcome(job, True, attempts=job.tries + 1))
        elif result.retry:
            self._again(job, result.error)
        else:
            self._finish(Outcome(job, False, result.error, attempts=job.tries + 1, dead=True))

    # -- republish ----------------------------------------------------------------------------

    async def _republish_worker(self, lane: _Lane, rule_id: int) -> None:
        queue = lane.republish[rule_id]
        window = asyncio.Semaphore(32)
        running: set[asyncio.Task] = set()
        try:
            while queue:
                await window.acquire()
                if not queue:
                    window.release()
                    break
                job = queue.popleft()
                self._take(lane, job)
                lane.running += 1
                task = asyncio.create_task(self._republish(job))
                running.add(task)

                def done(task: asyncio.Task, job: Job = job) -> None:
                    running.discard(task)
                    window.release()
                    lane.running -= 1

                task.add_done_callback(done)
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        finally:
            lane.republish_workers.discard(rule_id)
            if queue and not self._closing:  # arrived while the last ones finished
                lane.republish_workers.add(rule_id)
                asyncio.create_task(self._republish_worker(lane, rule_id))

    async def _republish(self, job: Job) -> None:
        action = job.action
        topic = self.writer.render(str(action.get("topic", "")), job.output)
        if republish_topic_problem(topic) is not None:
            self._finish(Outcome(job, False, f"republish: invalid topic {topic!r}", dead=True))
            return
        template = action.get("payload")
        payload = (
            output_json(job.output)
            if template in (None, "")
            else self.writer.render(template, job.output)
        )
        qos = int(action.get("qos", 0) or 0)
        if qos not in QOS_LEVELS:
            self._finish(Outcome(job, False, f"republish: invalid qos {qos}", dead=True))
            return
        publisher = self.publishers.get(job.rule_id)
        if publisher is None:
            publisher = self.publishers[job.rule_id] = RulePublisher(
                self.mqtt_host, self.mqtt_port, self.key, job.tenant, job.client_prefix
            )
        try:
            await publisher.publish(topic, payload.encode(), qos, bool(action.get("retain")))
        except asyncio.CancelledError:  # the job stops: this one waits for the next
            self._keep(job, "", delay=0.0)
            raise
        except PublishRefused as exc:  # the broker's word on this message: no address in it
            if exc.final:
                self._finish(Outcome(job, False, f"republish: {exc}", job.tries + 1, dead=True))
            else:
                self._again(job, f"republish: {exc}")
            return
        except PublishFailed as exc:
            log_detail(f"republish: {exc}")
            self._again(job, BROKER_AWAY, detail=str(exc))
            return
        self._finish(Outcome(job, True, attempts=job.tries + 1))

    # -- datasets -----------------------------------------------------------------------------

    async def _dataset_worker(self, lane: _Lane) -> None:
        try:
            while lane.datasets:
                jobs, lane.datasets = lane.datasets, []
                for job in jobs:
                    self._take(lane, job)
                lane.running += len(jobs)
                try:
                    groups: dict[tuple[str, str, str], list[Job]] = {}
                    for job in jobs:
                        date = datetime.fromtimestamp(job.ts_ms / 1000, UTC).strftime("%Y-%m-%d")
                        key = (job.tenant, str(job.action.get("name", "")), date)
                        groups.setdefault(key, []).append(job)
                    for key, group in groups.items():
                        async with self._dataset_slots:
                            outcomes = await asyncio.to_thread(
                                self.writer.write_dataset, key, group
                            )
                        for outcome in outcomes:
                            outcome.dead = not outcome.ok
                            self._finish(outcome)
                finally:
                    lane.running -= len(jobs)
        finally:
            lane.dataset_worker = False

    # -- sinks --------------------------------------------------------------------------------

    async def _sink_worker(self, lane: _Lane) -> None:
        """The lane's sink outputs into their outboxes, what gathered meanwhile at once (the
        sink sender delivers them); the database away: each tried again as any action."""
        assert self.outbox is not None
        try:
            while lane.sinks:
                jobs, lane.sinks = lane.sinks, []
                for job in jobs:
                    self._take(lane, job)
                lane.running += len(jobs)
                try:
                    outcomes = await asyncio.to_thread(self.outbox.append, jobs)
                except Exception as exc:
                    log_detail(f"sink outbox: {type(exc).__name__}: {exc}")
                    for job in jobs:
                        self._again(job, "the platform's database is away for a moment")
                    continue
                finally:
                    lane.running -= len(jobs)
                for outcome in outcomes:
                    self._finish(outcome)
        finally:
            lane.sink_worker = False

    # -- the durable queue --------------------------------------------------------------------

    async def _spiller(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            await self._spill_now()

    async def _spill_now(self) -> None:
        if not self._spill or self.retries is None:
            return
        rows, self._spill = self._spill, []
        try:
            refused = await asyncio.to_thread(self.retries.save, rows)
        except Exception as exc:
            log.warning("durable action queue away, kept in memory: %s", exc)
            self._spill = rows + self._spill
            if len(self._spill) > 100_000:  # the database away for long: the oldest go
                for row in self._spill[: len(self._spill) - 100_000]:
                    self._dead(row, FULL)
                    self._settled(row.batch)
                del self._spill[: len(self._spill) - 100_000]
            return
        for row in refused:
            self._dead(row, FULL)
        for row in rows:  # kept for good (or a dead letter): out of memory either way
            self._settled(row.batch)

    def _dead(self, row: Waiting, error: str) -> None:
        job = self._job(row)
        if job is not None:
            self._finish(Outcome(job, False, row.last_error or error, row.attempts, dead=True))

    def _job(self, row: Waiting) -> Job | None:
        action = row.action
        if self.resolve is not None:
            resolved = self.resolve(row.rule_id, row.action)
            if resolved is None:
                return None  # the rule or this action is gone
            action = resolved
        try:
            output = json.loads(row.body)
        except ValueError:
            output = {"value": row.body}
        prefix = f"$rules-{row.rule_id}-"
        key = ActionKey.decode(row.rule_id, row.key)
        return Job(
            row.rule_id,
            row.tenant,
            prefix,
            action,
            output,
            row.ts_ms,
            row.attempts,
            key,
            topic=row.topic or None,
            client_id=row.client_id or None,
            action_index=key.action if key is not None else None,
        )

    async def _poll_durable(self) -> None:
        while True:
            await asyncio.sleep(self.limits.poll_seconds)
            if self._closing:
                continue
            half = self.limits.max_queued // 2
            busy = [t for t, lane in self.lanes.items() if lane.queued >= half]
            try:
                rows = await asyncio.to_thread(self.retries.take, 50, busy)
            except Exception as exc:
                log.warning("durable action queue not read: %s", exc)
                continue
            jobs = [job for job in map(self._job, rows) if job is not None]
            self._accept(jobs)

    async def _shutdown(self) -> None:
        for task in getattr(self, "_tasks", ()):
            task.cancel()
        # Publishes still waiting for the broker fail now and go to the durable queue (QoS 1/2:
        # sent again later, at least once), with what never started.
        for publisher in self.publishers.values():
            await publisher.close()
        await asyncio.sleep(0.05)
        # What still runs past the grace (a receiver that does not answer) is cut; its job waits
        # in the durable queue too.
        current = asyncio.current_task()
        running = [task for task in asyncio.all_tasks() if task is not current]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for lane in self.lanes.values():  # what never started waits in the durable queue
            waiting = list(lane.webhooks) + lane.datasets
            for queue in lane.republish.values():
                waiting += list(queue)
            lane.webhooks.clear()
            lane.datasets = []
            for queue in lane.republish.values():
                queue.clear()
            for job in waiting:
                self._take(lane, job)
                self._keep(job, "", delay=0.0)
        await self._spill_now()
