"""The import contracts of pyproject.toml ([tool.importlinter]): the planes independent of each
other, common/ of both, spark/ of both, the data plane and the broker's core in layers, no
cycles. `make test` runs `lint-imports` too; this keeps a bare `pytest` honest."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-logo", "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# The folders held to 450 lines a module, each with modules it must hold (the folder is where we
# think).
HELD = {
    "broker": ("connection.py", "broker.py"),
    "cluster": ("node.py", "limits.py"),
    "storage": ("parquet_archive.py", "archive_columns.py", "session_store.py"),
    "tenancy": ("directory.py", "authenticator.py"),
}


@pytest.mark.parametrize("folder", sorted(HELD))
def test_no_module_grows_past_450_lines(folder):
    """Issue 16's measure of a room a newcomer can read: a module that outgrows it wants a split
    (as the connection's jobs became handshake, admission, inbound, acks, flow, writer..., and
    the cluster's limits became connection_counts, leases, leased_buckets, sys_figures, and the
    archive's recording left the Parquet writer for archive_columns)."""
    sizes = {
        p.name: len(p.read_text().splitlines()) for p in (ROOT / "data_plane" / folder).glob("*.py")
    }
    assert {name: n for name, n in sizes.items() if n > 450} == {}
    assert set(HELD[folder]) <= set(sizes)


def test_tenants_models_stay_a_package_by_sub_domain():
    """Issue 48: tenants/models.py (1,566 lines, 51 classes) became a package, a module per
    sub-domain, each held to the same 450 lines; `tenants.models` still names every model of
    the app, as the project's imports of it expect."""
    from django.apps import apps

    import tenants.models

    folder = ROOT / "tenants" / "models"
    sizes = {p.name: len(p.read_text().splitlines()) for p in folder.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 450} == {}
    assert {"tenant.py", "devices.py", "rules.py", "sinks.py", "alarms.py"} <= set(sizes)
    assert not (ROOT / "tenants" / "models.py").exists()
    for model in apps.get_app_config("tenants").get_models():
        assert getattr(tenants.models, model.__name__) is model, model.__name__
        assert model.__name__ in tenants.models.__all__, model.__name__
