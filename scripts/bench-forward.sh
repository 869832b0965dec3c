#!/usr/bin/env bash
# Plain L2 forwarding throughput: prismd (once per port backend in BACKENDS)
# vs a Linux bridge, same topology, same generator, same frame sizes and
# duration:
#   h1 --veth-- [sw] --veth-- h2, all in throwaway namespaces.
# prismd-blast sends fixed-size frames from h1 to h2's MAC for DURATION seconds
# and counts what arrives in h2 (the sender may outrun the forwarder, so only
# received frames count). prismd and bridge runs are interleaved (round 1:
# each backend, then bridge; round 2: bridge, then the backends in reverse;
# ...) so background load hits all alike; the summary is the median of ROUNDS
# per size and backend, each as a ratio to the bridge of the same rounds. CPU per received frame
# is given three ways: "inv" = CPU of the processes involved (sender,
# receiver, prismd, ksoftirqd; softirq work done in a task's context is charged
# to it), the figure that compares prismd and the bridge (which forwards
# inside the sender's softirq) even when other jobs load the machine;
# "sys" = whole machine busy time from /proc/stat (includes unrelated load);
# and the prismd process alone. Before traffic it measures prismd's idle CPU
# with each backend.
# Usage (root): scripts/bench-forward.sh
#   env: DURATION=5 SIZES="64 1500" ROUNDS=3 PRISMD_BIN=bin
#        BACKENDS="afpacket afxdp"   port backends of prismd to measure (config key
#                                    "backend"; afxdp attaches a generic-mode XDP program,
#                                    afxdp-native a driver-mode one: xdp_mode: native;
#                                    afpacket-recvmmsg is afpacket with rx_ring: false)
#        PRISMD_ARGS=                extra prismd flags, e.g. "--cpuprofile /tmp/p.prof"
set -euo pipefail
[[ $EUID -eq 0 ]] || { echo "bench-forward: needs root (namespaces, AF_PACKET)"; exit 1; }
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
SIZES=${SIZES:-"64 1500"}
ROUNDS=${ROUNDS:-3}
BACKENDS=${BACKENDS:-"afpacket afxdp"}
PRISMD_ARGS=${PRISMD_ARGS:-}
for b in $BACKENDS; do
  [[ $b == afpacket || $b == afpacket-recvmmsg || $b == afxdp || $b == afxdp-native ]] || { echo "bench-forward: BACKENDS: unknown backend $b (use afpacket, afpacket-recvmmsg, afxdp, afxdp-native)"; exit 1; }
done
BIN=${PRISMD_BIN:-$PWD/bin}
mkdir -p "$BIN"
[[ -x $BIN/prismd && -x $BIN/prismd-blast ]] || go build -o "$BIN/" ./cmd/prismd ./cmd/prismd-blast
ID=bf$(printf '%04x' $((RANDOM % 65536)))
H1=$ID-h1 H2=$ID-h2 SW=$ID-sw
TMP=$(mktemp -d)
PRISMD_PID=
stop_prismd() {
  [[ -n $PRISMD_PID ]] || return 0
  kill "$PRISMD_PID" 2>/dev/null || true
  wait "$PRISMD_PID" 2>/dev/null || true
  PRISMD_PID=
}
cleanup() {
  stop_prismd
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
ip -n $SW link add br0 type bridge
ip -n $SW link set br0 up
H2MAC=$(ip netns exec $H2 cat /sys/class/net/${ID}b/address)

busy_jiffies() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
softirqd_jiffies() {
  local p t=0
  for p in $(ps -e -o pid=,comm= | awk '$2 ~ /^ksoftirqd\//{print $1}'); do
    t=$((t + $(awk '{print $14+$15}' /proc/$p/stat 2>/dev/null || echo 0)))
  done
  echo $t
}
TIMEFORMAT='%3U %3S'
secs() { awk '{print $1 + $2}' "$1"; }
proc_jiffies() { awk '{print $14+$15}' /proc/$1/stat; }
HZ=$(getconf CLK_TCK)

for b in $BACKENDS; do
  keys="backend: $b"
  [[ $b == afxdp-native ]] && keys=$'backend: afxdp\n    xdp_mode: native'
  [[ $b == afpacket-recvmmsg ]] && keys=$'backend: afpacket\n    rx_ring: false'
  cat >"$TMP/prismd-$b.yaml" <<YAML
ports:
  - name: ${ID}sa
    $keys
  - name: ${ID}sb
    $keys
workers: 1
YAML
done

# start_prismd BACKEND
start_prismd() {
  # shellcheck disable=SC2086 # PRISMD_ARGS is a list of flags
  ip netns exec $SW "$BIN/prismd" --config "$TMP/prismd-$1.yaml" --log-level warn $PRISMD_ARGS &
  PRISMD_PID=$!
  sleep 1
  kill -0 $PRISMD_PID
}
bridge_on()  { ip -n $SW link set ${ID}sa master br0; ip -n $SW link set ${ID}sb master br0; sleep 0.5; }
bridge_off() { ip -n $SW link set ${ID}sa nomaster; ip -n $SW link set ${ID}sb nomaster; }

# run SIZE -> prints "received_fps sys_ns_per_frame prismd_ns_per_frame sent_fps involved_ns_per_frame"
run() {
  local size=$1 b0 b1 p0=0 p1=0 k0 k1 got sent
  ( time ip netns exec $H2 "$BIN/prismd-blast" recv --iface ${ID}b --duration $((DURATION + 1))s >"$TMP/recv" ) 2>"$TMP/recv.cpu" &
  local rpid=$!
  sleep 0.3
  b0=$(busy_jiffies); k0=$(softirqd_jiffies)
  [[ -n $PRISMD_PID ]] && p0=$(proc_jiffies $PRISMD_PID)
  { time ip netns exec $H1 "$BIN/prismd-blast" send --iface ${ID}a --dst "$H2MAC" --size "$size" --duration ${DURATION}s >"$TMP/send"; } 2>"$TMP/send.cpu"
  b1=$(busy_jiffies); k1=$(softirqd_jiffies)
  [[ -n $PRISMD_PID ]] && p1=$(proc_jiffies $PRISMD_PID)
  wait $rpid
  got=$(awk '{print $2}' "$TMP/recv")
  sent=$(awk '{print $2}' "$TMP/send")
  awk -v g=$got -v s=$sent -v d=$DURATION -v b=$((b1 - b0)) -v p=$((p1 - p0)) -v k=$((k1 - k0)) -v hz=$HZ \
    -v sc=$(secs "$TMP/send.cpu") -v rc=$(secs "$TMP/recv.cpu") \
    'BEGIN{printf "%.0f %.0f %.0f %.0f %.0f\n", g/d, (g > 0 ? b*1e9/hz/g : 0), (g > 0 ? p*1e9/hz/g : 0), s/d, (g > 0 ? ((p + k)/hz + sc + rc)*1e9/g : 0)}'
}

# run_one WHAT SIZE: WHAT is bridge or a prismd backend
run_one() {
  if [[ $1 == bridge ]]; then bridge_on; R=$(run "$2"); bridge_off
  else start_prismd "$1"; R=$(run "$2"); stop_prismd; fi
  echo "$R"
}

for b in $BACKENDS; do
  start_prismd "$b"
  i0=$(proc_jiffies $PRISMD_PID); sleep 3; i1=$(proc_jiffies $PRISMD_PID)
  stop_prismd
  echo "prismd ($b) idle CPU: $(awk -v j=$((i1 - i0)) -v hz=$HZ 'BEGIN{printf "%.1f", j*100/hz/3}')% of one core (3 s, no traffic)"
done

# Results: one line per run, "round size what fps sys/f proc/f sent inv/f".
REV=$(for b in $BACKENDS; do echo "$b"; done | tac | tr '\n' ' ')
for r in $(seq 1 "$ROUNDS"); do
  for s in $SIZES; do
    if (( r % 2 )); then order="$BACKENDS bridge"; else order="bridge $REV"; fi
    for w in $order; do
      R=$(run_one "$w" "$s")
      echo "$r $s $w $R" >>"$TMP/results"
      if [[ $w == bridge ]]; then
        printf 'round %d %5sB  %-15s %7s fps (inv %5s ns/f, sys %6s ns/f,               sent %7s fps)\n' \
          "$r" "$s" bridge $(awk '{print $1, $5, $2, $4}' <<<"$R")
      else
        printf 'round %d %5sB  %-15s %7s fps (inv %5s ns/f, sys %6s ns/f, prismd %5s ns/f, sent %7s fps)\n' \
          "$r" "$s" "prismd $w" $(awk '{print $1, $5, $2, $3, $4}' <<<"$R")
      fi
    done
  done
done

echo
echo "median of $ROUNDS interleaved rounds, ${DURATION}s each (fps = frames/s received in h2; ratio = prismd fps / bridge fps of the same round)"
printf '%-6s %-12s %11s %11s %6s %13s %13s %13s %13s %12s  %s\n' size backend prismd_fps bridge_fps ratio prismd_inv/f bridge_inv/f prismd_sys/f bridge_sys/f prismd_proc/f round_ratios
for s in $SIZES; do
  for b in $BACKENDS; do
    awk -v s=$s -v b=$b '
      function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
        return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2 }
      $2 == s && $3 == "bridge" { bf[$1] = $4; bs[$1] = $5; bi[$1] = $8 }
      $2 == s && $3 == b { pf[$1] = $4; ps[$1] = $5; pp[$1] = $6; pi[$1] = $8 }
      END { for (r in pf) { n++; a[n] = pf[r]; c[n] = bf[r]; d[n] = pi[r]; e[n] = bi[r]; f[n] = ps[r]; g[n] = bs[r]; h[n] = pp[r]
              q[n] = bf[r] > 0 ? pf[r] / bf[r] : 0; rr[r] = q[n] }
            for (r = 1; r in rr; r++) l = l sprintf("%s%.2f", r > 1 ? "," : "", rr[r])
            printf "%-6s %-12s %11.0f %11.0f %6.3f %13.0f %13.0f %13.0f %13.0f %12.0f  %s\n", s"B", b, med(a, n), med(c, n), med(q, n), med(d, n), med(e, n), med(f, n), med(g, n), med(h, n), l }' "$TMP/results"
  done
done
echo "(ns/f = CPU nanoseconds per received frame; inv = sender+receiver+prismd+ksoftirqd, sys = whole machine)"
