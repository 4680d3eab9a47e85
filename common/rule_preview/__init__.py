"""A rule's preview over a tenant's archived history, without Spark (DuckDB over the Parquet
files, the rule's evaluator for what DuckDB cannot decide exactly): `preview(...)`."""

from common.rule_preview.preview import Preview, preview
from common.rule_preview.scan import PreviewTooLong

__all__ = ["Preview", "PreviewTooLong", "preview"]
