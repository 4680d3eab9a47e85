"""Copy-ready first-device snippets (mosquitto_pub, Python paho-mqtt, Node MQTT.js, Arduino/ESP32,
and AWS's device SDK for Python over TLS where the broker has a TLS listener), filled with the
tenant's broker address and the device's identity. Pure functions: values are
quoted for each language here, so a name or secret cannot break out of its string."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

PLACEHOLDER_SECRET = "YOUR_DEVICE_SECRET"


@dataclass(frozen=True)
class Snippet:
    key: str
    title: str
    language: str
    install: str
    code: str


def hello_topic(device: str) -> str:
    return f"hello/{device}"


# The files the AWS SDK snippet names: the device's certificate and key as AWS's console names
# them, and the CA that signed the broker's certificate (AWS's AmazonRootCA1.pem).
BROKER_CA_FILE = "broker-ca.pem"


def aws_sdk_files(device: str) -> tuple[str, str]:
    """The certificate and key files of `device` in the AWS SDK snippet."""
    return f"{device}.pem.crt", f"{device}.private.key"


def snippets(
    *,
    host: str,
    port: int,
    username: str,
    client_id: str,
    password: str,
    topic: str,
    tls_port: int | None = None,
) -> list[Snippet]:
    q, js = shlex.quote, json.dumps
    mosquitto = (
        f"mosquitto_pub -h {q(host)} -p {port} -V mqttv5 -q 1 -i {q(client_id)} \\\n"
        f"  -u {q(username)} -P {q(password)} \\\n"
        f"  -t {q(topic)} -m 'hello from mosquitto_pub'"
    )
    python = f"""import paho.mqtt.client as mqtt

client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id={js(client_id)},
                     protocol=mqtt.MQTTv5)
client.username_pw_set({js(username)}, {js(password)})
client.on_connect = lambda c, userdata, flags, reason, props: print("connected:", reason)
client.connect({js(host)}, {port})
client.loop_start()
message = client.publish({js(topic)}, "hello from paho-mqtt", qos=1)
message.wait_for_publish(timeout=10)
print("published:", message.is_published())
client.loop_stop()
client.disconnect()
"""
    node = f"""const mqtt = require("mqtt");

const client = mqtt.connect({js(f"mqtt://{host}:{port}")}, {{
  username: {js(username)},
  password: {js(password)},
  clientId: {js(client_id)},
  protocolVersion: 5,
}});
client.on("connect", () => {{
  client.publish({js(topic)}, "hello from MQTT.js", {{ qos: 1 }}, (error) => {{
    console.log(error ? "failed: " + error.message : "published");
    client.end();
  }});
}});
client.on("error", (error) => {{
  console.error("connection refused:", error.message);
  client.end();
}});
"""
    loopback = host in ("127.0.0.1", "localhost", "::1")
    arduino = f"""// ESP32 (Arduino core) with the PubSubClient library (Library Manager: "PubSubClient").
#include <WiFi.h>
#include <PubSubClient.h>

const char* WIFI_SSID = "your-wifi";
const char* WIFI_PASSWORD = "your-wifi-password";
const char* MQTT_HOST = {js(host)};{"  // the board cannot reach 127.0.0.1: use this machine's LAN address" if loopback else ""}
const int MQTT_PORT = {port};
const char* MQTT_USERNAME = {js(username)};
const char* MQTT_PASSWORD = {js(password)};
const char* CLIENT_ID = {js(client_id)};
const char* TOPIC = {js(topic)};

WiFiClient network;
PubSubClient mqtt(network);

void setup() {{
  Serial.begin(115200);
  WiFi.begin(WIFI_SSID, WIFI_PASSWORD);
  while (WiFi.status() != WL_CONNECTED) delay(500);
  mqtt.setServer(MQTT_HOST, MQTT_PORT);
}}

void loop() {{
  while (!mqtt.connected()) {{
    if (!mqtt.connect(CLIENT_ID, MQTT_USERNAME, MQTT_PASSWORD)) {{
      Serial.printf("MQTT connect failed (state %d), retrying\\n", mqtt.state());
      delay(2000);
    }}
  }}
  mqtt.loop();
  static unsigned long last = 0;
  if (millis() - last > 10000) {{
    last = millis();
    mqtt.publish(TOPIC, "hello from ESP32");
  }}
}}
"""
    made = [
        Snippet("mosquitto", "mosquitto_pub", "shell", "apt install mosquitto-clients", mosquitto),
        Snippet("python", "Python (paho-mqtt)", "python", 'pip install "paho-mqtt>=2"', python),
        Snippet("node", "Node.js (MQTT.js)", "javascript", "npm install mqtt", node),
        Snippet(
            "arduino", "Arduino / ESP32", "cpp", "Arduino IDE: ESP32 core + PubSubClient", arduino
        ),
    ]
    if tls_port:
        made.append(_aws_sdk(host, tls_port, username, client_id, topic))
    return made


def _aws_sdk(host: str, port: int, username: str, client_id: str, topic: str) -> Snippet:
    """AWS's device SDK for Python (awsiotsdk) with the device's certificate over TLS, as a
    device built for AWS IoT Core connects: only the endpoint, the port and the CA change."""
    js = json.dumps
    device = client_id
    cert, key = aws_sdk_files(device)
    code = f"""from awscrt import mqtt
from awsiot import mqtt_connection_builder

connection = mqtt_connection_builder.mtls_from_path(
    endpoint={js(host)},  # was xxxx-ats.iot.<region>.amazonaws.com
    port={port},  # the broker's TLS listener
    cert_filepath={js(cert)},  # the device's certificate (registered on its page)
    pri_key_filepath={js(key)},  # and its private key
    ca_filepath={js(BROKER_CA_FILE)},  # the CA that signed the broker's certificate
    client_id={js(client_id)},
    username={js(username)},  # names the device for a certificate registered on its page
    clean_session=True,
    keep_alive_secs=30,
)
connection.connect().result(timeout=10)
published, _ = connection.publish(
    topic={js(topic)}, payload="hello from awsiotsdk", qos=mqtt.QoS.AT_LEAST_ONCE
)
published.result(timeout=10)
print("published")
connection.disconnect().result(timeout=10)
"""
    return Snippet(
        "awsiotsdk", "AWS IoT Device SDK (Python)", "python", "pip install awsiotsdk", code
    )
