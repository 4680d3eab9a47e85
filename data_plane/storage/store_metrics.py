"""Prometheus families for the broker's object-store writers (`ParquetArchiveWriter`,
`UsageLogWriter`), labelled by dataset (archive, usage)."""

from __future__ import annotations

from typing import Any


def writer_metrics(writers: list[Any]):
    """The writers' pending bytes, records written and dropped, and upload failures."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    pending = GaugeMetricFamily(
        "mqtt_store_pending_bytes",
        "Closed segments waiting for the object store",
        labels=["dataset"],
    )
    written = CounterMetricFamily(
        "mqtt_store_records_written", "Records uploaded to the object store", labels=["dataset"]
    )
    dropped = CounterMetricFamily(
        "mqtt_store_records_dropped",
        "Records dropped: object store away too long",
        labels=["dataset"],
    )
    failures = CounterMetricFamily(
        "mqtt_store_upload_failures", "Failed object store uploads", labels=["dataset"]
    )
    for writer in writers:
        pending.add_metric([writer.dataset], writer.pending_bytes)
        written.add_metric([writer.dataset], writer.written_records)
        dropped.add_metric([writer.dataset], writer.dropped_records)
        failures.add_metric([writer.dataset], writer.upload_failures)
    return [pending, written, dropped, failures]
