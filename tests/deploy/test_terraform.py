"""infra/terraform, statically (no Terraform registry or AWS here): every file parses with
python-hcl2, the modules follow the terraform-aws-modules layout, only the AWS provider's own
resources are used, the task definitions run roles of the table of processes, and EMR Serverless
runs the Spark that pyproject.toml pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import hcl2
import pyspark
import pytest

from common.runtime.processes import ROLES
from spark.versions import (
    EMR_SERVERLESS_BASE_IMAGE,
    EMR_SERVERLESS_SPARK,
    major_minor,
    spark_version,
)

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


def _pinned_pyspark() -> str:
    """pyproject.toml's pyspark requirement, e.g. `>=4.0.2,<4.1`."""
    pyproject = tomllib.loads((TERRAFORM.parents[1] / "pyproject.toml").read_text())
    for requirement in pyproject["project"]["dependencies"]:
        name, spec = re.match(r"([A-Za-z0-9_.\-]+)\s*(.*)", requirement).groups()
        if name.lower() == "pyspark":
            return spec.split(";")[0].strip()
    raise AssertionError("pyproject.toml does not pin pyspark")


def _release_labels() -> dict[str, str]:
    """Every EMR Serverless release label the Terraform can deploy: the spark module's default
    and whatever a caller (platform, environments, the prod example) passes instead."""
    variables = blocks(load(TERRAFORM / "modules" / "spark" / "variables.tf"), "variable")
    labels = {"modules/spark default": value(variables["release_label"]["default"])}
    for path, name, body in module_calls():
        if "release_label" in body:
            labels[f"{path.relative_to(TERRAFORM)}: module {name}"] = value(body["release_label"])
    return labels


def _custom_images() -> dict[str, str]:
    """The custom EMR Serverless images the Terraform sets (none by default). A caller that
    passes its own variable (`var.X`) is answered by that variable's validation: for each label
    the release's validation accepts, `:LABEL-tag` must pass it and another release's tag fail;
    the images named here are then those samples."""
    variables = blocks(load(TERRAFORM / "modules" / "spark" / "variables.tf"), "variable")
    images = {}
    if value(variables["image_uri"].get("default")) not in (None, "null"):
        images["modules/spark default"] = value(variables["image_uri"]["default"])
    for path, name, body in module_calls():
        if value(body["source"]).rstrip("/").endswith("/spark") and "image_uri" in body:
            where = f"{path.relative_to(TERRAFORM)}: module {name}"
            image = value(body["image_uri"])
            passed = re.fullmatch(r"var\.(\w+)", image)
            if passed is None:
                images[where] = image
                continue
            own = blocks(load(path.parent / "variables.tf"), "variable")[passed.group(1)]
            assert own.get("validation"), f"{where}: {image} has no validation of its release"
            condition = value(own["validation"][0]["condition"])
            pattern = re.search(r'regex\("(.*)", ' + re.escape(image) + r"\)", condition)
            assert pattern, f"{where}: {image}'s validation names no pattern of its tag"
            tag_pattern = pattern.group(1).replace("\\\\", "\\")
            for label in EMR_SERVERLESS_SPARK:
                sample = f"123.dkr.ecr.eu-west-1.amazonaws.com/spark:{label}-abc123"
                if re.search(tag_pattern, sample):
                    images[f"{where} ({label})"] = sample
            assert any(k.startswith(where) for k in images), (
                f"{where}: {image}'s validation accepts no release's image"
            )
    return images


def test_the_deployed_spark_is_the_spark_the_project_pins_and_tests():
    """One Spark version across the stack (issue 42): the EMR Serverless release the Terraform
    deploys runs the Spark major.minor that pyproject.toml pins and the tests run on."""
    pin = _pinned_pyspark()
    bounds = dict(re.findall(r"(>=|<|==|~=)\s*([0-9][0-9.]*)", pin))
    assert ">=" in bounds and "<" in bounds, f"pyspark {pin!r}: pin one minor (>=X.Y.Z,<X.Y+1)"
    pinned = major_minor(bounds[">="])
    labels = _release_labels()
    for where, label in labels.items():
        assert re.fullmatch(r"[A-Za-z0-9.\-]+", label), f"{where}: {label!r} is not a literal"
        deployed = spark_version(label)
        assert major_minor(deployed) == pinned, (
            f"{where}: {label} runs Spark {deployed}, but pyproject.toml pins pyspark {pin}: "
            "move the release label and the pin together (spark/versions.py)"
        )
    # The module's validation refuses, at plan time, a caller's release of another Spark.
    variables = blocks(load(TERRAFORM / "modules" / "spark" / "variables.tf"), "variable")
    condition = value(variables["release_label"]["validation"][0]["condition"])
    pattern = re.search(r'regex\("(.*)", var\.release_label\)', condition).group(1)
    pattern = pattern.replace("\\\\", "\\")  # HCL's escaped backslash
    accepted = [label for label in EMR_SERVERLESS_SPARK if re.search(pattern, label)]
    assert labels["modules/spark default"] in accepted, f"the default fails {pattern}"
    for label in accepted:
        assert major_minor(spark_version(label)) == pinned, f"{pattern} lets {label} through"
    assert major_minor(bounds["<"]) == (pinned[0], pinned[1] + 1), (
        f"pyspark {pin!r} admits more than Spark {pinned[0]}.{pinned[1]}, the deployed one"
    )
    assert major_minor(pyspark.__version__) == pinned, (
        f"the tests run on pyspark {pyspark.__version__}, pyproject.toml pins {pin}: "
        "reinstall the virtualenv"
    )
    # A custom image runs its release's Spark (it is built FROM the release's base image), so it
    # must name the same release: its tag starts with the label, e.g. `:emr-spark-8.0.0-<sha>`.
    default_label = labels["modules/spark default"]
    for where, image in _custom_images().items():
        tag = image.rsplit(":", 1)[-1]
        assert tag.startswith(default_label), (
            f"{where}: image {image} is not built on {default_label}"
        )
    # And an image the repository builds for EMR Serverless starts FROM that release's base.
    base = EMR_SERVERLESS_BASE_IMAGE.split("{")[0]
    for dockerfile in TERRAFORM.parents[1].glob("docker/**/Dockerfile*"):
        for line in dockerfile.read_text().splitlines():
            if line.upper().startswith("FROM") and base in line:
                assert EMR_SERVERLESS_BASE_IMAGE.format(label=default_label) in line, (
                    f"{dockerfile}: {line.strip()} is not {default_label}'s base image"
                )


def test_the_release_table_maps_labels_to_their_spark():
    assert major_minor(spark_version("emr-7.5.0")) == (3, 5)
    assert major_minor(spark_version("emr-spark-8.0.0")) == (4, 0)
    assert major_minor("4.0.2-amzn-0") == (4, 0)
    with pytest.raises(ValueError, match="unknown EMR Serverless release label 'emr-9.9.9'"):
        spark_version("emr-9.9.9")
