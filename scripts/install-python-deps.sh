#!/usr/bin/env bash
# Installs Python packages into a virtualenv with visible progress and without the build
# back-end's chatter: `install-python-deps.sh VENV PIP-ARGS…` (the Makefile's install target).
# pip's whole output goes to VENV/pip-install.log; on failure its end is shown.
set -euo pipefail

venv=$1
shift
python=${PYTHON:-python3}
log="$venv/pip-install.log"
if [ ! -x "$venv/bin/python" ]; then
  echo "Creating the virtualenv $venv"
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip >"$log" 2>&1 || true
echo "Installing Python packages into $venv (the first time takes a minute or two; log: $log)"

progress() {
  local count=0 line
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    case "$line" in
      Collecting*)
        count=$((count + 1))
        if [ -t 1 ]; then
          printf '\r  resolving: %d packages (%s)\033[K' "$count" "${line#Collecting }"
        elif [ $((count % 25)) -eq 0 ]; then
          echo "  resolving: $count packages"
        fi
        ;;
      "Installing collected packages"*)
        [ -t 1 ] && printf '\n'
        echo "  installing $(($(tr -cd , <<<"$line" | wc -c) + 1)) packages…"
        ;;
      "Successfully installed"*)
        echo "  done."
        ;;
    esac
  done
  [ -t 1 ] && [ "$count" -gt 0 ] && printf '\n'
  return 0
}

if ! "$venv/bin/python" -m pip install --progress-bar off "$@" 2>&1 | progress; then
  echo "error: pip install failed; the end of $log:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
