"""The deployment of Spark jobs on EMR Serverless (issue 42), statically: the platform's
processes get every setting the runner reads (`spark.cluster.emr_serverless`), each from an
output of the Terraform's `spark` module; the worker may start, read and cancel job runs; the
job role reads the code package and never writes it; the image the jobs' Python needs passes
hadolint; `docs/` and the Terraform's README say how the package is built and uploaded."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from spark.cluster.emr_serverless import EmrSettings
from spark.package import EXECUTOR_PACKAGES, executor_requirements
from tests.deploy.test_container import hadolint
from tests.deploy.test_terraform import TERRAFORM, blocks, load, typed_blocks, value

REPO = TERRAFORM.parents[1]
PLATFORM = TERRAFORM / "modules" / "platform"
SPARK = TERRAFORM / "modules" / "spark"
OPTIONAL = {"SPARK_SUBMIT_PARAMETERS"}  # extra spark-submit parameters: none by default


class Recording(dict):
    """An environment that records the names read from it."""

    def __init__(self) -> None:
        super().__init__()
        self.read: set[str] = set()

    def get(self, key, default=None):
        self.read.add(key)
        return "s3://code/v1/" if key == "SPARK_CODE_URI" else f"value-of-{key}"


def strings(v) -> list[str]:
    """A parsed HCL list of strings, each unquoted."""
    return [value(item) for item in (v[0] if v and isinstance(v[0], list) else v)]


def platform_environment() -> dict[str, str]:
    return {k: value(v) for k, v in load(PLATFORM / "main.tf")["locals"][0]["environment"].items()}


def test_every_setting_the_runner_reads_comes_from_the_spark_modules_outputs():
    env = Recording()
    EmrSettings.from_env(env)
    read = {name for name in env.read if name.startswith("SPARK_")} - OPTIONAL
    environment = platform_environment()
    missing = read - set(environment)
    assert not missing, f"the platform's environment lacks {sorted(missing)}"
    assert environment["SPARK_RUNNER"] == "var.spark_runner"
    outputs = blocks(load(SPARK / "outputs.tf"), "output")
    for name in read - {"SPARK_DATABASE_SECRET_ARN"}:
        used = re.findall(r"module\.spark\.(\w+)", environment[name])
        assert used, f"{name} = {environment[name]}: not from the spark module"
        assert set(used) <= set(outputs), f"{name}: {used} are not outputs of modules/spark"
    # The operator's upload needs the bucket and prefix: outputs of the environments too.
    for env_dir in ("dev", "prod"):
        names = set(blocks(load(TERRAFORM / "environments" / env_dir / "outputs.tf"), "output"))
        assert {"spark_application_id", "spark_job_role_arn", "spark_log_group_name"} <= names
        assert {"spark_code_bucket", "spark_code_prefix", "spark_code_uri"} <= names


def test_the_one_off_billing_task_keeps_running_spark_itself():
    """Its role may not submit to EMR: the worker's may."""
    main = load(PLATFORM / "main.tf")
    billing = blocks(main, "module")["billing_task"]
    assert "SPARK_RUNNER" in str(billing["environment"]) and "local" in str(billing["environment"])


def _statements(path: Path, document: str) -> list[dict]:
    for rtype, name, body in typed_blocks(load(path), "data"):
        if rtype == "aws_iam_policy_document" and name == document:
            return body["statement"]
    raise AssertionError(f"{path}: no policy document {document}")


def test_the_worker_may_start_get_and_cancel_job_runs_and_pass_the_job_role():
    statements = _statements(TERRAFORM / "modules" / "iam" / "main.tf", "worker_emr")
    actions = {a for s in statements for a in strings(s["actions"])}
    assert {
        "emr-serverless:StartJobRun",
        "emr-serverless:GetJobRun",
        "emr-serverless:CancelJobRun",
        "iam:PassRole",
    } <= actions


def test_the_job_role_reads_the_code_package_and_never_writes_it():
    statements = {value(s["sid"]): s for s in _statements(SPARK / "main.tf", "job")}
    read = json.dumps(statements["ReadArchiveUsageAndCode"]["resources"])
    assert "var.code_prefix" in read
    write = json.dumps(statements["WriteJobOutputs"]["resources"])
    assert "code_prefix" not in write
    variables = blocks(load(SPARK / "variables.tf"), "variable")
    code_prefix = value(variables["code_prefix"]["default"])
    write_prefixes = set(strings(variables["write_prefixes"]["default"]))
    assert code_prefix not in write_prefixes
    # The jobs' reports go under prefixes the role may write (spark.entry.reports).
    assert {"rules/", "billing/"} <= write_prefixes


def test_the_spark_image_passes_hadolint_and_installs_the_packages_requirements():
    dockerfile = REPO / "docker" / "Dockerfile.spark-emr"
    result = subprocess.run(
        [hadolint(), "--format", "json", "--failure-threshold", "warning", str(dockerfile)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    serious = [f for f in json.loads(result.stdout or "[]") if f["level"] in ("error", "warning")]
    assert not serious and result.returncode == 0, serious or result.stderr
    text = dockerfile.read_text()
    assert "dist/spark/requirements.txt" in text and "USER hadoop" in text
    ignore = (REPO / "docker" / "Dockerfile.spark-emr.dockerignore").read_text()
    assert "!dist/spark/requirements.txt" in ignore
    requirements = executor_requirements()
    for name in EXECUTOR_PACKAGES:
        assert re.search(rf"^{re.escape(name)}\b", requirements, re.M), name


def test_the_docs_say_how_to_build_upload_and_switch_the_runner():
    guide = (REPO / "docs" / "guides" / "spark-on-emr-serverless.md").read_text()
    readme = (SPARK / "README.md").read_text()
    for text in (guide, readme):
        assert "python -m spark.package upload" in text
        assert "SPARK_RUNNER" in text or "spark_runner" in text
        assert "Dockerfile.spark-emr" in text
    nav = (REPO / "mkdocs.yml").read_text()
    assert "guides/spark-on-emr-serverless.md" in nav


# Resources that could submit a job run on their own schedule or trigger.
SUBMITTERS = {
    "aws_scheduler_schedule",
    "aws_cloudwatch_event_target",
    "aws_pipes_pipe",
    "aws_sfn_state_machine",
}


def test_no_terraform_resource_submits_a_spark_job():
    """Only the platform submits jobs: a job needs what only its database knows (billing's
    accounts, a run's id and claims) and someone to read its result back (the invoices). The
    spark module's EventBridge schedule submitted `entry/billing.py` with no arguments: it could
    only fail at its argument parsing, and nothing would have stored its invoices."""
    found = []
    for path in sorted(TERRAFORM.rglob("*.tf")):
        for rtype, name, body in typed_blocks(load(path), "resource"):
            text = json.dumps(body).lower()
            if rtype in SUBMITTERS and ("emrserverless" in text or "startjobrun" in text):
                found.append(f"{path.relative_to(TERRAFORM)}: {rtype}.{name}")
    assert not found, found
    variables = blocks(load(SPARK / "variables.tf"), "variable")
    assert not {"billing_schedule_enabled", "billing_entry_point"} & set(variables)


class Submitted(Exception):
    pass


class Recorder:
    """A runner that records the submission and stops there (nothing to follow)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def submit(self, entry_point, arguments, **kwargs):
        self.calls.append((entry_point, list(arguments)))
        raise Submitted


def test_the_monthly_billing_is_submitted_by_the_platform_with_the_arguments_it_needs(tmp_path):
    """Celery beat's monthly draft goes through `billing_report` → `run_billing_job`, which with
    SPARK_RUNNER=emr-serverless submits through the runner (tests/spark/test_emr_serverless.py
    runs it to the invoices): the arguments it submits are what the entry point's parser
    requires, and the accounts they name are in the store."""
    import pytest
    from django.conf import settings

    from common.stores.object_store import LocalObjectStore
    from spark.billing.job import Account
    from spark.entry.billing import accounts_of, parse
    from tenants.billing.cluster import ENTRY_POINT, billing_on_cluster
    from tests.billing.test_job import SMALL

    beat = settings.CELERY_BEAT_SCHEDULE["billing-draft"]
    assert beat["task"] == "tenants.tasks.billing_draft_previous_month"
    store, runner = LocalObjectStore(tmp_path), Recorder()
    accounts = [Account("acme", SMALL)]
    with pytest.raises(Submitted):
        billing_on_cluster("2026-09", accounts, runner=runner, store=store)
    [(entry_point, arguments)] = runner.calls
    assert entry_point == ENTRY_POINT == "billing"
    args = parse(arguments)  # argparse exits on a missing required argument
    assert args.period == "2026-09" and args.report.startswith("billing/jobs/")
    assert accounts_of(json.loads(store.get(args.accounts))) == accounts
    assert args.object_store_url == store.url
