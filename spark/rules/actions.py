"""Rule actions, run on the driver: republish, webhook, dataset, and the sinks' outbox.

Each passed row of a rule yields its outputs; each output goes to each of the rule's actions.
They run concurrently in a bounded thread pool; every action returns an `Outcome` (never raises),
and a webhook that failed after its retries becomes a dead letter.

- republish: into the rule's own tenant, as the tenant-scoped service identity `{tenant}/$rules`
  (client id `$rules-{rule id}-…`, token signed with MQTT_SERVICE_KEY — `common.security.service_token`).
  The broker lets it publish only inside that tenant and never to `$` topics. `topic` and
  `payload` are `${field}` templates over the output (default payload: the output as JSON).
- webhook: POST of the output as JSON, `X-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`,
  retried with exponential back-off on network errors, 5xx and 429 (bounded attempts).
- dataset: the outputs appended as Parquet under the tenant's own prefix
  `datasets/tenant={slug}/{name}/date=YYYY-MM-DD/part-….parquet` (one file per batch and date).
- sinks (s3, sqs, kinesis, postgres, mqtt_bridge, http_batch; a run over history, issue 47's
  re-send): a call's sink outputs go to the runner's `outbox` (`outbox.py`) at once, their
  outcomes its; the live job's sender delivers them. Without an outbox a sink's output fails.
  (The live job's lanes hand sinks to the outbox themselves, `lanes.py`.)
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from common.contracts.rule_actions import DATASET_NAME, QOS_LEVELS, republish_topic_problem
from common.security import sealed, service_token
from common.sinks import SINK_TYPES
from common.stores.object_store import ObjectStore
from common.webhooks.delivery import post_signed
from spark.rules.ledger import ActionKey

BROKER_AWAY = (
    "republish: the platform's broker did not take the message (the operator has the details)"
)
log = logging.getLogger("spark.rules.actions")
_LOGGED: dict[str, float] = {}


def log_detail(detail: str) -> None:
    """An action failure's details for the operator, once a minute per distinct text."""
    now = time.monotonic()
    if now - _LOGGED.get(detail, -1e9) >= 60:
        if len(_LOGGED) > 1000:
            _LOGGED.clear()
        _LOGGED[detail] = now
        log.warning("rule action failed: %s", detail)


UNOPENED = "the secret is sealed under a key this process does not have (SEALING_KEY)"
# A sink's output waits in its durable outbox in the platform's database (`outbox.py`).
NO_OUTBOX = "a sink needs the platform's database (its outbox): this run has none"
OUTBOX_AWAY = (
    "the sink's outbox could not be written (the platform's database was away): run it again"
)


@dataclass(frozen=True)
class Job:
    """One output of one rule for one of its actions."""

    rule_id: int
    tenant: str
    client_prefix: str
    action: dict
    output: dict
    ts_ms: int  # the message's archive timestamp
    tries: int = 0  # attempts made before this one (the live job's retries)
    key: ActionKey | None = None  # in the action ledger (None: the message had no id)
    topic: str | None = None  # the message's, for its rows in the journey
    client_id: str | None = None  # its publisher's
    # Its publisher's device (`device_of_username`), the action metered to it; None: not known
    # (an output restored from the durable retry queue): metered to the tenant only.
    device: str | None = None
    # The rule's name when the job was made: its journey rows name the rule even when the action
    # finishes after the rule was disabled or renamed (None: restored from the retry queue).
    rule_name: str | None = None
    # The live job's micro-batch that made it (`spark.rules.feed.FeedProgress`: the feed's
    # position moves past a batch once each of its jobs is done or kept durably); None: not
    # tracked (backfills, the durable queue's).
    batch: int | None = None
    # Its action's place among the rule's (0-based): a sink's outbox is per rule action.
    action_index: int | None = None


@dataclass
class Outcome:
    job: Job
    ok: bool
    error: str = ""  # what the tenant reads (dead letters, last_error): no platform address
    attempts: int = 1
    done_ms: int = 0
    dead: bool = False  # keep as a dead letter
    detail: str = ""  # for the operator's log only (where the job looked, ...)


class Outbox(Protocol):
    """Where a run's sink outputs go: `spark.rules.outbox.SinkOutbox` (which imports this)."""

    def append(self, jobs: Sequence[Job]) -> list[Outcome]: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


def _to_json(output: Any) -> str:
    return json.dumps(output, separators=(",", ":"), default=str)


class Publishers:
    """One MQTT connection per rule as `{tenant}/$rules`, opened on first use, renewed before its
    token's expiry (the token is only checked at CONNECT)."""

    TTL = 6 * 3600

    def __init__(self, host: str, port: int, key: bytes) -> None:
        self.host, self.port, self.key = host, port, key
        self._clients: dict[int, tuple[Any, float]] = {}
        self._lock = threading.Lock()

    def client(self, job: Job) -> Any:
        with self._lock:
            entry = self._clients.get(job.rule_id)
            if entry is not None and entry[0].is_connected() and time.time() < entry[1]:
                return entry[0]
            if entry is not None:
                self._drop(entry[0])
            client = self._connect(job)
            self._clients[job.rule_id] = (client, time.time() + self.TTL / 2)
            return client

    def _connect(self, job: Job) -> Any:
        import paho.mqtt.client as mqtt

        client_id = job.client_prefix + secrets.token_hex(6)
        token = service_token.sign(self.key, job.tenant, client_id, ttl=self.TTL)
        client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5
        )
        client.username_pw_set(f"{job.tenant}/{service_token.RULES_DEVICE}", token)
        connected = threading.Event()
        refused: list[str] = []

        def on_connect(c, userdata, flags, reason_code, properties):
            if reason_code.is_failure:
                refused.append(str(reason_code))
            connected.set()

        client.on_connect = on_connect
        try:
            client.connect(self.host, self.port, keepalive=60)
        except OSError as exc:  # say where it looked: a backfill in another shell may not know
            raise ConnectionError(
                f"no broker at {self.host}:{self.port} (MQTT_INTERNAL_HOST, MQTT_INTERNAL_PORT):"
                f" {exc.strerror or exc}"
            ) from exc
        client.loop_start()
        if not connected.wait(10) or refused:
            self._drop(client)
            raise ConnectionError(f"broker refused the rules identity: {refused or 'timeout'}")
        return client

    def _drop(self, client: Any) -> None:
        try:
            client.disconnect()
            client.loop_stop()
        except Exception:
            pass

    def forget(self, rule_id: int) -> None:
        with self._lock:
            entry = self._clients.pop(rule_id, None)
        if entry is not None:
            self._drop(entry[0])

    def close(self) -> None:
        with self._lock:
            entries, self._clients = list(self._clients.values()), {}
        for client, _ in entries:
            self._drop(client)


class ActionRunner:
    def __init__(
        self,
        store: ObjectStore,
        *,
        mqtt_host: str | None = None,
        mqtt_port: int | None = None,
        service_key: bytes | None = None,
        max_workers: int = 16,
        attempts: int = 4,
        backoff: float = 0.25,
        timeout: float = 5.0,
        render: Callable[[str, dict], str] | None = None,
        outbox: Outbox | None = None,
    ) -> None:
        self.store = store
        self.outbox = outbox  # sinks' outputs go there (a run over history); None: they fail
        self.publishers = Publishers(
            mqtt_host or os.environ.get("MQTT_INTERNAL_HOST", "127.0.0.1"),
            int(
                mqtt_port
                or os.environ.get("MQTT_INTERNAL_PORT", os.environ.get("MQTT_PUBLIC_PORT", "1883"))
            ),  # as control_plane.settings resolves it
            service_key if service_key is not None else service_token.load_key(),
        )
        self.pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="rule-action")
        self.attempts, self.backoff, self.timeout = attempts, backoff, timeout
        self._render = render
        self._sequence = 0
        self._lock = threading.Lock()
        self._writer = f"{os.getpid():x}{secrets.token_hex(3)}"

    def render(self, template: str, output: dict) -> str:
        if self._render is None:
            from common.rules import render_template

            self._render = render_template
        return self._render(template, output)

    def run(self, jobs: Sequence[Job]) -> list[Outcome]:
        """Every job's outcome; datasets are grouped into one file per (tenant, name, date), and
        the sinks' outputs go to the outbox in one append."""
        datasets: dict[tuple[str, str, str], list[Job]] = defaultdict(list)
        sinks: list[Job] = []
        futures = []
        for job in jobs:
            kind = job.action.get("type")
            if kind in SINK_TYPES:
                sinks.append(job)
            elif kind == "dataset":
                date = datetime.fromtimestamp(job.ts_ms / 1000, UTC).strftime("%Y-%m-%d")
                datasets[(job.tenant, str(job.action.get("name", "")), date)].append(job)
            elif kind == "republish":
                futures.append(self.pool.submit(self._guard, self.republish, job))
            elif kind == "webhook":
                futures.append(self.pool.submit(self._guard, self.webhook, job))
            else:
                futures.append(self.pool.submit(lambda j=job: Outcome(j, False, "unknown action")))
        dataset_futures = [
            self.pool.submit(self._dataset_guard, key, group) for key, group in datasets.items()
        ]
        if sinks:
            dataset_futures.append(self.pool.submit(self.sinks, sinks))
        outcomes = [f.result() for f in futures]
        for f in dataset_futures:
            outcomes.extend(f.result())
        return outcomes

    # -- sinks ---------------------------------------------------------------------------------

    def sinks(self, jobs: Sequence[Job]) -> list[Outcome]:
        """Sink outputs into their outboxes in one transaction (`SinkOutbox.append`: ok, or a
        dead letter when an outbox is full); never raises."""
        if self.outbox is None:
            done = _now_ms()
            return [Outcome(j, False, NO_OUTBOX, done_ms=done) for j in jobs]
        try:
            outcomes = self.outbox.append(jobs)
        except Exception as exc:
            detail = f"sink outbox: {type(exc).__name__}: {exc}"[:500]
            log_detail(detail)
            done = _now_ms()
            return [Outcome(j, False, OUTBOX_AWAY, done_ms=done, detail=detail) for j in jobs]
        done = _now_ms()
        for outcome in outcomes:
            outcome.done_ms = outcome.done_ms or done
        return outcomes

    def _guard(self, fn: Callable[[Job], Outcome], job: Job) -> Outcome:
        try:
            outcome = fn(job)
        except Exception as exc:
            outcome = Outcome(job, False, f"{type(exc).__name__}: {exc}"[:500])
        outcome.done_ms = _now_ms()
        return outcome

    # -- republish -----------------------------------------------------------------------------

    def republish(self, job: Job) -> Outcome:
        action = job.action
        topic = self.render(str(action.get("topic", "")), job.output)
        if republish_topic_problem(topic) is not None:
            return Outcome(job, False, f"republish: invalid topic {topic!r}")
        template = action.get("payload")
        payload = (
            _to_json(job.output) if template in (None, "") else self.render(template, job.output)
        )
        qos = int(action.get("qos", 0) or 0)
        if qos not in QOS_LEVELS:
            return Outcome(job, False, f"republish: invalid qos {qos}")
        retain = bool(action.get("retain", False))
        last = ""
        for attempt in range(1, 3):  # one reconnect if the connection went away
            try:
                client = self.publishers.client(job)
                info = client.publish(topic, payload.encode(), qos=qos, retain=retain)
                if qos:
                    info.wait_for_publish(self.timeout)
                    if not info.is_published():
                        raise TimeoutError("no acknowledgement")
                elif info.rc != 0:
                    raise ConnectionError(f"publish rc {info.rc}")
                return Outcome(job, True, attempts=attempt)
            except Exception as exc:
                last = f"republish: {type(exc).__name__}: {exc}"
                self.publishers.forget(job.rule_id)
        # The tenant's dead letter says what failed; where the job looked is the operator's.
        log_detail(last)
        return Outcome(job, False, BROKER_AWAY, attempts=2, detail=last[:500])

    # -- webhook -------------------------------------------------------------------------------

    def webhook(self, job: Job) -> Outcome:
        if sealed.is_sealed(job.action.get("secret")):  # not opened (store.load_rules): no key
            return Outcome(job, False, f"webhook: {UNOPENED}", dead=True)
        result = post_signed(
            str(job.action.get("url", "")),
            str(job.action.get("secret", "")),
            job.output,
            rule_id=job.rule_id,
            attempts=self.attempts,
            backoff=self.backoff,
            timeout=self.timeout,
        )
        if result.ok:
            return Outcome(job, True, attempts=result.attempts)
        return Outcome(job, False, result.error, attempts=result.attempts, dead=True)

    # -- dataset -------------------------------------------------------------------------------

    def write_dataset(self, key: tuple[str, str, str], jobs: list[Job]) -> list[Outcome]:
        """One dataset file of `jobs` (tenant, name, date), an outcome per job (never raises)."""
        return self._dataset_guard(key, jobs)

    def _dataset_guard(self, key: tuple[str, str, str], jobs: list[Job]) -> list[Outcome]:
        try:
            self.dataset(key, jobs)
        except Exception as exc:
            error = f"dataset: {type(exc).__name__}: {exc}"[:500]
            return [Outcome(j, False, error, done_ms=_now_ms()) for j in jobs]
        done = _now_ms()
        return [Outcome(j, True, done_ms=done) for j in jobs]

    def dataset(self, key: tuple[str, str, str], jobs: list[Job]) -> str:
        tenant, name, date = key
        if not DATASET_NAME.match(name):
            raise ValueError(f"invalid dataset name {name!r}")
        table = dataset_table([j.output for j in jobs], [j.ts_ms for j in jobs])
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, compression="zstd")
        with self._lock:
            self._sequence += 1
            sequence = self._sequence
        object_key = (
            f"datasets/tenant={tenant}/{name}/date={date}/"
            f"part-{_now_ms()}-{self._writer}-{sequence:06d}.parquet"
        )
        self.store.put(object_key, buffer.getvalue().to_pybytes())
        return object_key

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.publishers.close()


def dataset_table(outputs: Sequence[dict], ts_ms: Sequence[int]) -> pa.Table:
    """Outputs as columns (union of their keys, in first-seen order) plus `_ts`, the message time.

    Scalars keep their type when a column is consistent; nested values and mixed columns are stored
    as JSON text, so any Parquet reader can read every file."""
    names: list[str] = []
    for output in outputs:
        for name in output:
            if name not in names and name != "_ts":
                names.append(name)
    arrays = {"_ts": pa.array(ts_ms, pa.timestamp("ms", tz="UTC"))}
    for name in names:
        values = [o.get(name) for o in outputs]
        arrays[name] = _column(values)
    return pa.table(arrays)


def _column(values: list) -> pa.Array:
    kinds = {type(v) for v in values if v is not None}
    if kinds and (kinds <= {int, float} or kinds == {bool} or kinds == {str}):
        try:
            return pa.array(values)
        except (pa.ArrowInvalid, OverflowError):
            pass
    return pa.array(
        [None if v is None else (v if isinstance(v, str) else _to_json(v)) for v in values],
        pa.string(),
    )
