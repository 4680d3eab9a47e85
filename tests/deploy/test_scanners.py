"""checkov over infra/terraform and docker/: no failed check; every skip is written inline with
a reason, and is needed (the same scan without the skips fails exactly those checks).

checkov runs from its own virtualenv (`.venv-scan`, made by `make test`: `make install-scan`; see
pyproject's `scan` extra), once per session for each of the two scans."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKOV = REPO / ".venv-scan" / "bin" / "checkov"
SKIP = re.compile(r"#\s*checkov:skip=(\w+):(.*)")


def run_checkov(*directories: Path) -> tuple[list[dict], float]:
    assert CHECKOV.exists(), f"{CHECKOV} is missing: make install creates it"
    args = [str(CHECKOV), "--framework", "terraform", "dockerfile", "secrets"]
    for directory in directories:
        args += ["-d", str(directory)]
    args += ["--skip-download", "--output", "json"]  # not --quiet: it drops the skipped checks
    env = {k: v for k, v in os.environ.items() if k != "LOG_LEVEL"}  # checkov reads it too
    env["BC_SKIP_MAPPING"] = "TRUE"  # offline: no Bridgecrew mapping download
    started = time.monotonic()
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    elapsed = time.monotonic() - started
    # One JSON document per directory and framework, back to back.
    decoder, text, i, reports = json.JSONDecoder(), result.stdout, 0, []
    while i < len(text):
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            break
        document, i = decoder.raw_decode(text, i)
        reports.extend(document if isinstance(document, list) else [document])
    assert reports, f"checkov printed no report: {result.stderr[-2000:]}"
    return reports, elapsed


@pytest.fixture(scope="session")
def scan():
    reports, elapsed = run_checkov(REPO / "infra" / "terraform", REPO / "docker")
    print(f"checkov over infra/terraform and docker/: {elapsed:.1f} s")
    return reports


def results(reports: list[dict], kind: str) -> list[dict]:
    return [c for r in reports if "results" in r for c in r["results"].get(kind, [])]


def test_checkov_reports_no_failed_check(scan):
    failed = results(scan, "failed_checks")
    assert not failed, "\n".join(
        f"{c['check_id']} {c['resource']} {c['file_path']}:{c['file_line_range']}" for c in failed
    )
    types = {r["check_type"] for r in scan}
    assert {"terraform", "dockerfile"} <= types
    terraform = [r for r in scan if r["check_type"] == "terraform"]
    assert all(r["summary"]["parsing_errors"] == 0 for r in terraform)
    assert sum(r["summary"]["passed"] for r in terraform) > 300, "the scan saw the resources"
    dockerfile = [r for r in scan if r["check_type"] == "dockerfile"]
    assert sum(r["summary"]["passed"] for r in dockerfile) > 20


def test_every_skip_is_inline_with_a_reason(scan):
    skipped = results(scan, "skipped_checks")
    assert skipped, "the known, reasoned skips are reported as skipped"
    for check in skipped:
        reason = (check.get("check_result") or {}).get("suppress_comment", "")
        assert len(reason.strip()) >= 30, f"{check['check_id']} on {check['resource']}: {reason!r}"
    for path in (REPO / "infra").rglob("*.tf"):
        for line in path.read_text().splitlines():
            if "checkov:skip" in line:
                match = SKIP.search(line)
                assert match and len(match.group(2).strip()) >= 30, f"{path}: {line.strip()}"


def test_every_skip_is_needed(scan, tmp_path):
    """Without the skip comments, exactly the skipped checks fail: no skip is decoration."""
    copy = tmp_path / "terraform"
    shutil.copytree(REPO / "infra" / "terraform", copy)
    docker = tmp_path / "docker"
    shutil.copytree(REPO / "docker", docker)
    for path in [*copy.rglob("*.tf"), *docker.glob("Dockerfile*")]:
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if "checkov:skip" not in line))
    bare, _ = run_checkov(copy, docker)
    failed = {_key(c) for c in results(bare, "failed_checks")}
    skipped = {_key(c) for c in results(scan, "skipped_checks")}
    assert failed == skipped


def _key(check: dict) -> tuple[str, str]:
    """A check and what it is about; a Dockerfile's by the file alone (a failed check names the
    instruction, `/Dockerfile.x.FROM`; a skipped one the file, `/Dockerfile.x.`)."""
    resource = check["resource"]
    if "DOCKER" in check["check_id"]:
        resource = resource.rsplit(".", 1)[0]
    return check["check_id"], resource
