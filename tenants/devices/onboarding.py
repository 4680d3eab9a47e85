"""Copy-ready first-device snippets (mosquitto_pub, Python paho-mqtt, Node MQTT.js, Arduino/ESP32),
filled with the tenant's broker address and the device's identity. Pure functions: values are
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


def snippets(
    *, host: str, port: int, username: str, client_id: str, password: str, topic: str
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
    return [
        Snippet("mosquitto", "mosquitto_pub", "shell", "apt install mosquitto-clients", mosquitto),
        Snippet("python", "Python (paho-mqtt)", "python", 'pip install "paho-mqtt>=2"', python),
        Snippet("node", "Node.js (MQTT.js)", "javascript", "npm install mqtt", node),
        Snippet(
            "arduino", "Arduino / ESP32", "cpp", "Arduino IDE: ESP32 core + PubSubClient", arduino
        ),
    ]
