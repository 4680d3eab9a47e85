import pytest

from common.access.acl import AclEntry, AclPolicy, filter_covers, filters_intersect


def policy(entries, default_allow=False, device="sensor-1"):
    return AclPolicy(entries, tenant="acme", device=device, default_allow=default_allow)


def test_placeholders_expand_to_tenant_and_device():
    acl = policy([AclEntry("publish", True, "${tenant}/devices/${client}/#")])
    assert acl.can_publish("acme/devices/sensor-1/temp")
    assert not acl.can_publish("acme/devices/sensor-2/temp")


def test_first_matching_rule_wins_and_default_applies_otherwise():
    acl = policy(
        [AclEntry("both", False, "secret/#"), AclEntry("both", True, "#")], default_allow=False
    )
    assert not acl.can_publish("secret/x")
    assert acl.can_publish("public/x")
    assert policy([], default_allow=True).can_publish("anything")
    assert not policy([], default_allow=False).can_publish("anything")


def test_device_rules_apply_only_to_that_device():
    entries = [AclEntry("publish", False, "cmd/#", device="sensor-2")]
    assert policy(entries, default_allow=True, device="sensor-1").can_publish("cmd/x")
    assert not policy(entries, default_allow=True, device="sensor-2").can_publish("cmd/x")


def test_subscribe_has_mosquitto_read_semantics():
    """A subscription overlapping a deny is granted and the denied topics are withheld at
    delivery; one entirely inside a deny (or outside every allow, by default deny) is refused."""
    acl = policy([AclEntry("subscribe", True, "data/#")], default_allow=False)
    assert acl.can_subscribe("data/+/temp")
    assert acl.can_subscribe("#")  # overlaps the allow...
    assert acl.can_receive("data/x/temp") and not acl.can_receive("other/x")  # ...filtered
    assert not acl.can_subscribe("other/#")
    acl = policy([AclEntry("subscribe", False, "data/secret")], default_allow=True)
    assert acl.can_subscribe("data/#") and acl.can_subscribe("+/secret")
    assert not acl.can_subscribe("data/secret")
    assert acl.can_subscribe("data/public")
    assert not acl.can_receive("data/secret") and acl.can_receive("data/public")
    assert acl.filters_reads
    acl = policy([AclEntry("subscribe", False, "data/#"), AclEntry("subscribe", True, "#")])
    assert not acl.can_subscribe("data/x/#")  # the deny covers it before the allow applies
    assert not policy([AclEntry("publish", False, "x")], default_allow=True).filters_reads


def test_dollar_topics_not_matched_by_leading_wildcards():
    acl = policy([AclEntry("publish", True, "#")], default_allow=False)
    assert not acl.can_publish("$SYS/x")


@pytest.mark.parametrize(
    "outer, inner, covers",
    [
        ("a/#", "a/b/c", True),
        ("a/+", "a/#", False),
        ("#", "+/x", True),
        ("a/b", "a/+", False),
        ("a/+/c", "a/b/c", True),
        ("a/#", "a", True),
    ],
)
def test_filter_covers(outer, inner, covers):
    assert filter_covers(outer.split("/"), inner.split("/")) is covers


@pytest.mark.parametrize(
    "a, b, overlap",
    [("a/#", "+/b", True), ("a/b", "a/c", False), ("a/+", "a/b/c", False), ("#", "x", True)],
)
def test_filters_intersect(a, b, overlap):
    assert filters_intersect(a.split("/"), b.split("/")) is overlap


def test_shared_subscriptions_are_judged_on_the_filter_they_share():
    acl = policy([AclEntry("subscribe", False, "secret/#")], default_allow=True)
    assert not acl.can_subscribe("$share/g/secret/#")
    assert acl.can_subscribe("$share/g/#")
    allowed = policy([AclEntry("subscribe", True, "data/#")], default_allow=False)
    assert allowed.can_subscribe("$share/g/data/+")
