#!/usr/bin/env bash
# Plain L2 forwarding throughput: prismd vs a Linux bridge, same topology,
# same run:  h1 --veth-- [sw] --veth-- h2, all in throwaway namespaces.
# prismd-blast sends fixed-size frames from h1 to h2's MAC for DURATION
# seconds and counts what arrives in h2. Prints frames/s received, the ratio
# prismd/bridge, and CPU per frame (whole machine, from /proc/stat; plus
# prismd's own process CPU).
# Usage (root): scripts/bench-forward.sh   env: DURATION=5 SIZES="64 1500" PRISMD_BIN=bin
set -euo pipefail
[[ $EUID -eq 0 ]] || { echo "bench-forward: needs root (namespaces, AF_PACKET)"; exit 1; }
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
SIZES=${SIZES:-"64 1500"}
BIN=${PRISMD_BIN:-$PWD/bin}
mkdir -p "$BIN"
[[ -x $BIN/prismd && -x $BIN/prismd-blast ]] || go build -o "$BIN/" ./cmd/prismd ./cmd/prismd-blast
ID=bf$(printf '%04x' $((RANDOM % 65536)))
H1=$ID-h1 H2=$ID-h2 SW=$ID-sw
TMP=$(mktemp -d)
PRISMD_PID=
cleanup() {
  [[ -n $PRISMD_PID ]] && kill "$PRISMD_PID" 2>/dev/null && wait "$PRISMD_PID" 2>/dev/null || true
  for ns in $H1 $H2 $SW; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
for ns in $H1 $H2 $SW; do ip netns add "$ns"; ip -n "$ns" link set lo up; done
ip link add ${ID}a type veth peer name ${ID}sa
ip link add ${ID}b type veth peer name ${ID}sb
ip link set ${ID}a netns $H1; ip link set ${ID}sa netns $SW
ip link set ${ID}b netns $H2; ip link set ${ID}sb netns $SW
ip netns exec $SW sysctl -qw net.ipv6.conf.all.disable_ipv6=1
for x in "$H1 ${ID}a" "$H2 ${ID}b" "$SW ${ID}sa" "$SW ${ID}sb"; do
  set -- $x
  ip -n "$1" link set "$2" up
  ip netns exec "$1" ethtool -K "$2" tso off gso off gro off tx off >/dev/null 2>&1 || true
done
H2MAC=$(ip netns exec $H2 cat /sys/class/net/${ID}b/address)

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
proc_jiffies() { awk '{print $14+$15}' /proc/$1/stat; }
HZ=$(getconf CLK_TCK)

# run SIZE -> prints "rate busy_ns_per_frame"
run() {
  local size=$1 out b0 b1 got
  ip netns exec $H2 "$BIN/prismd-blast" recv --iface ${ID}b --duration $((DURATION + 2))s >"$TMP/recv" &
  local rpid=$!
  sleep 0.5
  b0=$(busy_jiffies)
  [[ -n $PRISMD_PID ]] && p0=$(proc_jiffies $PRISMD_PID)
  ip netns exec $H1 "$BIN/prismd-blast" send --iface ${ID}a --dst "$H2MAC" --size "$size" --duration ${DURATION}s >"$TMP/send"
  b1=$(busy_jiffies)
  [[ -n $PRISMD_PID ]] && p1=$(proc_jiffies $PRISMD_PID)
  wait $rpid
  got=$(awk '{print $2}' "$TMP/recv")
  local pns=0
  [[ -n $PRISMD_PID && $got -gt 0 ]] && pns=$(( (p1 - p0) * 1000000000 / HZ / got ))
  echo "$got $(( got > 0 ? (b1 - b0) * 1000000000 / HZ / got : 0 )) $pns $(awk '{print $2}' "$TMP/send")"
}

cat >"$TMP/prismd.yaml" <<YAML
ports:
  - name: ${ID}sa
  - name: ${ID}sb
workers: 1
YAML

declare -A P B
echo "== prismd"
ip netns exec $SW "$BIN/prismd" --config "$TMP/prismd.yaml" --log-level warn &
PRISMD_PID=$!
sleep 1
for s in $SIZES; do P[$s]=$(run "$s"); echo "  ${s}B: received/sys-ns-per-frame/prismd-ns-per-frame/sent: ${P[$s]}"; done
kill $PRISMD_PID; wait $PRISMD_PID || true; PRISMD_PID=

echo "== linux bridge"
ip -n $SW link add br0 type bridge
ip -n $SW link set ${ID}sa master br0; ip -n $SW link set ${ID}sb master br0
ip -n $SW link set br0 up
sleep 1
for s in $SIZES; do B[$s]=$(run "$s"); echo "  ${s}B: received/sys-ns-per-frame/-/sent: ${B[$s]}"; done

echo
printf '%-6s %14s %14s %7s %16s %16s %18s\n' size prismd_fps bridge_fps ratio prismd_sys_ns/f bridge_sys_ns/f prismd_proc_ns/f
for s in $SIZES; do
  read -r pg pns pproc _ <<<"${P[$s]}"; read -r bg bns _ _ <<<"${B[$s]}"
  awk -v s=$s -v pg=$pg -v bg=$bg -v d=$DURATION -v pns=$pns -v bns=$bns -v pp=$pproc \
    'BEGIN{printf "%-6s %14.0f %14.0f %7.3f %16d %16d %18d\n", s"B", pg/d, bg/d, (bg>0?pg/bg:0), pns, bns, pp}'
done
