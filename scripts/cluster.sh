#!/usr/bin/env bash
# An emulated cluster on one machine, for running and testing hvlite across hosts.
#
#   scripts/cluster.sh up K [--rate R] [--subnet A.B.C]   K hosts h1..hK (root)
#   scripts/cluster.sh down                               remove everything `up` made
#   scripts/cluster.sh status                             the hosts, or exit 1 if none
#   scripts/cluster.sh shape R|none                       reshape every link (none: unshaped)
#   scripts/cluster.sh exec HOST command ...              run a command on a host
#
# Each host is a network and a UTS namespace (its own interfaces and host name; the file system,
# processes and /dev/shm stay shared), joined to a bridge by a veth pair whose host end is `eth0`.
# --rate shapes each host's link in both directions with tc's token bucket (e.g. 1gbit, 500mbit).
# Addresses are taken only on the bridge this script creates (SUBNET.1 the bridge, SUBNET.1i host
# hi), after checking that nothing on this machine uses the subnet; /etc/hosts gets one line per
# host, marked, and `down` removes exactly those lines. A failed `up` tears down what it made.
#
# The state lives in $HVLITE_CLUSTER_DIR (default /run/hvlite-cluster): `hosts` ("name address"
# lines), `bridge` (the bridge's address, where the hosts reach this machine), `ssh` (the ssh
# stand-in hydra starts each host's proxy with). hvliterun reads it: `hvliterun -H h1:2,h2:2 ...`
# then runs across these hosts as across real ones (hvlite/run/emulated.py).
set -Eeuo pipefail

DIR=${HVLITE_CLUSTER_DIR:-/run/hvlite-cluster}
BRIDGE=hvlbr0
NS_PREFIX=hvlite-
MARK="# hvlite-cluster"

die() { echo "cluster.sh: $*" >&2; exit 1; }

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (namespaces, a bridge, tc, /etc/hosts)"
    command -v ip >/dev/null || die "needs iproute2's ip"
    command -v nsenter >/dev/null && command -v unshare >/dev/null || die "needs nsenter and unshare"
}

hosts_of_state() { [ -f "$DIR/hosts" ] && awk '{print $1}' "$DIR/hosts"; }

down() {
    local h
    if [ -f "$DIR/hosts" ]; then
        for h in $(hosts_of_state); do
            ip netns pids "$NS_PREFIX$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        done
    fi
    for h in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NS_PREFIX" || true); do
        ip netns pids "$h" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
        ip netns del "$h" 2>/dev/null || true
    done
    for f in "$DIR"/*.uts; do
        [ -e "$f" ] || continue
        umount "$f" 2>/dev/null || true
        rm -f "$f"
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    if grep -q "$MARK\$" /etc/hosts 2>/dev/null; then
        # in place (the file may be a bind mount): every line but ours
        local kept
        kept=$(grep -v "$MARK\$" /etc/hosts || true)
        printf '%s\n' "$kept" > /etc/hosts
    fi
    rm -f "$DIR/hosts" "$DIR/hosts.new" "$DIR/bridge" "$DIR/ssh" "$DIR/rate"
    rmdir "$DIR" 2>/dev/null || true
}

burst_for() {
    # 2 ms at the rate, at least 64 KiB: enough for the timer, small enough to keep the average
    python3 - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)(bit|bps)?", sys.argv[1].lower())
if not m:
    sys.exit(f"cluster.sh: cannot read rate {sys.argv[1]!r} (e.g. 1gbit, 500mbit)")
v = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
bps = v if m.group(3) == "bps" else v / 8
print(max(65536, int(bps * 0.002)))
EOF
}

shape_link() {
    # host i's link (namespace ns): its upload, then its download, at rate (none: unshaped)
    local i=$1 ns=$2 rate=$3 burst=$4
    ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
    tc qdisc del dev "hvlv$i" root 2>/dev/null || true
    [ "$rate" != none ] || return 0
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms
    tc qdisc add dev "hvlv$i" root tbf rate "$rate" burst "$burst" latency 100ms
}

shape() {
    local rate=${1:?shape RATE or none} burst="" i h
    need_root
    [ -f "$DIR/hosts" ] || die "no cluster is up"
    [ "$rate" = none ] || burst=$(burst_for "$rate")
    for h in $(hosts_of_state); do
        i=${h#h}
        shape_link "$i" "$NS_PREFIX$h" "$rate" "$burst"
    done
    if [ "$rate" = none ]; then echo unshaped; else echo "$rate"; fi > "$DIR/rate"
    echo "cluster.sh: links $(cat "$DIR/rate")"
}

up() {
    local k="" rate="" subnet=10.213.47 i h ns addr
    while [ $# -gt 0 ]; do
        case "$1" in
            --rate) rate=$2; shift 2 ;;
            --subnet) subnet=$2; shift 2 ;;
            *) [ -z "$k" ] || die "unexpected argument $1"; k=$1; shift ;;
        esac
    done
    [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 32 ] || die "up K: K hosts, 1 to 32"
    [[ "$subnet" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "--subnet A.B.C (a /24)"
    need_root
    [ ! -f "$DIR/hosts" ] || die "a cluster is up already ($DIR); run: $0 down"
    ip link show "$BRIDGE" >/dev/null 2>&1 && die "bridge $BRIDGE exists already"
    if ip -4 addr show | grep -q "inet ${subnet//./\\.}\." || ip -4 route show | grep -q "^${subnet//./\\.}\."; then
        die "subnet $subnet.0/24 is in use on this machine; pick another with --subnet"
    fi
    for i in $(seq 1 "$k"); do
        grep -qE "[[:space:]]h$i([[:space:]]|\$)" /etc/hosts && die "/etc/hosts names h$i already"
    done
    local burst=""
    [ -z "$rate" ] || burst=$(burst_for "$rate")
    trap 'echo "cluster.sh: up failed; tearing down" >&2; down' ERR
    [ -z "$(tail -c 1 /etc/hosts)" ] || echo >> /etc/hosts   # our lines start on a line of their own
    mkdir -p "$DIR"
    ip link add "$BRIDGE" type bridge
    ip addr add "$subnet.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    : > "$DIR/hosts.new"
    for i in $(seq 1 "$k"); do
        h=h$i; ns=$NS_PREFIX$h; addr=$subnet.$((10 + i))
        ip netns add "$ns"
        ip link add "hvlv$i" type veth peer name eth0 netns "$ns"
        ip link set "hvlv$i" master "$BRIDGE" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$addr/24" dev eth0
        ip -n "$ns" link set eth0 up
        [ -z "$rate" ] || shape_link "$i" "$ns" "$rate" "$burst"
        touch "$DIR/$h.uts"
        unshare --uts="$DIR/$h.uts" hostname "$h"
        echo "$h $addr" >> "$DIR/hosts.new"
        echo "$addr $h $MARK" >> /etc/hosts
    done
    echo "$subnet.1" > "$DIR/bridge"
    echo "${rate:-unshaped}" > "$DIR/rate"
    cat > "$DIR/ssh" <<EOF
#!/bin/sh
# ssh stand-in for hydra's ssh launcher: [ssh options] HOST command... runs the command on HOST
while [ \$# -gt 0 ]; do
    case "\$1" in
        -[bcDEeFIiJLlmOoopQRSWw]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
host=\$1; shift
[ -f "$DIR/\$host.uts" ] || { echo "ssh stand-in: no emulated host \$host" >&2; exit 255; }
exec nsenter --net=/var/run/netns/$NS_PREFIX\$host --uts="$DIR/\$host.uts" -- sh -c "\$*"
EOF
    chmod 755 "$DIR/ssh"
    # every host reaches the bridge and another host over TCP, or the cluster is not up
    if ! reach_check "$subnet"; then
        trap - ERR; down; die "the hosts cannot reach each other over the bridge"
    fi
    mv "$DIR/hosts.new" "$DIR/hosts"
    trap - ERR
    echo "cluster.sh: $k host(s) up ($(hosts_of_state | tr '\n' ' ')), links ${rate:-unshaped}," \
         "bridge $subnet.1; state in $DIR"
}

reach_check() {
    # every host connects to a listener on the bridge, and host 1 to one on host 2: the veths
    # and the bridge's forwarding both carry traffic
    python3 - "$DIR" "$1" "$NS_PREFIX" <<'EOF'
import os, socket, subprocess, sys
d, subnet, prefix = sys.argv[1:]
hosts = [line.split() for line in open(os.path.join(d, "hosts.new"))]
srv = socket.create_server((subnet + ".1", 0))
port = srv.getsockname()[1]
srv.settimeout(10)
code = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5).close()"
for name, _ in hosts:
    subprocess.run(["ip", "netns", "exec", prefix + name, sys.executable, "-c", code,
                    subnet + ".1", str(port)], check=True, timeout=20)
    srv.accept()[0].close()
if len(hosts) > 1:
    listener = subprocess.Popen(["ip", "netns", "exec", prefix + hosts[1][0], sys.executable, "-c",
                                 "import socket; s = socket.create_server(('0.0.0.0', 7999)); "
                                 "print(1, flush=True); s.settimeout(10); s.accept()"],
                                stdout=subprocess.PIPE)
    try:
        listener.stdout.readline()
        subprocess.run(["ip", "netns", "exec", prefix + hosts[0][0], sys.executable, "-c", code,
                        hosts[1][1], "7999"], check=True, timeout=20)
        listener.wait(timeout=10)
    finally:
        listener.kill()
EOF
}

status() {
    [ -f "$DIR/hosts" ] || { echo "cluster.sh: no cluster is up"; exit 1; }
    echo "bridge $(cat "$DIR/bridge"), links $(cat "$DIR/rate" 2>/dev/null)"
    cat "$DIR/hosts"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) need_root; down; echo "cluster.sh: down" ;;
    status) status ;;
    shape) shift; shape "$@" ;;
    exec) shift; h=${1:?exec HOST command ...}; shift
          [ -x "$DIR/ssh" ] || die "no cluster is up"
          exec "$DIR/ssh" "$h" "$(printf '%q ' "$@")" ;;
    *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
