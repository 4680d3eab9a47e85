// MQTT.js (v5) over WebSocket: subscribe, publish with user properties, print what came back.
import mqtt from "mqtt";

const [url, username, password] = process.argv.slice(2);
const client = mqtt.connect(url, { username, password, protocolVersion: 5, clientId: "mqttjs-1" });
const timer = setTimeout(() => { console.log(JSON.stringify({ error: "timeout" })); process.exit(2); }, 10000);

client.on("error", (err) => { console.log(JSON.stringify({ error: String(err) })); process.exit(1); });
client.on("connect", () => {
  client.subscribe("js/#", { qos: 1 }, (err) => {
    if (err) throw err;
    client.publish("js/t", "from mqtt.js", { qos: 1, properties: { userProperties: { a: "1" } } });
  });
});
client.on("message", (topic, payload, packet) => {
  clearTimeout(timer);
  console.log(JSON.stringify({ topic, payload: payload.toString(), qos: packet.qos,
    userProperties: packet.properties?.userProperties ?? null }));
  client.end(false, {}, () => process.exit(0));
});
