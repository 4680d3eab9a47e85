// Live portal views: one WebSocket to /ws/live/ (see tenants/portal/live.py for the frames).
// Pages opt in by markup: [data-sys=name] counters, [data-presence=device] / [data-last-seen]
// cells, and the live message table (#watch-form, #live-messages).
(function () {
  "use strict";
  const MAX_ROWS = 200;
  const OVER_THE_BOUND = 4429; // closed: this member or tenant has as many live pages as it may
  const RETRY_MS = 3000;
  const RETRY_OVER_THE_BOUND_MS = 30000; // until another page closes
  const status = document.getElementById("live-status");
  const form = document.getElementById("watch-form");
  const rows = document.getElementById("live-messages");
  const watchState = document.getElementById("watch-state");
  let socket = null;
  let online = new Set();
  let lastError = "";

  function setStatus(connected, text) {
    if (!status) return;
    status.textContent = text || (connected ? "live" : "offline");
    status.classList.toggle("on", connected);
  }

  function showPresence() {
    document.querySelectorAll("[data-presence]").forEach((cell) => {
      const up = online.has(cell.dataset.presence);
      cell.textContent = up ? "online" : "offline";
      cell.classList.toggle("online", up);
    });
  }

  function lastSeen(device, at) {
    document.querySelectorAll("[data-last-seen]").forEach((cell) => {
      if (cell.dataset.lastSeen === device) {
        cell.replaceChildren(window.portalTime.element(new Date(at || Date.now())));
      }
    });
  }

  function addRow(frame) {
    const tr = document.createElement("tr");
    tr.className = "live-message";
    const cells = [
      window.portalTime.text(new Date(frame.at), true),
      frame.topic,
      String(frame.qos) + (frame.retain ? " (retained)" : ""),
      frame.binary ? "base64: " + frame.payload : frame.payload,
    ];
    cells.forEach((value) => {
      const td = document.createElement("td");
      td.textContent = value; // never innerHTML: payloads are untrusted
      tr.appendChild(td);
    });
    rows.prepend(tr);
    while (rows.children.length > MAX_ROWS) rows.lastChild.remove();
  }

  function watch() {
    if (form && socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ watch: document.getElementById("watch-filter").value }));
    }
  }

  function handle(frame) {
    switch (frame.type) {
      case "status":
        setStatus(frame.connected, frame.connected ? "live" : "broker unreachable");
        break;
      case "sys":
        document.querySelectorAll('[data-sys="' + CSS.escape(frame.name) + '"]').forEach((el) => {
          el.textContent = frame.value;
        });
        break;
      case "presence":
        if (Array.isArray(frame.online)) {
          online = new Set(frame.online);
        } else if (frame.online) {
          online.add(frame.device);
          lastSeen(frame.device, frame.at);
        } else {
          online.delete(frame.device);
          lastSeen(frame.device, frame.at);
        }
        showPresence();
        break;
      case "message":
        if (rows) addRow(frame);
        break;
      case "watching":
        if (watchState) watchState.textContent = frame.filter ? "Watching " + frame.filter : "";
        break;
      case "dropped":
        if (watchState) watchState.textContent = frame.count + " messages not shown (rate limit)";
        break;
      case "error":
        lastError = frame.error;
        if (watchState) watchState.textContent = frame.error;
        break;
      case "live":
        Object.keys(frame).forEach((name) => {
          document.querySelectorAll('[data-live="' + CSS.escape(name) + '"]').forEach((el) => {
            el.textContent = String(frame[name]);
          });
        });
        break;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + "/ws/live/");
    socket.onopen = watch;
    socket.onmessage = (event) => handle(JSON.parse(event.data));
    socket.onclose = (event) => {
      if (event.code === OVER_THE_BOUND) {
        setStatus(false, lastError || event.reason || "Live updates are off: too many live pages open.");
        setTimeout(connect, RETRY_OVER_THE_BOUND_MS);
      } else {
        setStatus(false);
        setTimeout(connect, RETRY_MS);
      }
      lastError = "";
    };
  }

  if (form) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      watch();
    });
  }
  connect();
})();
