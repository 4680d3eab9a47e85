#!/bin/sh
# entrypoint.sh ROLE [ARG...]: run one role of the table of processes (common/runtime/processes.py):
# web, broker, worker, beat, rules, billing or migrate; extra arguments are appended to the
# role's command (e.g. `billing --issue`). `--health [ROLE]`, `--print ROLE`, `--list` and
# `--manage COMMAND [ARG...]` (a one-off manage.py command) pass through. The role's process replaces this shell (exec), so the SIGTERM that Docker or ECS
# sends to tini (PID 1) reaches it directly.
set -eu

if [ "$#" -eq 0 ] && [ -z "${PLATFORM_ROLE:-}" ]; then
    echo "usage: entrypoint.sh ROLE [ARG...]  (the roles: entrypoint.sh --list)" >&2
    exit 64
fi
exec python -m common.runtime.processes "$@"
