"""The code package a cluster runs: `python -m spark.package build|upload`.

`build [--out DIR]` writes, under DIR (default `dist/spark`):

- `platform.zip`: the packages a job imports, `spark/` and `common/` (spark/ imports nothing
  else of the project; import-linter checks it), their `.py` files and data files, no caches;
  byte for byte the same for the same sources (sorted entries, fixed times), so its digest names
  the version;
- `entry/*.py`: the entry points (`spark/entry/`), the scripts `spark-submit` runs;
- `requirements.txt`: what the executors' Python needs beyond the image's (installed in the
  custom image, `docker/spark-emr.Dockerfile`);
- `VERSION`: the first 12 hex digits of the package's SHA-256.

`upload [--bucket B] [--prefix P] [--out DIR]` builds, then puts those files under
`s3://B/P{VERSION}/` (boto3; `AWS_ENDPOINT_URL` honoured) and prints the folder as
`SPARK_CODE_URI=s3://B/P{VERSION}/`, what the platform's workers need (spark/cluster). B and P
default to `SPARK_CODE_BUCKET` and `SPARK_CODE_PREFIX` (`spark-code/`): the Terraform's
`spark_code_bucket` and `spark_code_prefix` outputs. A version already uploaded is uploaded again
(the same bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import re
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "spark")
DEFAULT_OUT = ROOT / "dist" / "spark"
DEFAULT_PREFIX = "spark-code/"
SKIP_DIRS = {"__pycache__", ".mypy_cache", ".pytest_cache"}
SKIP_SUFFIXES = {".pyc", ".pyo"}
# What a job imports on the executors, beyond the Spark image's own Python (pyproject.toml's
# pins of these names): the archive (pyarrow), Arrow UDFs (pandas), the rules' database
# (psycopg), the object store (boto3), the rule dialect (lark, regex), republish (paho-mqtt),
# sealed webhook secrets (cryptography).
EXECUTOR_PACKAGES = (
    "boto3",
    "cryptography",
    "lark",
    "paho-mqtt",
    "pandas",
    "psycopg",
    "pyarrow",
    "regex",
)
FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def package_files(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    """(name in the zip, file) of the packages, sorted."""
    found = []
    for package in PACKAGES:
        for path in (root / package).rglob("*"):
            relative = path.relative_to(root)
            if not path.is_file() or SKIP_DIRS & set(relative.parts):
                continue
            if path.suffix in SKIP_SUFFIXES:
                continue
            found.append((relative.as_posix(), path))
    yield from sorted(found)


def platform_zip(root: Path = ROOT) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in package_files(root):
            info = zipfile.ZipInfo(name, FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def executor_requirements(root: Path = ROOT) -> str:
    """requirements.txt of the executors: pyproject.toml's own pins of EXECUTOR_PACKAGES."""
    dependencies = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for requirement in dependencies:
        spec = requirement.split(";")[0].strip()
        name = re.match(r"[A-Za-z0-9_.-]+", spec)
        if name and name.group(0).lower() in EXECUTOR_PACKAGES:
            pins[name.group(0).lower()] = spec
    missing = sorted(set(EXECUTOR_PACKAGES) - set(pins))
    if missing:
        raise RuntimeError(f"pyproject.toml does not list {missing}")
    return "\n".join(pins[name] for name in sorted(pins)) + "\n"


def build(out: Path = DEFAULT_OUT, root: Path = ROOT) -> dict[str, Path | str]:
    """Write the package under `out`; {"version", and each file's path by its name}."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "entry").mkdir(exist_ok=True)
    files: dict[str, bytes] = {"platform.zip": platform_zip(root)}
    for script in sorted((root / "spark" / "entry").glob("*.py")):
        if script.name != "__init__.py" and script.name != "reports.py":
            files[f"entry/{script.name}"] = script.read_bytes()
    files["requirements.txt"] = executor_requirements(root).encode()
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    version = digest.hexdigest()[:12]
    files["VERSION"] = (version + "\n").encode()
    written: dict[str, Path | str] = {"version": version}
    for name, body in files.items():
        (out / name).write_bytes(body)
        written[name] = out / name
    return written


def upload(
    bucket: str, prefix: str = DEFAULT_PREFIX, out: Path = DEFAULT_OUT, root: Path = ROOT
) -> str:
    """Build and put the package under `s3://bucket/prefix{version}/`; that folder's URI."""
    import boto3

    built = build(out, root)
    version = str(built["version"])
    folder = f"{prefix.strip('/')}/{version}/" if prefix.strip("/") else f"{version}/"
    client = boto3.client("s3", endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None)
    for name, path in sorted(built.items()):
        if name == "version":
            continue
        client.upload_file(str(path), bucket, folder + name)
    return f"s3://{bucket}/{folder}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark.package", description="Build or upload the Spark jobs' package."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for command in ("build", "upload"):
        sub = commands.add_parser(command)
        sub.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to build it")
        if command == "upload":
            sub.add_argument("--bucket", default=os.environ.get("SPARK_CODE_BUCKET"))
            sub.add_argument(
                "--prefix", default=os.environ.get("SPARK_CODE_PREFIX") or DEFAULT_PREFIX
            )
    args = parser.parse_args(argv)
    if args.command == "build":
        built = build(args.out)
        for name, path in built.items():
            print(f"{name}: {path}")
        return 0
    if not args.bucket:
        parser.error("--bucket (or SPARK_CODE_BUCKET: the Terraform output spark_code_bucket)")
    uri = upload(args.bucket, args.prefix, args.out)
    print(f"SPARK_CODE_URI={uri}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
