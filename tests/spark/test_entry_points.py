"""The entry points run on the master `spark-submit --master` gives them (issue 42): on a
cluster that is the cluster's. They read it before: pyspark's SparkConf() in Python is empty
until a SparkContext exists, so the master read was None and every submitted job built its
session on `local[*]`, in its driver alone (`spark.session.submitted_master`). Here billing's
entry point runs under spark-submit on `local-cluster[2,1,1024]` (executors in JVMs of their
own) and gives the invoices the suite's local session gives, byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from common.charges.pricing import canonical_json
from common.stores.object_store import LocalObjectStore
from spark.billing import job
from spark.billing.job import Account
from spark.entry import reports
from spark.entry.billing import accounts_json
from spark.session import executor_java_options
from tests.billing.test_job import AWS_IRELAND, SMALL
from tests.billing.usage_rows import row, write_rows
from tests.spark.cluster_checks import MASTER, spark_home

REPO = Path(__file__).resolve().parents[2]
SEPTEMBER = datetime(2026, 9, 1, tzinfo=UTC)


def spark_submit(master: str, entry: str, arguments: list[str], work: Path):
    env = dict(
        os.environ,
        SPARK_HOME=str(spark_home(work / "spark-home")),  # local-cluster's logs go there
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(REPO),
        SPARK_LOCAL_IP="127.0.0.1",
    )
    env.pop("SPARK_MASTER", None)  # only spark-submit's --master says where
    submit = Path(sys.executable).with_name("spark-submit")
    return subprocess.run(
        [str(submit), "--master", master, "--conf", "spark.ui.enabled=false"]
        + [str(REPO / "spark" / "entry" / entry), *arguments],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


@pytest.mark.timeout(480)
def test_billing_under_spark_submit_runs_on_its_master_and_gives_the_local_invoices(
    spark, tmp_path
):
    store = LocalObjectStore(tmp_path / "objects")
    rows = [
        row(tenant, SEPTEMBER + timedelta(days=d, minutes=m), messages=5 + d, connection_minutes=m)
        for tenant in ("acme", "fleet")
        for d in range(0, 30, 2)
        for m in (0, 90, 700)
    ]
    write_rows(store, rows[::2], writer="w1")
    write_rows(store, rows[1::2], writer="w2")
    accounts = [Account("acme", SMALL), Account("fleet", AWS_IRELAND)]
    folder = reports.report_folder("billing", reports.stamped("2026-09"))
    store.put(f"{folder}/accounts.json", accounts_json(accounts))
    local = job.run(spark, store, "2026-09", accounts)

    done = spark_submit(
        MASTER,
        "billing.py",
        ["--period", "2026-09", "--accounts", f"{folder}/accounts.json"]
        + ["--object-store-url", store.url, "--report", folder],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = reports.read(store, folder, reports.RESULT)
    assert result is not None and result["state"] == "done", result
    assert result["master"] == MASTER  # not local[*]: the job ran where it was submitted
    documents = [canonical_json(d) for d in result["result"]["invoices"]]
    assert documents == [canonical_json(d) for d in local.invoices]
    assert [d["tenant"] for d in local.invoices] == ["acme", "fleet"]


def test_the_executors_get_the_drivers_jit_flag_beside_what_they_were_given():
    """Executors in JVMs of their own (a cluster, local-cluster) run the native rules' generated
    code compiled only with the driver's flag; what the cluster gave them stays, and a
    collector is added only where none was chosen (two would stop the JVM)."""
    assert executor_java_options(None) == "-XX:-DontCompileHugeMethods -XX:+UseParallelGC"
    emr = "-XX:+UseG1GC -XX:OnOutOfMemoryError='kill -9 %p'"
    assert executor_java_options(emr) == f"{emr} -XX:-DontCompileHugeMethods"
    assert executor_java_options("-XX:+UseGCOverheadLimit").endswith("-XX:+UseParallelGC")
    done = "-XX:-DontCompileHugeMethods -XX:+UseZGC"
    assert executor_java_options(done) == done
