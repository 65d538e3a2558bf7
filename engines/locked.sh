#!/usr/bin/env bash
# Runs COMMAND holding an exclusive lock on FILE (created if missing; flock(2), which the kernel
# releases when COMMAND ends, however it ends): the installers that engines/install.sh runs at
# once take turns through it where they share something (Maven's local repository, the
# checkout's metaservice.egg-info/). util-linux's flock(1), else the same lock from Python's
# fcntl (macOS has no flock(1)). Prints a line when it has to wait.
#
#   bash engines/locked.sh FILE COMMAND...
set -euo pipefail
if [ "$#" -lt 2 ]; then
    echo "usage: bash engines/locked.sh FILE COMMAND..." >&2
    exit 2
fi
mkdir -p "$(dirname "$1")"
if command -v flock >/dev/null; then
    if ! flock -n "$1" true; then
        echo "locked: waiting for $1 (held by another installer)"
    fi
    exec flock "$@"
fi
exec python3 -c '
import fcntl, os, subprocess, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print(f"locked: waiting for {sys.argv[1]} (held by another installer)", flush=True)
    fcntl.flock(fd, fcntl.LOCK_EX)
sys.exit(subprocess.call(sys.argv[2:]))
' "$@"
