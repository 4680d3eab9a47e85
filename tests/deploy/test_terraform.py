"""infra/terraform, statically (no Terraform registry or AWS here): every file parses with
python-hcl2, the modules follow the terraform-aws-modules layout, only the AWS provider's own
resources are used, and the task definitions run roles of the table of processes."""

from __future__ import annotations

import re
from pathlib import Path

import hcl2
import pytest

from common.runtime.processes import ROLES

TERRAFORM = Path(__file__).resolve().parents[2] / "infra" / "terraform"
MODULES = sorted(p for p in (TERRAFORM / "modules").iterdir() if p.is_dir())
ENVIRONMENTS = [TERRAFORM / "environments" / "dev", TERRAFORM / "environments" / "prod"]
REQUIRED_MODULES = {
    "network",
    "database",
    "cache",
    "storage",
    "broker",
    "web",
    "workers",
    "spark",
    "secrets",
    "iam",
    "observability",
}


def value(v):
    """A parsed HCL value without python-hcl2's quoting and interpolation wrappers."""
    while isinstance(v, list) and len(v) == 1:
        v = v[0]
    if isinstance(v, str):
        if len(v) >= 2 and v[0] == v[-1] == '"':
            v = v[1:-1]
        if v.startswith("${") and v.endswith("}"):
            v = v[2:-1]
    return v


def load(path: Path) -> dict:
    with open(path) as f:
        return hcl2.load(f)


def blocks(doc: dict, kind: str) -> dict[str, dict]:
    """`variable "x" {...}` blocks (or outputs, modules) by name."""
    found = {}
    for entry in doc.get(kind, []):
        for name, body in entry.items():
            if not name.startswith("__"):  # python-hcl2's __is_block__, __comments__
                found[value(name)] = body
    return found


def typed_blocks(doc: dict, kind: str) -> list[tuple[str, str, dict]]:
    """`resource "aws_x" "name" {...}` blocks as (type, name, body)."""
    found = []
    for entry in doc.get(kind, []):
        for rtype, named in entry.items():
            if rtype.startswith("__"):
                continue
            for name, body in named.items():
                if not name.startswith("__"):
                    found.append((value(rtype), value(name), body))
    return found


def every_tf() -> list[Path]:
    return sorted(TERRAFORM.rglob("*.tf"))


def test_every_tf_file_parses():
    files = every_tf()
    assert len(files) >= 4 * (len(REQUIRED_MODULES) + 1) + 2 * 4
    for path in files:
        load(path)  # raises with the file's parse error


def test_the_issue_modules_exist_with_the_standard_files():
    assert REQUIRED_MODULES <= {m.name for m in MODULES}
    for module in MODULES:
        present = {p.name for p in module.iterdir()}
        missing = {"main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"} - present
        assert not missing, f"{module.name} lacks {missing}"
        assert len((module / "README.md").read_text()) > 300, f"{module.name}: README too thin"


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.name)
def test_every_variable_typed_and_described_every_output_described(module):
    variables = blocks(load(module / "variables.tf"), "variable")
    assert variables, f"{module.name} declares no variables"
    for name, body in variables.items():
        assert "type" in body, f"{module.name}: variable {name} has no type"
        assert len(value(body.get("description", ""))) >= 10, f"{module.name}: {name} undescribed"
    outputs = blocks(load(module / "outputs.tf"), "output")
    assert outputs, f"{module.name} declares no outputs"
    for name, body in outputs.items():
        assert len(value(body.get("description", ""))) >= 10, f"{module.name}: output {name}"
    # Variables and outputs live in their own files only.
    main = load(module / "main.tf")
    assert not main.get("variable") and not main.get("output"), module.name


@pytest.mark.parametrize("root", MODULES + ENVIRONMENTS, ids=lambda m: m.name)
def test_terraform_and_the_aws_provider_are_pinned(root):
    terraform = load(root / "versions.tf")["terraform"][0]
    assert re.match(r">=\s*1\.\d", value(terraform["required_version"]))
    providers = {}
    for entry in terraform["required_providers"]:
        providers.update({k: v for k, v in entry.items() if not k.startswith("__")})
    assert set(providers) == {"aws"}, f"{root.name}: only the AWS provider"
    aws = value(providers["aws"])
    assert value(aws["source"]) == "hashicorp/aws"
    version = value(aws["version"])
    assert "~>" in version or "<" in version, f"{root.name}: {version} has no upper bound"


def test_only_the_aws_providers_own_resources_and_local_modules():
    for path in every_tf():
        doc = load(path)
        for rtype, name, _ in typed_blocks(doc, "resource") + typed_blocks(doc, "data"):
            assert rtype.startswith("aws_"), f"{path}: {rtype}.{name}"
        for name, body in blocks(doc, "module").items():
            source = value(body["source"])
            assert source.startswith("../"), f"{path}: module {name} from {source}"


def module_calls() -> list[tuple[Path, str, dict]]:
    calls = []
    for path in every_tf():
        for name, body in blocks(load(path), "module").items():
            calls.append((path, name, body))
    return calls


def test_task_definitions_pass_only_a_role_of_the_table():
    task = (TERRAFORM / "modules" / "task" / "main.tf").read_text()
    assert re.search(r"command\s*=\s*\[var\.role\]", task), "the container command is the role"
    role_var = blocks(load(TERRAFORM / "modules" / "task" / "variables.tf"), "variable")["role"]
    allowed = re.findall(r'"(\w+)"', (TERRAFORM / "modules" / "task" / "variables.tf").read_text())
    assert set(ROLES) <= set(allowed), "the task module's validation lists every role"
    assert "validation" in role_var

    roles_used = set()
    for path, name, body in module_calls():
        if value(body["source"]).rstrip("/").endswith("/task"):
            role = value(body["role"])
            if role == "each.key":  # workers: the keys of its services map
                text = path.read_text()
                services = re.search(r"services = \{(.*?)\n  \}", text, re.S).group(1)
                keys = re.findall(r"^\s+(\w+)\s+=\s+\{", services, re.M)
                assert keys and set(keys) <= set(ROLES), keys
                roles_used |= set(keys)
            else:
                assert role in ROLES, f"{path}: module {name} runs unknown role {role}"
                roles_used.add(role)
    assert {"web", "broker", "worker", "beat", "rules", "migrate", "billing"} <= roles_used


def test_per_role_log_groups_and_iam_roles_cover_the_table():
    for module in ("observability", "iam"):
        text = (TERRAFORM / "modules" / module / "main.tf").read_text()
        listed = re.search(r"roles\s*=\s*\[([^\]]*)\]", text).group(1)
        assert set(re.findall(r'"(\w+)"', listed)) == set(ROLES), module


def test_environments_call_the_platform_module_once_with_their_own_sizes():
    platform = blocks(load(TERRAFORM / "modules" / "platform" / "main.tf"), "module")
    assert REQUIRED_MODULES <= {value(b["source"]).rsplit("/", 1)[-1] for b in platform.values()}
    calls = []
    for environment in ENVIRONMENTS:
        modules = blocks(load(environment / "main.tf"), "module")
        assert list(modules) == ["platform"], f"{environment.name} composes nothing itself"
        assert value(modules["platform"]["source"]) == "../../modules/platform"
        calls.append(modules["platform"])
    dev, prod = calls
    variables = blocks(load(TERRAFORM / "modules" / "platform" / "variables.tf"), "variable")

    def size(call: dict, name: str):
        return value(call[name]) if name in call else value(variables[name]["default"])

    # Different sizes: the prod database, cache and broker floor are bigger than dev's.
    for name in ("db_instance_class", "cache_node_type", "broker_min_count"):
        assert size(dev, name) != size(prod, name), name
    assert size(prod, "deletion_protection") is True and size(dev, "deletion_protection") is False
    # Every argument is an input of the module.
    for call in calls:
        unknown = {k for k in call if not k.startswith("__")} - {"source"} - set(variables)
        assert not unknown, unknown


def test_prod_example_values_set_every_required_variable():
    example = TERRAFORM / "environments" / "prod" / "terraform.tfvars.example"
    values = {k: v for k, v in hcl2.loads(example.read_text()).items() if not k.startswith("__")}
    variables = blocks(load(ENVIRONMENTS[1] / "variables.tf"), "variable")
    required = {name for name, body in variables.items() if "default" not in body}
    assert required, "prod has variables without defaults (image, hosts, certificates)"
    assert required <= set(values), f"terraform.tfvars.example misses {required - set(values)}"
    assert set(values) <= set(variables), f"unknown: {set(values) - set(variables)}"


def resources(module: str) -> dict[str, dict]:
    doc = load(TERRAFORM / "modules" / module / "main.tf")
    return {f"{t}.{n}": body for t, n, body in typed_blocks(doc, "resource")}


def test_what_the_issue_asks_of_the_data_tier():
    db = resources("database")["aws_db_instance.this"]
    for key, expected in {
        "storage_encrypted": True,
        "iam_database_authentication_enabled": True,
        "publicly_accessible": False,
        "manage_master_user_password": True,
    }.items():
        assert value(db[key]) == expected, key
    for key in ("multi_az", "deletion_protection", "backup_retention_period", "kms_key_id"):
        assert key in db
    assert set(value(db["enabled_cloudwatch_logs_exports"])) >= {"postgresql"} or (
        "postgresql" in str(db["enabled_cloudwatch_logs_exports"])
    )
    params = str(resources("database")["aws_db_parameter_group.this"])
    assert "rds.force_ssl" in params

    redis = resources("cache")["aws_elasticache_replication_group.this"]
    for key in (
        "transit_encryption_enabled",
        "at_rest_encryption_enabled",
        "automatic_failover_enabled",
        "multi_az_enabled",
    ):
        assert value(redis[key]) is True, key
    assert "auth_token" in redis

    storage = resources("storage")
    assert "GLACIER" in str(storage["aws_s3_bucket_lifecycle_configuration.data"])
    assert "STANDARD_IA" in str(storage["aws_s3_bucket_lifecycle_configuration.data"])
    assert "aws:SecureTransport" in (TERRAFORM / "modules/storage/main.tf").read_text()


def test_what_the_issue_asks_of_the_load_balancers():
    broker = (TERRAFORM / "modules/broker/main.tf").read_text()
    assert re.search(r"mqtts\s*=\s*\{ port = 8883", broker)
    assert re.search(r"wss\s*=\s*\{ port = 443", broker)
    assert 'protocol          = "TLS"' in broker and "certificate_arn" in broker
    assert "enable_cross_zone_load_balancing = true" in broker
    assert "assign_public_ip = false" in broker
    assert "ActiveFlowCount_TLS" in broker and "ECSServiceAverageCPUUtilization" in broker
    web = resources("web")
    assert value(web["aws_lb_listener.http"]["default_action"][0]["type"]) == "redirect"
    assert (
        "TLS13" in str(web["aws_lb_listener.https"])
        or "TLS13" in (TERRAFORM / "modules/web/variables.tf").read_text()
    )
    assert "aws_wafv2_web_acl_association.this" in web


def test_a_kms_key_is_written_once_in_its_module():
    """One `aws_kms_key` (the kms_key module's); every module with a key of its own calls that
    module by local path and moves its old key there (`moved`), so no key is replaced."""
    keys = [
        (path.parent.name, name)
        for path in every_tf()
        for rtype, name, _ in typed_blocks(load(path), "resource")
        if rtype in ("aws_kms_key", "aws_kms_alias")
    ]
    assert sorted(keys) == [("kms_key", "this"), ("kms_key", "this")]
    for module in ("database", "cache", "storage", "secrets", "observability"):
        doc = load(TERRAFORM / "modules" / module / "main.tf")
        calls = blocks(doc, "module")
        assert value(calls["kms"]["source"]) == "../kms_key", module
        moved = {value(m["to"]) for m in doc.get("moved", [])}
        assert moved == {"module.kms.aws_kms_key.this", "module.kms.aws_kms_alias.this"}, module
