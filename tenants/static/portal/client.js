// The portal's MQTT client in the browser: MQTT.js (vendor/mqtt-*.min.js) over the broker's
// WebSocket. As the tenant console it fetches a short-lived service token from the portal; as a
// device it uses the secret typed here, which goes to the broker only.
(function () {
  "use strict";
  const root = document.getElementById("mqtt-client");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  if (!window.mqtt) {
    $("client-state").textContent = "unavailable: the MQTT library did not load";
    return;
  }
  const csrf = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
  let client = null;
  // Each MQTT 5 reason code with its meaning and, for a limit, what the plan allows
  // (tenants.journey_display.code_meaning, rendered into the page by json_script).
  const meanings = JSON.parse(($("reason-codes") || {}).textContent || "{}");
  const codeText = (code) =>
    meanings[code] || "0x" + Number(code).toString(16).toUpperCase().padStart(2, "0");

  function setState(text, error) {
    $("client-state").textContent = text;
    $("client-error").textContent = error || "";
    const up = text === "connected";
    $("connect-button").disabled = up;
    $("disconnect-button").disabled = !client;
  }

  $("identity").addEventListener("change", () => {
    $("device-fields").hidden = !$("identity").value;
  });

  async function consoleIdentity() {
    const response = await fetch(root.dataset.tokenUrl, {
      method: "POST",
      headers: { "X-CSRFToken": csrf },
      credentials: "same-origin",
    });
    if (!response.ok) throw new Error("the portal refused a console token (" + response.status + ")");
    return response.json();
  }

  function userProperties(text) {
    const props = {};
    text.split("\n").forEach((line) => {
      const at = line.indexOf("=");
      if (at > 0) props[line.slice(0, at).trim()] = line.slice(at + 1).trim();
    });
    return props;
  }

  function log(topic, payload, packet) {
    const tr = document.createElement("tr");
    tr.className = "client-message";
    const props = (packet.properties && packet.properties.userProperties) || {};
    const cells = [
      window.portalTime.text(new Date(), true),
      topic,
      String(packet.qos) + (packet.retain ? " (retained)" : ""),
      new TextDecoder().decode(payload),
      Object.entries(props).map(([k, v]) => k + "=" + v).join(", "),
    ];
    cells.forEach((value) => {
      const td = document.createElement("td");
      td.textContent = value; // never innerHTML: payloads are untrusted
      tr.appendChild(td);
    });
    $("client-log").prepend(tr);
    while ($("client-log").children.length > 200) $("client-log").lastChild.remove();
  }

  $("connect-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    if (client) client.end(true);
    setState("connecting");
    let options;
    try {
      const device = $("identity").value;
      if (device) {
        options = {
          username: root.dataset.tenant + "/" + device,
          password: $("device-secret").value,
          clientId: $("client-id").value || device,
        };
      } else {
        const identity = await consoleIdentity();
        options = { username: identity.username, password: identity.password, clientId: identity.client_id };
      }
    } catch (error) {
      setState("disconnected", String(error.message || error));
      return;
    }
    client = window.mqtt.connect(root.dataset.wsUrl, {
      ...options,
      protocolVersion: 5,
      clean: true,
      reconnectPeriod: 0, // a refused secret should say so, not retry forever
      connectTimeout: 10000,
    });
    client.on("connect", () => setState("connected"));
    client.on("message", log);
    client.on("error", (error) => setState("disconnected", String(error.message || error)));
    client.on("disconnect", (packet) =>
      setState("disconnected", "the broker disconnected this client (" + codeText(packet.reasonCode) + ")"));
    client.on("close", () => {
      if ($("client-state").textContent !== "disconnected") setState("disconnected", $("client-error").textContent);
    });
  });

  $("disconnect-button").addEventListener("click", () => {
    if (client) client.end();
    client = null;
    setState("disconnected");
  });

  $("subscribe-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (!client) return;
    const filter = $("sub-filter").value;
    client.subscribe(filter, { qos: Number($("sub-qos").value) }, (error, granted) => {
      const li = document.createElement("li");
      const code = granted && granted[0] ? granted[0].qos : null;
      li.dataset.filter = filter;
      li.textContent = error
        ? filter + ": " + error.message
        : code >= 128
          ? filter + ": refused (" + codeText(code) + ")"
          : filter + " (QoS " + code + ")";
      li.className = error || code >= 128 ? "error" : "subscribed";
      $("subscriptions").appendChild(li);
    });
  });

  $("publish-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (!client) return;
    const props = userProperties($("pub-props").value);
    client.publish(
      $("pub-topic").value,
      $("pub-payload").value,
      {
        qos: Number($("pub-qos").value),
        retain: $("pub-retain").checked,
        properties: Object.keys(props).length ? { userProperties: props } : {},
      },
      (error) => {
        $("client-error").textContent = error ? "publish failed: " + error.message : "";
        $("publish-button").dataset.published = String(Number($("publish-button").dataset.published || 0) + (error ? 0 : 1));
      },
    );
  });

  // Ready: Connect is disabled in the markup until here, so a click before this script ran
  // cannot submit the form to the page itself (a reload that looked like a failed connect).
  setState("disconnected");
})();
