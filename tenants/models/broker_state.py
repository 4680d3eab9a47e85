"""Broker state, written by the data plane, schema owned here: persistent sessions and the
messages queued for them, retained and delayed messages, and each node's forward-stream mark
(`data_plane.storage`, `data_plane.cluster`)."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from tenants.models.tenant import Tenant


class MqttSession(models.Model):
    """A persistent MQTT session (3.1.1 clean session 0, 5.0 session expiry > 0)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="mqtt_sessions")
    client_id = models.CharField(max_length=256)
    expiry_interval = models.BigIntegerField(default=0, help_text="seconds; 0xFFFFFFFF never")
    # Null while a client is connected; set when it disconnects (disconnected_at + expiry).
    expires_at = models.DateTimeField(null=True, blank=True)
    subscriptions = models.JSONField(default=list, blank=True)
    will = models.JSONField(null=True, blank=True)
    next_packet_id = models.IntegerField(default=1)
    # QoS 2 packet ids received from this client and not yet released (PUBREL): a resent PUBLISH
    # with one of them is not delivered again, even after a broker restart.
    inbound_qos2 = ArrayField(models.IntegerField(), default=list, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "client_id"], name="mqtt_session_unique")
        ]
        indexes = [models.Index(fields=["expires_at"], name="mqtt_session_expiry_idx")]


class MqttQueuedMessage(models.Model):
    """One message waiting for (or in flight to) a persistent session, in `seq` order."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    client_id = models.CharField(max_length=256)
    seq = models.BigIntegerField()
    topic = models.TextField()
    payload = models.BinaryField(null=True, blank=True)
    object_key = models.TextField(blank=True, help_text="set when the payload is in the store")
    qos = models.SmallIntegerField()
    retain = models.BooleanField(default=False)
    properties = models.JSONField(default=dict, blank=True)
    packet_id = models.IntegerField(null=True, blank=True)
    state = models.SmallIntegerField(default=0, help_text="0 queued, 1 sent, 2 pubrec received")
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "client_id", "seq"], name="mqtt_queue_unique_seq"
            )
        ]
        indexes = [
            # Orphan collection asks which payload objects rows still refer to.
            models.Index(
                fields=["object_key"],
                name="mqtt_queue_object_key",
                condition=~models.Q(object_key=""),
            )
        ]


class RetainedMessage(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    topic = models.TextField()
    payload = models.BinaryField(null=True, blank=True)
    object_key = models.TextField(blank=True)
    qos = models.SmallIntegerField(default=0)
    properties = models.JSONField(default=dict, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "topic"], name="retained_unique_topic")
        ]


class DelayedMessage(models.Model):
    """`$delayed/{seconds}/{topic}` publishes, delivered at `deliver_at` (survives restarts)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    topic = models.TextField()
    payload = models.BinaryField(null=True, blank=True)
    object_key = models.TextField(blank=True)
    qos = models.SmallIntegerField(default=0)
    retain = models.BooleanField(default=False)
    properties = models.JSONField(default=dict, blank=True)
    publisher = models.CharField(max_length=256, blank=True)
    deliver_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["deliver_at"], name="delayed_due_idx")]


class MqttStreamMark(models.Model):
    """The last entry of a broker node's forward stream (data_plane/cluster/forward.py) whose
    deliveries to persistent sessions are committed, written by the node in the same transaction
    as them: a survivor draining the stream of a node that died skips the entries it covers, so
    a message the dead node committed but had not acknowledged on the bus is not queued twice
    (data_plane/cluster/inherit.py). One row per node, deleted when the node leaves or is
    replaced."""

    node = models.CharField(max_length=200, primary_key=True)
    entry = models.CharField(max_length=48, help_text="a Redis stream entry id, ms-seq")
    updated_at = models.DateTimeField(default=timezone.now)
