"""User names as AWS IoT's device SDKs send them: their `?SDK=…` metrics are no part of the
name (the end-to-end check is the SDK itself over mTLS: tests/shadows/test_aws_sdk.py)."""

from __future__ import annotations

import pytest

from common.mqtt.packets import Connect
from data_plane.tenancy.aws_user_name import as_sent_by_aws_sdk, without_metrics

SDK = "?SDK=Python&Version=1.31.0&Platform=Unix&Metadata=(CRTVersion=0.36.1)"


@pytest.mark.parametrize(
    ("sent", "read"),
    [
        (SDK, None),  # no name of its own: a certificate says who it is
        (f"acme/lamp{SDK}", "acme/lamp"),  # the application's name, then the SDK's metrics
        ("acme/lamp", "acme/lamp"),
        ("", ""),
        (None, None),
    ],
)
def test_the_sdks_metrics_are_no_part_of_the_user_name(sent, read):
    assert without_metrics(sent) == read
    connect = Connect("lamp", username=sent)
    assert as_sent_by_aws_sdk(connect).username == read
    assert connect.username == sent  # the packet itself is left as it came
