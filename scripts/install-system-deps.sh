#!/usr/bin/env bash
# Installs the Debian packages the platform and its tests run against, only those missing.
# Postgres server binaries, Redis, Mosquitto (+ clients, the reference broker of the interop tests
# and benchmarks), Chromium (browser tests), Node.js (MQTT.js interop), a JDK (PySpark), openssl,
# Pango (WeasyPrint, invoice PDFs), poppler-utils (pdftotext, the PDF tests) and a C compiler (the
# archive's recorder).
set -euo pipefail

missing=()
have() { command -v "$1" >/dev/null 2>&1; }
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || have initdb || missing+=(postgresql)
have redis-server || missing+=(redis-server)
have mosquitto || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
have mosquitto_pub || missing+=(mosquitto-clients)
have chromium || missing+=(chromium)
have node || missing+=(nodejs npm)
have java || missing+=(openjdk-17-jre-headless)
have openssl || missing+=(openssl)
have runuser || missing+=(util-linux)
have pdftotext || missing+=(poppler-utils)  # invoice PDFs read back in the tests
# A C compiler and Python's headers build the archive's recorder (setup.py); without them the
# install still succeeds and the broker runs the slower Python recorder.
have gcc || missing+=(gcc libc6-dev)
"${PYTHON:-python3}" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null ||
  missing+=(python3-dev)
# WeasyPrint (invoice PDFs) loads Pango and its FreeType backend at run time.
# (Read the cache once: `ldconfig -p | grep -q` fails under pipefail when grep stops early.)
libraries=$(ldconfig -p 2>/dev/null || true)
grep -q 'libpango-1.0.so' <<<"$libraries" || missing+=(libpango-1.0-0)
grep -q 'libpangoft2-1.0.so' <<<"$libraries" || missing+=(libpangoft2-1.0-0)

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "Installing system packages: ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if have sudo; then SUDO="sudo"; else
    echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts these services on install; the platform starts its own private instances.
for service in redis-server mosquitto postgresql; do
  $SUDO service "$service" stop >/dev/null 2>&1 || true
done
