#!/bin/sh
# A host discovery script for `hvliterun --elastic --host-discovery-script examples/hosts.sh`:
# it prints the hosts that may run ranks now, one `host:slots` per line (Horovod's format).
# This one offers this machine, with the number of slots written in the file $HOSTS_SLOTS_FILE
# (2 when unset): write another number there while the job runs, and hvliterun grows or shrinks
# it at its next commit. A cluster's script would print its scheduler's nodes instead.
slots=2
if [ -n "${HOSTS_SLOTS_FILE:-}" ] && [ -r "$HOSTS_SLOTS_FILE" ]; then
    slots=$(cat "$HOSTS_SLOTS_FILE")
    [ -n "$slots" ] || slots=2
fi
echo "localhost:$slots"
