"""Which Spark each EMR Serverless release label runs, in one place.

The jobs are tested on the pyspark that pyproject.toml pins, and the Terraform's `spark` module
deploys them on the EMR Serverless release its `release_label` names: both must be the same Spark
major.minor, or a job that passes here fails at its first plan there (a function or data source
API the cluster's Spark lacks). tests/deploy/test_terraform.py checks the two against this table.

A custom image (`image_uri`) cannot change that Spark: EMR Serverless images are built `FROM` the
release's base image (public.ecr.aws/emr-serverless/spark/<label>) and run its Spark jars.

Moving to another release: add its row from AWS's release notes (EMR Serverless User Guide,
"Release versions"), then move the pyspark pin and the Terraform's default together.
Importing this module needs no pyspark (the deploy checks run without a JVM).
"""

from __future__ import annotations

# Release label → the Apache Spark version it ships (AWS's EMR Serverless release notes).
EMR_SERVERLESS_SPARK = {
    "emr-7.0.0": "3.5.0",
    "emr-7.1.0": "3.5.0",
    "emr-7.4.0": "3.5.2",
    "emr-7.5.0": "3.5.2",
    "emr-7.6.0": "3.5.3",
    "emr-7.7.0": "3.5.3",
    "emr-7.8.0": "3.5.4",
    "emr-7.9.0": "3.5.5",
    # "AWS runtime for Apache Spark": Spark 4.0.2-amzn-0, Scala 2.13, Python 3.11 to 3.13.
    "emr-spark-8.0.0": "4.0.2",
}

# The base image a custom EMR Serverless image of a release is built from.
EMR_SERVERLESS_BASE_IMAGE = "public.ecr.aws/emr-serverless/spark/{label}"


def spark_version(release_label: str) -> str:
    """The Spark version of an EMR Serverless release label."""
    try:
        return EMR_SERVERLESS_SPARK[release_label]
    except KeyError:
        known = ", ".join(sorted(EMR_SERVERLESS_SPARK))
        raise ValueError(
            f"unknown EMR Serverless release label {release_label!r}: add the Spark version AWS's "
            f"release notes give for it to spark/versions.py (known: {known})"
        ) from None


def major_minor(version: str) -> tuple[int, int]:
    """`4.0.2`, `4.0.2-amzn-0`, `4.1.0.dev1` → (4, 0); a bare `5` → (5, 0)."""
    major, minor = ([*version.split("."), "0"])[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)
