// MQTT.js (v5) with SCRAM-SHA-256 enhanced authentication: the CONNECT exchange, then a
// re-authentication (AUTH 0x19) on the live connection. Prints one JSON line of what happened.
//   node scram.mjs URL USERNAME PASSWORD [REAUTH_PASSWORD]
import crypto from "node:crypto";
import mqtt from "mqtt";

const [url, username, password, reauthPassword = password] = process.argv.slice(2);
const METHOD = "SCRAM-SHA-256";
const out = {};
const done = (code = 0) => { console.log(JSON.stringify(out)); process.exit(code); };
setTimeout(() => { out.error = "timeout"; done(2); }, 10000);

const hmac = (key, text) => crypto.createHmac("sha256", key).update(text).digest();
const sha256 = (data) => crypto.createHash("sha256").update(data).digest();

// The client side of RFC 5802, written out so the test does not share the broker's library.
function scram(user, secret) {
  const nonce = crypto.randomBytes(18).toString("base64");
  const bare = `n=${user.replaceAll("=", "=3D").replaceAll(",", "=2C")},r=${nonce}`;
  let expected;
  return {
    first: Buffer.from(`n,,${bare}`),
    final(serverFirst) {
      const text = serverFirst.toString();
      const attrs = Object.fromEntries(text.split(",").map((kv) => [kv[0], kv.slice(2)]));
      if (!attrs.r.startsWith(nonce)) throw new Error("server nonce does not extend ours");
      const salted = crypto.pbkdf2Sync(secret, Buffer.from(attrs.s, "base64"), Number(attrs.i), 32, "sha256");
      const clientKey = hmac(salted, "Client Key");
      const withoutProof = `c=biws,r=${attrs.r}`;
      const authMessage = `${bare},${text},${withoutProof}`;
      const signature = hmac(sha256(clientKey), authMessage);
      const proof = Buffer.from(clientKey.map((byte, i) => byte ^ signature[i]));
      expected = `v=${hmac(hmac(salted, "Server Key"), authMessage).toString("base64")}`;
      return Buffer.from(`${withoutProof},p=${proof.toString("base64")}`);
    },
    serverProved: (serverFinal) => serverFinal?.toString() === expected,
  };
}

let exchange = scram(username, password);
const client = mqtt.connect(url, {
  username, protocolVersion: 5, clientId: "scram-js", reconnectPeriod: 0,
  properties: { authenticationMethod: METHOD, authenticationData: exchange.first },
});
const auth = (reasonCode, data) => ({
  cmd: "auth", reasonCode, properties: { authenticationMethod: METHOD, authenticationData: data },
});

client.handleAuth = (packet, callback) => {
  const data = packet.properties?.authenticationData;
  if (packet.reasonCode === 0x18) {
    out.rounds = (out.rounds ?? 0) + 1;
    callback(null, auth(0x18, exchange.final(data)));
    return;
  }
  // AUTH 0x00: the re-authentication succeeded; traffic goes on.
  out.reauth = packet.reasonCode;
  out.reauthServerProved = exchange.serverProved(data);
  callback();
  client.publish("scram/t", "after re-authentication", { qos: 1 });
};
client.on("error", (err) => { out.error = err.code ?? String(err); done(0); });
client.on("disconnect", (packet) => { out.disconnect = packet.reasonCode; done(0); });
client.on("connect", (connack) => {
  out.connack = connack.reasonCode;
  out.method = connack.properties?.authenticationMethod;
  out.serverProved = exchange.serverProved(connack.properties?.authenticationData);
  client.subscribe("scram/#", { qos: 1 }, () => {
    exchange = scram(username, reauthPassword);
    client._sendPacket(auth(0x19, exchange.first));
  });
});
client.on("message", (topic, payload) => {
  out.message = `${topic} ${payload}`;
  client.end(false, {}, () => done(0));
});
