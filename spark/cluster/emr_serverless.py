"""Jobs submitted to EMR Serverless: the platform's side of a run on the cluster.

`SPARK_RUNNER` picks where the platform's Spark jobs run (tenants' runs over history, the
operator's backfills, billing): `local` (the default: Spark in the worker or the command's own
process, as always) or `emr-serverless` (submitted with boto3 to the application the Terraform's
`spark` module creates). The settings are named after that Terraform's outputs and read once
(`EmrSettings.from_env`):

| variable | Terraform output | what |
|---|---|---|
| `SPARK_APPLICATION_ID` | `spark_application_id` | the EMR Serverless application |
| `SPARK_JOB_ROLE_ARN` | `spark_job_role_arn` | the job role passed with every run |
| `SPARK_CODE_URI` | under `spark_code_uri` | the uploaded code package's folder (`python -m spark.package upload` prints it) |
| `SPARK_LOG_GROUP_NAME` | `spark_log_group_name` | the CloudWatch log group of the runs |
| `SPARK_SUBMIT_PARAMETERS` | (optional) | extra `--conf …` of every run |
| `SPARK_DATABASE_SECRET_ARN` | (optional) | the secret whose `password` the job's driver connects with |

A submitted run is `StartJobRun` with the package's entry point (`{SPARK_CODE_URI}entry/NAME.py`),
the project's code as `--py-files {SPARK_CODE_URI}platform.zip`, the arguments, the job role and
the log group; `state` maps `GetJobRun` to the platform's words; `cancel` is `CancelJobRun`.
The entry point writes its progress and result to the object store (`spark/entry/`), which the
platform reads back: nothing comes back through EMR but the job run's state.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.stores.object_store import ObjectStore

log = logging.getLogger(__name__)

LOCAL = "local"
EMR_SERVERLESS = "emr-serverless"
RUNNERS = (LOCAL, EMR_SERVERLESS)

# GetJobRun's states, in the platform's words: a run is `running` until EMR says it ended.
RUNNING_STATES = frozenset({"SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING"})
STATE_WORDS = {"SUCCESS": "done", "FAILED": "failed", "CANCELLED": "cancelled"}


class ClusterNotConfigured(RuntimeError):
    """`SPARK_RUNNER=emr-serverless` without the settings a submission needs (named)."""


def spark_runner(environ: Mapping[str, str] | None = None) -> str:
    """`local` or `emr-serverless`, from `SPARK_RUNNER` (default `local`); another value is an
    error that names the accepted ones."""
    env = os.environ if environ is None else environ
    runner = (env.get("SPARK_RUNNER") or LOCAL).strip().lower()
    if runner not in RUNNERS:
        raise ClusterNotConfigured(
            f"SPARK_RUNNER={runner!r}: it must be one of {', '.join(RUNNERS)}"
        )
    return runner


@dataclass(frozen=True)
class EmrSettings:
    application_id: str
    job_role_arn: str
    code_uri: str  # s3://bucket/prefix/VERSION/ : platform.zip and entry/*.py
    log_group_name: str = ""
    submit_parameters: str = ""
    database_secret_arn: str = ""
    endpoint_url: str | None = None  # AWS_ENDPOINT_URL (tests: moto's server)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmrSettings:
        env = os.environ if environ is None else environ
        needed = {
            "SPARK_APPLICATION_ID": env.get("SPARK_APPLICATION_ID", ""),
            "SPARK_JOB_ROLE_ARN": env.get("SPARK_JOB_ROLE_ARN", ""),
            "SPARK_CODE_URI": env.get("SPARK_CODE_URI", ""),
        }
        missing = [name for name, value in needed.items() if not value]
        if missing:
            raise ClusterNotConfigured(
                f"SPARK_RUNNER=emr-serverless needs {', '.join(missing)} (the Terraform's "
                "spark outputs; SPARK_CODE_URI is the folder `python -m spark.package upload` "
                "printed)"
            )
        code_uri = needed["SPARK_CODE_URI"]
        if not code_uri.startswith("s3://"):
            raise ClusterNotConfigured(f"SPARK_CODE_URI must be an s3:// folder, not {code_uri!r}")
        return cls(
            application_id=needed["SPARK_APPLICATION_ID"],
            job_role_arn=needed["SPARK_JOB_ROLE_ARN"],
            code_uri=code_uri.rstrip("/") + "/",
            log_group_name=env.get("SPARK_LOG_GROUP_NAME", ""),
            submit_parameters=env.get("SPARK_SUBMIT_PARAMETERS", ""),
            database_secret_arn=env.get("SPARK_DATABASE_SECRET_ARN", ""),
            endpoint_url=env.get("AWS_ENDPOINT_URL") or None,
        )


@dataclass(frozen=True)
class JobState:
    """A job run as the platform reads it: `state` one of running / done / failed / cancelled,
    EMR's own state and its details (the operators' words), `ended` once it will not change."""

    state: str
    emr_state: str
    details: str = ""

    @property
    def ended(self) -> bool:
        return self.state != "running"


def job_state(job_run: Mapping[str, Any]) -> JobState:
    """`GetJobRun`'s `jobRun` → JobState. An unknown state counts as running (EMR may add some;
    the poll goes on until it ends)."""
    emr_state = str(job_run.get("state", ""))
    details = str(job_run.get("stateDetails") or "")
    return JobState(STATE_WORDS.get(emr_state, "running"), emr_state, details)


def failure_words(state: JobState) -> str:
    """What a tenant reads of a job run that ended without success: the kind of failure in words,
    no address, trace or log line of the platform's (those stay in the operators' logs)."""
    details = state.details.lower()
    if state.emr_state == "CANCELLED":
        return (
            "the platform's Spark cluster cancelled the run (not you): nothing more will run; "
            "run it again"
        )
    if "timeout" in details or "timed out" in details:
        return "the run took longer than the Spark cluster allows a run; split its range"
    if "capacity" in details or "quota" in details or "limit" in details:
        return (
            "the platform's Spark cluster had no room for the run (its capacity is in use); "
            "run it again later"
        )
    if "memory" in details or "oom" in details:
        return "the run ran out of memory on the Spark cluster; split its range into smaller ones"
    return (
        "the run failed on the platform's Spark cluster (the operators have its logs); run it again"
    )


class EmrServerlessRunner:
    """Submits the platform's Spark jobs to one EMR Serverless application; narrow on purpose:
    submit, state, cancel."""

    def __init__(self, settings: EmrSettings, client: Any = None) -> None:
        self.settings = settings
        if client is None:
            import boto3

            client = boto3.client("emr-serverless", endpoint_url=settings.endpoint_url)
        self.client = client  # boto3's client: untyped (boto3 has no type information)

    def entry_point_uri(self, entry_point: str) -> str:
        return f"{self.settings.code_uri}entry/{entry_point}.py"

    def submit_parameters(self) -> str:
        params = [f"--py-files {self.settings.code_uri}platform.zip"]
        if self.settings.submit_parameters:
            params.append(self.settings.submit_parameters)
        return " ".join(params)

    def submit(
        self,
        entry_point: str,
        arguments: Sequence[str],
        *,
        name: str | None = None,
        client_token: str | None = None,
    ) -> str:
        """`StartJobRun` of the package's `entry/{entry_point}.py` with `arguments`; the job
        run's id. `client_token` makes it idempotent (a task taken twice submits once)."""
        arguments = list(arguments)
        if self.settings.database_secret_arn:
            arguments += ["--database-secret-arn", self.settings.database_secret_arn]
        request: dict[str, Any] = {
            "applicationId": self.settings.application_id,
            "executionRoleArn": self.settings.job_role_arn,
            "name": (name or entry_point)[:256],
            "jobDriver": {
                "sparkSubmit": {
                    "entryPoint": self.entry_point_uri(entry_point),
                    "entryPointArguments": arguments,
                    "sparkSubmitParameters": self.submit_parameters(),
                }
            },
        }
        if client_token:
            request["clientToken"] = client_token[:64]
        if self.settings.log_group_name:
            request["configurationOverrides"] = {
                "monitoringConfiguration": {
                    "cloudWatchLoggingConfiguration": {
                        "enabled": True,
                        "logGroupName": self.settings.log_group_name,
                    }
                }
            }
        response = self.client.start_job_run(**request)
        return str(response["jobRunId"])

    def job_run(self, job_run_id: str) -> dict[str, Any]:
        """`GetJobRun`'s `jobRun` as EMR gives it."""
        response = self.client.get_job_run(
            applicationId=self.settings.application_id, jobRunId=job_run_id
        )
        job_run: dict[str, Any] = response["jobRun"]
        return job_run

    def state(self, job_run_id: str) -> JobState:
        return job_state(self.job_run(job_run_id))

    def cancel(self, job_run_id: str) -> None:
        """`CancelJobRun`. A run that ended meanwhile is left as it ended (EMR refuses to cancel
        it: ValidationException)."""
        from botocore.exceptions import ClientError

        try:
            self.client.cancel_job_run(
                applicationId=self.settings.application_id, jobRunId=job_run_id
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ValidationException":
                raise

    def arguments_of(self, job_run_id: str) -> tuple[str, list[str]]:
        """(entry point URI, arguments) of a submitted run, as EMR keeps them."""
        submit = self.job_run(job_run_id)["jobDriver"]["sparkSubmit"]
        return str(submit["entryPoint"]), [str(a) for a in submit.get("entryPointArguments", [])]


def poll_seconds() -> float:
    """`SPARK_POLL_SECONDS` (10): how often a job run's state is asked while it runs."""
    try:
        return float(os.environ.get("SPARK_POLL_SECONDS") or 10.0)
    except ValueError:
        return 10.0


def wait_for_job(
    runner: Any,  # EmrServerlessRunner, or what quacks like one (tests)
    job_run_id: str,
    store: ObjectStore,
    report: str,
    *,
    progress: Callable[[dict[str, Any]], None] | None = None,
    should_cancel: Callable[[], bool] = lambda: False,
    every: Callable[[], None] = lambda: None,
    poll: float | None = None,
) -> tuple[JobState, dict[str, Any] | None]:
    """Poll the job run until it ends: (its last JobState, the job's result.json or None).
    `progress` gets each new progress.json; `should_cancel` true once: CancelJobRun."""
    from spark.entry import reports

    poll = poll_seconds() if poll is None else poll
    cancelled = False
    seen: dict[str, Any] | None = None
    while True:
        every()
        if not cancelled and should_cancel():
            cancelled = True
            log.info("job run %s: cancel asked, CancelJobRun", job_run_id)
            runner.cancel(job_run_id)
        state = runner.state(job_run_id)
        figures = reports.read(store, report, reports.PROGRESS)
        if figures is not None and figures != seen and progress is not None:
            seen = figures
            progress(figures)
        if state.ended:
            if state.state != "done":
                log.warning("job run %s ended %s: %s", job_run_id, state.emr_state, state.details)
            return state, reports.read(store, report, reports.RESULT)
        time.sleep(poll)


def cancel_reported(runner: Any, store: ObjectStore, report: str) -> str | None:
    """Cancel the job run the platform recorded under `report` (`job-run.json`), if any; its
    id. For a job whose follower was lost: nothing else would stop it."""
    from spark.entry import reports

    recorded = reports.read(store, report, reports.JOB_RUN)
    if recorded is None:
        return None
    job_run_id = str(recorded["job_run_id"])
    runner.cancel(job_run_id)
    return job_run_id


@functools.cache
def cluster_runner() -> EmrServerlessRunner:
    """The process's runner, its settings read once from the environment (the first use)."""
    return EmrServerlessRunner(EmrSettings.from_env())
