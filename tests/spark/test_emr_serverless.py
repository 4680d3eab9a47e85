"""Jobs on EMR Serverless (`SPARK_RUNNER=emr-serverless`, issue 42), against moto's EMR
Serverless and S3 over HTTP (moto's server, the `s3_endpoint` fixture: a real endpoint boto3
talks to), with the code package built and uploaded by `python -m spark.package`, and the entry
point itself run under `spark-submit` (local mode) from the uploaded package:

- the runner's StartJobRun carries the entry point, the arguments, the job role, the package
  (`--py-files`) and the log group; GetJobRun's states in the platform's words; CancelJobRun;
- a tenant's run over history, through the Celery task's body: submitted, polled, its figures
  from the job's own report; a cancel asked through the API reaches CancelJobRun; a job that
  fails on the cluster ends the run failed, in words.

moto runs no job: a job run it takes is SUCCESS at once. So the cluster here is moto's API plus
this test, which runs the submitted entry point with the submitted arguments under spark-submit;
until it has, the job run reads RUNNING (`Cluster`).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
import zipfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from django.db import connection

from spark import package
from spark.cluster import emr_serverless as emr
from spark.cluster.emr_serverless import EmrServerlessRunner, EmrSettings, JobState, job_state
from tests.spark.cluster_checks import MASTER, spark_home

ROLE = "arn:aws:iam::123456789012:role/mqtt-test-spark-job"
CODE_BUCKET = "mqtt-test-data"
LOG_GROUP = "/mqtt-test/emr-serverless"
SQL = 'SELECT payload.temp AS t, clientid FROM "sensors/+/temp" WHERE payload.temp > 30'


def _client(service: str, endpoint: str):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1")


@pytest.fixture(scope="module")
def uploaded(s3_endpoint, tmp_path_factory):
    """The package built and uploaded to moto's S3, as an operator does: its SPARK_CODE_URI."""
    s3 = _client("s3", s3_endpoint)
    s3.create_bucket(Bucket=CODE_BUCKET)
    out = tmp_path_factory.mktemp("package")
    return package.upload(CODE_BUCKET, "spark-code/", out)


@pytest.fixture
def cluster_env(s3_endpoint, uploaded, monkeypatch):
    """An EMR Serverless application on moto and the platform's settings for it."""
    # moto's label check (`emr-N.N.0`) predates the `emr-spark-8.0.0` labels the Terraform
    # deploys; the label plays no part in what the platform submits.
    app = _client("emr-serverless", s3_endpoint).create_application(
        name="mqtt-test-spark", releaseLabel="emr-7.9.0", type="SPARK"
    )
    env = {
        "SPARK_RUNNER": "emr-serverless",
        "SPARK_APPLICATION_ID": app["applicationId"],
        "SPARK_JOB_ROLE_ARN": ROLE,
        "SPARK_CODE_URI": uploaded,
        "SPARK_LOG_GROUP_NAME": LOG_GROUP,
        "SPARK_POLL_SECONDS": "0.2",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    read_once = emr.cluster_runner  # (a test may replace it: this is the cached one)
    read_once.cache_clear()
    yield env
    read_once.cache_clear()


def test_the_runner_setting_defaults_to_local_and_names_what_it_accepts():
    assert emr.spark_runner({}) == "local"
    assert emr.spark_runner({"SPARK_RUNNER": "EMR-Serverless"}) == "emr-serverless"
    with pytest.raises(emr.ClusterNotConfigured, match="local, emr-serverless"):
        emr.spark_runner({"SPARK_RUNNER": "yarn"})
    with pytest.raises(emr.ClusterNotConfigured, match="SPARK_JOB_ROLE_ARN, SPARK_CODE_URI"):
        EmrSettings.from_env({"SPARK_APPLICATION_ID": "app"})


def test_job_run_states_in_the_platforms_words():
    for emr_state in ("SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING"):
        assert job_state({"state": emr_state}).state == "running"
        assert not job_state({"state": emr_state}).ended
    assert job_state({"state": "SUCCESS"}).state == "done"
    assert job_state({"state": "CANCELLED"}).state == "cancelled"
    failed = job_state({"state": "FAILED", "stateDetails": "Job failed, ExitCode: 1 at 10.0.3.7"})
    assert failed.state == "failed" and failed.ended
    words = emr.failure_words(failed)
    assert "10.0.3.7" not in words and "Spark cluster" in words
    timeout = JobState("failed", "FAILED", "Job run timed out after 720 minutes")
    assert "longer than" in emr.failure_words(timeout)
    memory = JobState("failed", "FAILED", "java.lang.OutOfMemoryError: Java heap space")
    assert "memory" in emr.failure_words(memory)


def test_start_get_and_cancel_job_run_against_moto(cluster_env, s3_endpoint):
    runner = EmrServerlessRunner(EmrSettings.from_env())
    job = runner.submit("run_rules", ["--from-ms", "1", "--to-ms", "2"], name="t", client_token="x")
    got = _client("emr-serverless", s3_endpoint).get_job_run(
        applicationId=cluster_env["SPARK_APPLICATION_ID"], jobRunId=job
    )["jobRun"]
    assert got["executionRole"] == ROLE  # GetJobRun names it so
    submit = got["jobDriver"]["sparkSubmit"]
    assert submit["entryPoint"] == cluster_env["SPARK_CODE_URI"] + "entry/run_rules.py"
    assert submit["entryPointArguments"] == ["--from-ms", "1", "--to-ms", "2"]
    assert (
        f"--py-files {cluster_env['SPARK_CODE_URI']}platform.zip" in submit["sparkSubmitParameters"]
    )
    logging = got["configurationOverrides"]["monitoringConfiguration"]
    assert logging["cloudWatchLoggingConfiguration"]["logGroupName"] == LOG_GROUP
    assert runner.state(job).state == "done"  # moto: SUCCESS at once
    runner.cancel(job)
    assert runner.state(job) == JobState("cancelled", "CANCELLED", "")


def test_the_package_is_uploaded_whole_and_its_zip_imports(uploaded, s3_endpoint, tmp_path):
    bucket, _, folder = uploaded.removeprefix("s3://").partition("/")
    keys = {
        o["Key"]
        for o in _client("s3", s3_endpoint).list_objects_v2(Bucket=bucket, Prefix=folder)[
            "Contents"
        ]
    }
    names = {k.removeprefix(folder) for k in keys}
    assert {"platform.zip", "entry/run_rules.py", "requirements.txt", "VERSION"} <= names
    version = folder.rstrip("/").rpartition("/")[2]
    assert package.build(tmp_path / "again")["version"] == version  # the same bytes, same name
    with zipfile.ZipFile(tmp_path / "again" / "platform.zip") as archive:
        listed = archive.namelist()
    assert "spark/rules/backfill.py" in listed and "common/archive/schema.py" in listed
    assert not [n for n in listed if "__pycache__" in n or n.startswith(("tenants/", "tests/"))]
    # Importable from the zip alone, as the cluster's driver and executors import it.
    probe = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import spark.rules.backfill as b; "
            "print(b.__file__)",
            str(tmp_path / "again" / "platform.zip"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert "platform.zip" in probe.stdout


# --- a tenant's run over history on the cluster -------------------------------------------


class Cluster:
    """moto's EMR Serverless API (through the real runner) plus this test as the machine that
    runs the job: a job run reads RUNNING until `ran` is set (moto says SUCCESS at once);
    `fail_with`: then it reads FAILED with those details. With `work` (a folder), each job
    submitted is run there under spark-submit from the uploaded package, with the submitted
    entry point and arguments (`processes`), and `ran` is set when it exits."""

    def __init__(self, runner: EmrServerlessRunner, endpoint: str) -> None:
        self.runner = runner
        self.endpoint = endpoint
        self.ran = threading.Event()
        self.fail_with: str | None = None
        self.master = "local[1]"  # what spark-submit runs the job on
        self.work: Path | None = None
        self.submitted: list[str] = []
        self.cancelled: list[str] = []
        self.processes: list[subprocess.CompletedProcess] = []

    def submit(self, entry_point, arguments, **kwargs) -> str:
        job = self.runner.submit(entry_point, arguments, **kwargs)
        self.submitted.append(job)
        if self.work is not None:
            threading.Thread(target=self._run, args=(job,), daemon=True).start()
        return job

    def _run(self, job: str) -> None:
        try:
            entry, arguments = self.runner.arguments_of(job)
            code_uri = entry.rpartition("entry/")[0]
            name = entry.rpartition("/")[2]
            work = self.work / job
            self.processes.append(
                spark_submit(code_uri, name, arguments, work, self.endpoint, self.master)
            )
        finally:
            self.ran.set()

    def cancel(self, job: str) -> None:
        self.cancelled.append(job)
        self.runner.cancel(job)

    def state(self, job: str) -> JobState:
        state = self.runner.state(job)
        if state.emr_state == "SUCCESS" and not self.ran.is_set():
            return JobState("running", "RUNNING")
        if state.emr_state == "SUCCESS" and self.fail_with:
            return job_state({"state": "FAILED", "stateDetails": self.fail_with})
        return state

    def wait_submitted(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while not self.submitted:
            assert time.monotonic() < deadline, "nothing was submitted"
            time.sleep(0.1)
        return self.submitted[0]


@pytest.fixture
def cluster(cluster_env, monkeypatch, s3_endpoint):
    fake = Cluster(EmrServerlessRunner(EmrSettings.from_env()), s3_endpoint)
    monkeypatch.setattr(emr, "cluster_runner", lambda: fake)
    return fake


def spark_submit(
    code_uri: str,
    entry: str,
    arguments: list[str],
    work: Path,
    endpoint: str,
    master: str = "local[1]",
):
    """Run an uploaded entry point as the cluster would: the package fetched from S3, the
    script under `spark-submit` with the package as --py-files, on `master`."""
    bucket, _, folder = code_uri.removeprefix("s3://").partition("/")
    s3 = _client("s3", endpoint)
    work.mkdir(parents=True, exist_ok=True)
    (work / "entry").mkdir(exist_ok=True)
    for name in ("platform.zip", f"entry/{entry}"):
        s3.download_file(bucket, folder + name, str(work / name))
    submit = Path(sys.executable).with_name("spark-submit")
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.pop("PYTHONPATH", None)  # the package alone, not the checkout
    env.pop("SPARK_MASTER", None)  # only spark-submit's --master says where
    if master.startswith("local-cluster"):  # its worker's logs under $SPARK_HOME/work
        env["SPARK_HOME"] = str(spark_home(work / "spark-home"))
    return subprocess.run(
        [
            str(submit),
            "--master",
            master,
            "--conf",
            "spark.ui.enabled=false",
            "--py-files",
            str(work / "platform.zip"),
            str(work / "entry" / entry),
            *arguments,
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _tenant_with_history(tmp_path, monkeypatch):
    from common.stores.object_store import LocalObjectStore
    from tenants.accounts import services as account_services
    from tenants.rules import services as rule_services
    from tests.api.conftest import client_for
    from tests.spark.conftest import message, write_live

    acme, _, token = account_services.signup(
        tenant="acme", email="owner@acme.io", password="pass-w0rd-acme"
    )
    rule_services.rule_create(tenant=acme, name="hot", sql=SQL)
    objects = tmp_path / "objects"
    now = datetime.now(UTC)
    base = int((now - timedelta(hours=2)).timestamp() * 1000)
    rows = [message("acme", "sensors/k/temp", {"temp": i}, base + i) for i in range(40)]
    write_live(LocalObjectStore(objects), rows)
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{objects}")
    connection.close()
    return client_for(token), now


def _reports(tmp_path, kind: str) -> list[str]:
    """What is left of the jobs' report folders in the test's store."""
    from common.stores.object_store import LocalObjectStore

    return LocalObjectStore(tmp_path / "objects").list(f"{kind}/jobs/")


def _start_on_a_worker(api, now):
    """POST the run; the Celery task's body (`run_rule_history`) runs in a thread, as a worker."""
    from tenants.rules.runs import services as runs
    from tenants.tasks import run_rule_history

    threads: list[threading.Thread] = []

    def dispatch(run) -> None:
        def work() -> None:
            try:
                run_rule_history(str(run.id))
            finally:
                connection.close()

        threads.append(threading.Thread(target=work, daemon=True))
        threads[-1].start()

    runs.dispatch, saved = dispatch, runs.dispatch
    try:
        body = {"from": _iso(now - timedelta(hours=6)), "to": _iso(now), "mode": "run"}
        started = api.post("/api/v1/rules/hot/runs", body, format="json")
    finally:
        runs.dispatch = saved
    assert started.status_code == 202, started.content
    return started.json()["id"], threads


def _wait_run(api, run_id: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = api.get(f"/api/v1/rules/hot/runs/{run_id}").json()
        if run["state"] in ("done", "failed", "cancelled"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.2)


@pytest.mark.timeout(480)  # the cluster's run starts two executor JVMs: minutes on a busy box
@pytest.mark.django_db(transaction=True)
def test_a_tenants_run_is_submitted_polled_and_ends_done_with_the_jobs_figures(
    cluster, tmp_path, monkeypatch, s3_endpoint
):
    api, now = _tenant_with_history(tmp_path, monkeypatch)
    run_id, threads = _start_on_a_worker(api, now)
    job = cluster.wait_submitted()
    assert api.get(f"/api/v1/rules/hot/runs/{run_id}").json()["state"] == "running"
    entry, arguments = cluster.runner.arguments_of(job)
    assert entry.endswith("/entry/run_rules.py")
    assert arguments[arguments.index("--run-id") + 1] == run_id
    assert arguments[arguments.index("--tenant") + 1] == "acme"
    assert arguments[arguments.index("--rule") + 1] == "hot"
    conninfo = arguments[arguments.index("--database-url") + 1]
    assert "password" not in conninfo

    # now the cluster runs it: the entry point under spark-submit with executors in JVMs of
    # their own (issue 42: what local mode gives, on local-cluster)
    cluster.work, cluster.master = tmp_path / "cluster", MASTER
    cluster._run(job)
    assert cluster.processes[0].returncode == 0, cluster.processes[0].stderr[-4000:]
    run = _wait_run(api, run_id)
    for thread in threads:
        thread.join(30)
    assert run["state"] == "done", run
    assert (run["read"], run["matched"]) == (40, 9), run  # temps 31..39, as a local run
    assert cluster.cancelled == []
    assert _reports(tmp_path, "rules") == []  # read into the run, then removed


@pytest.mark.django_db(transaction=True)
def test_a_cancel_through_the_api_is_cancel_job_run(cluster, tmp_path, monkeypatch):
    api, now = _tenant_with_history(tmp_path, monkeypatch)
    run_id, threads = _start_on_a_worker(api, now)
    job = cluster.wait_submitted()
    answer = api.post(f"/api/v1/rules/hot/runs/{run_id}/cancel")
    assert answer.status_code in (200, 202), answer.content
    run = _wait_run(api, run_id)
    for thread in threads:
        thread.join(30)
    assert run["state"] == "cancelled", run
    assert cluster.cancelled == [job]
    assert cluster.runner.state(job).emr_state == "CANCELLED"  # moto's own record


@pytest.mark.django_db(transaction=True)
def test_a_job_that_fails_on_the_cluster_fails_the_run_in_words(cluster, tmp_path, monkeypatch):
    api, now = _tenant_with_history(tmp_path, monkeypatch)
    cluster.fail_with = "Job failed: java.lang.OutOfMemoryError on ip-10-0-3-7.ec2.internal"
    cluster.ran.set()  # it ran and failed, without writing a result
    run_id, threads = _start_on_a_worker(api, now)
    run = _wait_run(api, run_id)
    for thread in threads:
        thread.join(30)
    assert run["state"] == "failed", run
    assert "memory" in run["error"] and "10-0-3-7" not in run["error"], run
    # the rule is free again: another run is taken
    from tenants.models import RuleRun

    assert not RuleRun.objects.filter(state__in=RuleRun.ACTIVE).exists()


@pytest.mark.django_db(transaction=True)
def test_an_operators_backfill_runs_on_the_cluster_and_prints_its_summary(
    cluster, tmp_path, monkeypatch
):
    """`manage.py run_rules --tenant T --from --to` (no RuleRun): submitted, followed, the
    job's own summary printed as a local backfill prints it."""
    from django.core.management import call_command

    _, now = _tenant_with_history(tmp_path, monkeypatch)
    cluster.work = tmp_path / "cluster"
    out = io.StringIO()
    call_command(
        "run_rules",
        "--tenant",
        "acme",
        "--from",
        _iso(now - timedelta(hours=6)),
        "--to",
        _iso(now),
        "--actions",
        "none",
        "--no-progress",
        stdout=out,
    )
    assert cluster.processes and cluster.processes[0].returncode == 0, cluster.processes
    summary = json.loads(out.getvalue())
    assert (summary["rows_read"], summary["passed"]) == (40, 9), summary
    assert summary["job_run"] == cluster.submitted[0]
    assert _reports(tmp_path, "rules") == []
    _, arguments = cluster.runner.arguments_of(cluster.submitted[0])
    assert "--run-id" not in arguments and arguments[arguments.index("--actions") + 1] == "none"


@pytest.mark.django_db(transaction=True)
def test_billing_on_the_cluster_gives_the_invoices_a_local_run_gives(
    cluster, tmp_path, monkeypatch, spark
):
    """`billing_report` with SPARK_RUNNER=emr-serverless: the accounts go to the store, the
    entry point runs under spark-submit, its documents are stored as invoices; byte for byte
    the documents Spark in this process makes of the same log."""
    from django.core.management import call_command

    from common.charges.pricing import canonical_json
    from common.stores.object_store import LocalObjectStore
    from tenants.billing import services as billing
    from tenants.models import Invoice, Tenant
    from tenants.tenant import services as tenant_services
    from tests.billing.usage_rows import row, write_rows

    september = datetime(2026, 9, 1, tzinfo=UTC)
    tenant_services.tenant_create("acme")
    Tenant.objects.update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    store = LocalObjectStore(tmp_path / "objects")
    monkeypatch.setenv("OBJECT_STORE_URL", (tmp_path / "objects").as_uri())
    write_rows(
        store,
        [row("acme", september + timedelta(hours=h), messages=300_000) for h in range(10)],
    )
    monkeypatch.setenv("SPARK_RUNNER", "local")
    local, _ = billing.run_billing_job("2026-09", spark=spark)

    monkeypatch.setenv("SPARK_RUNNER", "emr-serverless")
    cluster.work = tmp_path / "cluster"
    out, err = io.StringIO(), io.StringIO()
    call_command("billing_report", "--period", "2026-09", stdout=out, stderr=err)
    assert cluster.processes and cluster.processes[0].returncode == 0, (
        cluster.processes[0].stderr[-4000:] if cluster.processes else "nothing ran"
    )
    summary = json.loads(out.getvalue())
    assert summary["tenants"] == 1 and summary["usage_rows"] == 10, summary
    assert "6/6 storing invoices" in err.getvalue()  # the job's steps reached the bar
    invoice = Invoice.objects.get(tenant__slug="acme", period="2026-09")
    assert [canonical_json(d).decode() for d in local.invoices] == [invoice.document]
    entry, _ = cluster.runner.arguments_of(cluster.submitted[0])
    assert entry.endswith("/entry/billing.py")
    assert _reports(tmp_path, "billing") == []  # the accounts (price books) not kept


@pytest.mark.django_db(transaction=True)
def test_the_job_run_of_a_run_whose_worker_was_lost_is_cancelled_by_the_cleanup(
    cluster, tmp_path, monkeypatch
):
    """The worker following the job hangs (no heartbeat, no poll): the stale-run cleanup fails
    the run, and cancels its job run, which the lost worker would never do."""
    from django.utils import timezone

    from tenants.models import RuleRun
    from tenants.rules.runs import services as runs

    api, now = _tenant_with_history(tmp_path, monkeypatch)
    hang = threading.Event()
    answer = cluster.state

    def hanging(job: str) -> JobState:
        hang.wait(60)
        return answer(job)

    cluster.state = hanging
    run_id, threads = _start_on_a_worker(api, now)
    job = cluster.wait_submitted()
    recorded = tmp_path / "objects" / "rules" / "jobs" / f"run-{run_id}" / "job-run.json"
    deadline = time.monotonic() + 30
    while not recorded.exists():
        assert time.monotonic() < deadline, "the worker recorded no job run"
        time.sleep(0.1)
    try:
        RuleRun.objects.filter(pk=run_id).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
        assert runs.runs_reclaim()["failed"] == 1
        assert cluster.cancelled == [job]
        assert cluster.runner.state(job).emr_state == "CANCELLED"  # moto's own record
        run = api.get(f"/api/v1/rules/hot/runs/{run_id}").json()
        assert run["state"] == "failed" and "worker" in run["error"], run
        assert _reports(tmp_path, "rules") == []  # swept: no one follows it any more
    finally:
        hang.set()
        for thread in threads:
            thread.join(30)
