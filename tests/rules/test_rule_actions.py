"""The rule-action contract (`common.contracts.rule_actions`): one check for the control plane that stores a
rule's actions and the rule jobs that run them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from common.contracts.rule_actions import (
    RuleActionError,
    normalize_actions,
    republish_topic_problem,
)
from common.stores.object_store import LocalObjectStore
from spark.rules.actions import ActionRunner, Job


def test_the_contract_is_pure_python_without_django():
    code = "import sys, common.contracts.rule_actions; assert 'django' not in sys.modules, 'django loaded'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    "topic, problem",
    [
        ("alerts/dev-1", None),
        ("a//b", None),
        ("$SYS/x", "reserved for the broker"),
        ("a/+/b", "wildcards"),
        ("a/#", "wildcards"),
        ("", "empty"),
        ("a\x00b", "U+0000"),
        ("x" * 70_000, "longer than 65535 bytes"),
    ],
)
def test_a_republish_topic_is_a_publish_topic_outside_dollar(topic, problem):
    found = republish_topic_problem(topic)
    assert (found is None) if problem is None else (problem in found)


def test_the_save_time_check_asks_the_same_question_of_the_template():
    with pytest.raises(RuleActionError, match="wildcards"):
        normalize_actions([{"type": "republish", "topic": "out/${clientid}/+"}])
    assert normalize_actions([{"type": "republish", "topic": "out/${clientid}"}])


@pytest.fixture
def runner(tmp_path):
    # Port 9 (discard): a job that got as far as connecting would fail there, not on its topic.
    runner = ActionRunner(LocalObjectStore(tmp_path), mqtt_port=9, service_key=b"k" * 32)
    yield runner
    runner.close()


def job(action: dict, output: dict) -> Job:
    return Job(1, "acme", "$rules-1-", action, output, ts_ms=1_700_000_000_000)


@pytest.mark.parametrize("value", ["x" * 70_000, "$SYS/x", "a/+"])
def test_the_job_refuses_a_rendered_topic_the_contract_refuses(runner, value):
    """A value filled into the topic template is checked as the control plane checks templates,
    before any connection (a topic over 65535 bytes used to reach the broker)."""
    outcome = runner.republish(job({"type": "republish", "topic": "${t}"}, {"t": value}))
    assert not outcome.ok
    assert outcome.error.startswith("republish: invalid topic")


def test_the_job_writes_no_dataset_the_control_plane_would_not_store(runner):
    with pytest.raises(ValueError, match="invalid dataset name"):
        runner.dataset(("acme", "Hot", "2026-01-01"), [job({"type": "dataset"}, {"a": 1})])


def test_a_sink_output_needs_an_outbox_and_says_so_when_it_cannot_be_queued(tmp_path):
    """A run over history hands sink outputs to its outbox in one append; without an outbox (no
    database), or with the database away, each fails in words, and the other actions run."""
    sink = {"type": "http_batch", "url": "https://ingest.example.com/batches"}
    jobs = [job(sink, {"n": n}) for n in range(3)]

    class Away:
        def append(self, given):
            raise OSError("connection refused by 10.0.0.5:5432")

    bare = ActionRunner(LocalObjectStore(tmp_path), mqtt_port=9, service_key=b"k" * 32)
    away = ActionRunner(
        LocalObjectStore(tmp_path), mqtt_port=9, service_key=b"k" * 32, outbox=Away()
    )
    try:
        outcomes = bare.run([*jobs, job({"type": "nope"}, {})])
        assert [(o.ok, o.error) for o in outcomes if o.job in jobs] == [
            (False, "a sink needs the platform's database (its outbox): this run has none")
        ] * 3
        assert [o.error for o in outcomes if o.job not in jobs] == ["unknown action"]
        errors = {o.error for o in away.run(jobs)}
        assert len(errors) == 1 and "outbox could not be written" in errors.pop()
        assert all("10.0.0.5" not in o.error for o in away.run(jobs))  # the operator's detail
    finally:
        bare.close()
        away.close()
