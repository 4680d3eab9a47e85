"""Why a device's connection ended, in words a person understands.

The broker records a token per connection (`tenants_device.last_disconnect_reason`, the `reason`
of `$events/client_disconnected`): EMQX's words for the common cases (`normal`, `tcp_closed`,
`sock_error`, `server_closed`, `keepalive_timeout`, `takenover`, `kicked`, `not_authorized`,
`protocol_error`, `server_shutting_down`) and the MQTT 5 reason code as `0x96` for the others
(data_plane/broker/stats.py `DISCONNECT_REASONS`, data_plane/tenancy/presence.py). Every token
and every MQTT 5 reason code has words here; anything else is shown as recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.mqtt.reason_codes import ReasonCode as RC


@dataclass(frozen=True)
class DisconnectReason:
    recorded: str  # what the broker stored, shown in small print
    code: int | None  # the MQTT 5 reason code behind it, when there is one
    title: str
    detail: str

    @property
    def code_text(self) -> str:
        return f"0x{self.code:02X}" if self.code is not None else ""

    @property
    def about_limits(self) -> bool:
        """A plan's limit ended it: the quota page's Throttling section says more."""
        return self.code in LIMIT_CODES

    @property
    def sentence(self) -> str:
        return f"{self.title}: {self.detail}"


LIMIT_CODES = frozenset({RC.PACKET_TOO_LARGE, RC.MESSAGE_RATE_TOO_HIGH, RC.QUOTA_EXCEEDED})

# Reason code -> (title, what it means when a connection ends with it). The titles are the
# specification's names (MQTT 5.0, 2.4); the success codes of other packets are listed too so
# that no code the broker could record is left without words.
CODES: dict[int, tuple[str, str]] = {
    RC.NORMAL_DISCONNECTION: (
        "Normal disconnection",
        "the device sent DISCONNECT and closed the connection itself.",
    ),
    RC.GRANTED_QOS_1: (
        "Granted QoS 1",
        "a subscription acknowledgement code, not a reason to end.",
    ),
    RC.GRANTED_QOS_2: (
        "Granted QoS 2",
        "a subscription acknowledgement code, not a reason to end.",
    ),
    RC.DISCONNECT_WITH_WILL: (
        "Disconnect with will message",
        "the device disconnected on purpose and asked the broker to publish its will.",
    ),
    RC.NO_MATCHING_SUBSCRIBERS: (
        "No matching subscribers",
        "an acknowledgement code (a message nobody subscribed to), not a reason to end.",
    ),
    RC.NO_SUBSCRIPTION_EXISTED: (
        "No subscription existed",
        "an unsubscribe acknowledgement code, not a reason to end.",
    ),
    RC.CONTINUE_AUTHENTICATION: (
        "Continue authentication",
        "the connection ended in the middle of an authentication exchange.",
    ),
    RC.RE_AUTHENTICATE: (
        "Re-authenticate",
        "the connection ended while the device was re-authenticating.",
    ),
    RC.UNSPECIFIED_ERROR: (
        "Unspecified error",
        "the broker ended the connection after an error it could not name more precisely.",
    ),
    RC.MALFORMED_PACKET: (
        "Malformed packet",
        "the device sent bytes that are not a valid MQTT packet (a client bug, or not an "
        "MQTT client at all).",
    ),
    RC.PROTOCOL_ERROR: (
        "Protocol error",
        "the device sent a packet MQTT does not allow at that point (for example an AUTH "
        "without an authentication method, or an unknown topic alias).",
    ),
    RC.IMPLEMENTATION_SPECIFIC_ERROR: (
        "Implementation specific error",
        "the broker could not accept a packet that is valid MQTT.",
    ),
    RC.UNSUPPORTED_PROTOCOL_VERSION: (
        "Unsupported protocol version",
        "the device asked for an MQTT version the broker does not speak (use 3.1.1 or 5.0).",
    ),
    RC.CLIENT_IDENTIFIER_NOT_VALID: (
        "Client identifier not valid",
        "the client id is not one this device's credential allows.",
    ),
    RC.BAD_USER_NAME_OR_PASSWORD: (
        "Bad user name or password",
        "the user name (tenant/device) or the secret was wrong.",
    ),
    RC.NOT_AUTHORIZED: (
        "Not authorized",
        "the device's identity stopped being valid while it was connected (its certificate "
        "or JWT expired, or re-authentication failed).",
    ),
    RC.SERVER_UNAVAILABLE: (
        "Server unavailable",
        "the broker could not serve the device (for example cut off from the rest of the "
        "cluster); the device should reconnect.",
    ),
    RC.SERVER_BUSY: ("Server busy", "the broker was too busy; the device should retry later."),
    RC.BANNED: ("Banned", "the device is not allowed to connect."),
    RC.SERVER_SHUTTING_DOWN: (
        "Server shutting down",
        "the broker the device was connected to was stopping (a restart or a deploy); the "
        "device should reconnect.",
    ),
    RC.BAD_AUTHENTICATION_METHOD: (
        "Bad authentication method",
        "the device asked for an authentication method the broker does not offer.",
    ),
    RC.KEEP_ALIVE_TIMEOUT: (
        "Keep-alive timeout",
        "the broker heard nothing from the device for one and a half keep-alive intervals: "
        "it lost power or network, or stopped sending PINGREQ.",
    ),
    RC.SESSION_TAKEN_OVER: (
        "Session taken over",
        "another connection logged in with the same client id and the newer one won. Two "
        "devices sharing a client id keep pushing each other off.",
    ),
    RC.TOPIC_FILTER_INVALID: (
        "Topic filter invalid",
        "the device subscribed with a filter MQTT does not allow.",
    ),
    RC.TOPIC_NAME_INVALID: (
        "Topic name invalid",
        "the device published to a topic name MQTT does not allow.",
    ),
    RC.PACKET_IDENTIFIER_IN_USE: (
        "Packet identifier in use",
        "the device reused a packet identifier that was still in flight.",
    ),
    RC.PACKET_IDENTIFIER_NOT_FOUND: (
        "Packet identifier not found",
        "the device acknowledged a packet identifier the broker did not know.",
    ),
    RC.RECEIVE_MAXIMUM_EXCEEDED: (
        "Receive maximum exceeded",
        "the device sent more QoS 2 messages at once than the broker's Receive Maximum "
        "allows (it must wait for acknowledgements).",
    ),
    RC.TOPIC_ALIAS_INVALID: (
        "Topic alias invalid",
        "the device used a topic alias above the maximum the broker announced.",
    ),
    RC.PACKET_TOO_LARGE: (
        "Packet too large",
        "the device sent a message larger than the plan's message size limit (max_message_size).",
    ),
    RC.MESSAGE_RATE_TOO_HIGH: (
        "Message rate too high",
        "the device published faster than the plan allows for too long (max_publish_rate, "
        "max_device_publish_rate).",
    ),
    RC.QUOTA_EXCEEDED: (
        "Quota exceeded",
        "the device went over one of the plan's limits.",
    ),
    RC.ADMINISTRATIVE_ACTION: (
        "Administrative action",
        "the platform ended the connection: the device was disabled or deleted, the secret "
        "it used was retired, revoked or expired, a certificate or key that admitted it was "
        "revoked, or the tenant was suspended.",
    ),
    RC.PAYLOAD_FORMAT_INVALID: (
        "Payload format invalid",
        "the payload did not match the payload format the device announced (UTF-8).",
    ),
    RC.RETAIN_NOT_SUPPORTED: (
        "Retain not supported",
        "the device published a retained message where retain is not supported.",
    ),
    RC.QOS_NOT_SUPPORTED: (
        "QoS not supported",
        "the device used a QoS level the broker does not support.",
    ),
    RC.USE_ANOTHER_SERVER: (
        "Use another server",
        "the broker sent the device to another server for now.",
    ),
    RC.SERVER_MOVED: (
        "Server moved",
        "the broker sent the device to another server for good: update its address.",
    ),
    RC.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: (
        "Shared subscriptions not supported",
        "the device asked for a shared subscription where they are not supported.",
    ),
    RC.CONNECTION_RATE_EXCEEDED: (
        "Connection rate exceeded",
        "the device (or its address) connected too often in a short time.",
    ),
    RC.MAXIMUM_CONNECT_TIME: (
        "Maximum connect time",
        "the connection reached the longest time a connection may last.",
    ),
    RC.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: (
        "Subscription identifiers not supported",
        "the device used subscription identifiers where they are not supported.",
    ),
    RC.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: (
        "Wildcard subscriptions not supported",
        "the device subscribed with a wildcard where wildcards are not supported.",
    ),
}

# The broker's tokens -> the reason code they stand for (None: the connection ended without one).
TOKENS: dict[str, int | None] = {
    "normal": RC.NORMAL_DISCONNECTION,
    "keepalive_timeout": RC.KEEP_ALIVE_TIMEOUT,
    "takenover": RC.SESSION_TAKEN_OVER,
    "kicked": RC.ADMINISTRATIVE_ACTION,
    "not_authorized": RC.NOT_AUTHORIZED,
    "protocol_error": RC.PROTOCOL_ERROR,
    "server_shutting_down": RC.SERVER_SHUTTING_DOWN,
    "normal_with_will": RC.DISCONNECT_WITH_WILL,
    "tcp_closed": None,
    "sock_error": None,
    "server_closed": None,
    "unknown": None,
}

# Tokens with no reason code: the socket ended before anyone said why.
NO_CODE: dict[str, tuple[str, str]] = {
    "tcp_closed": (
        "Connection closed",
        "the device or the network closed the connection without sending DISCONNECT (a "
        "crash, a reboot, a network change, or a client that simply closes its socket).",
    ),
    "sock_error": (
        "Network error",
        "the connection broke (reset or socket error) before the device said goodbye.",
    ),
    "server_closed": (
        "Closed by the broker",
        "the broker closed the connection without sending a reason code (for example while "
        "the connection was still being set up).",
    ),
    "unknown": ("Not recorded", "the broker did not record why the connection ended."),
}


def describe(recorded: str) -> DisconnectReason | None:
    """Words for what the broker recorded; None when the device never disconnected."""
    if not recorded:
        return None
    if recorded in TOKENS:
        code = TOKENS[recorded]
        title, detail = CODES[code] if code is not None else NO_CODE[recorded]
        return DisconnectReason(recorded, code, title, detail)
    code = _hex_code(recorded)
    if code is not None and code in CODES:
        title, detail = CODES[code]
        return DisconnectReason(recorded, code, title, detail)
    if code is not None:
        return DisconnectReason(
            recorded, code, f"Reason code 0x{code:02X}", "not a reason code MQTT 5 defines."
        )
    return DisconnectReason(recorded, None, recorded, "as the broker recorded it.")


def _hex_code(text: str) -> int | None:
    if not text.lower().startswith("0x") or not 3 <= len(text) <= 4:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None
