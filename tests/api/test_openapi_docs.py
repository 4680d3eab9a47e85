"""The OpenAPI document reads like documentation: every operation has a summary and a real
description of its own, and sits under one resource tag that the document describes."""

import pytest

pytestmark = pytest.mark.django_db

GENERIC = ("Resolves `self.tenant`", "viewers may only read")


def test_every_operation_is_described_and_grouped_by_resource(client):
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    declared = {tag["name"]: tag.get("description", "") for tag in document["tags"]}
    assert all(len(text) > 20 for text in declared.values()), declared
    operations, descriptions, used = 0, set(), set()
    for path, items in document["paths"].items():
        for method, operation in items.items():
            operations += 1
            where = f"{method.upper()} {path}"
            summary = operation.get("summary") or ""
            description = operation.get("description") or ""
            assert 8 <= len(summary) <= 80, where
            assert len(description) >= 30, f"{where}: no real description"
            assert not any(g in description for g in GENERIC), f"{where}: a generic docstring"
            assert description not in descriptions, f"{where}: the same words as another"
            descriptions.add(description)
            assert len(operation.get("tags", [])) == 1, where
            [tag] = operation["tags"]
            assert tag in declared, f"{where}: tag {tag!r} is not described"
            used.add(tag)
    assert operations >= 30
    assert used == set(declared)  # no empty group
    # A resource's operations share its tag.
    assert document["paths"]["/api/v1/devices/{name}/credentials"]["post"]["tags"] == [
        "Credentials"
    ]
    assert (
        "grace_seconds"
        in document["paths"]["/api/v1/devices/{name}/credentials"]["post"]["description"]
    )
