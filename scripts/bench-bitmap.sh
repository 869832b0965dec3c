#!/usr/bin/env bash
# Bitmap framework benchmarks (issue #6): every figure is a RATIO against a
# peer measured in the same run (machines here are noisy; absolute numbers
# mean little). Rounds alternate subject and peer so drift hits both.
#   1. Replication: frames/s out of one prismd fanning one input stream to 4
#      ports (bitmap multicast, D-BM = 4 receivers; prismctl mcast blast) vs
#      the same node's plain forwarding frames/s (prismd-blast h1 -> h2),
#      fanout lab (one switch, 5 hosts), counted by the switch's
#      prismd_port_transmit_frames_total.
#   2. MoE: tokens/s through dispatch + combine with switch-merged returns
#      (prismctl moe run) vs the host-side alternative, K unicast copies per
#      token summed at the source (moe run --unicast), every host of
#      spine-leaf a token source and an expert host at once, same job shape.
#   3. Reliable multicast: time to deliver a 256 MiB file from h1 to h2, h3,
#      h4 of spine-leaf-jumbo (prismctl mcast send/recv, MTU 9000, SHA-256
#      verified) vs copying it over TCP to the same hosts through the same
#      switches, in parallel, one connection each (prismctl tcpcopy; also
#      verified): the fair peer of one multicast.
# A part that fails says why and the script goes on; exit 1 only if no part
# measured anything. Everything created (labs "bb?XXXX", namespaces
# pl-bb?XXXX-*, processes, files) is removed on exit.
# Usage (root): scripts/bench-bitmap.sh
# env:
#   PRISMD_BIN=bin            binaries (prismd, prismctl, prismd-blast)
#   BENCH_QUICK=1             ~2 min: 1 round each, shorter blasts, 64 MiB file
#   BENCH_BB_PARTS="1 2 3"    which parts to run
#   BENCH_ROUNDS=3            subject/peer pairs per part (QUICK: 1); ratios are
#                             per pair (same minute), the summary their median
#   BENCH_FANOUT_SECS=5       blast duration per run, part 1 (QUICK: 2)
#   BENCH_FANOUT_SIZE=1500    frame bytes incl. Ethernet header, part 1
#   BENCH_MOE_TOKENS=512      tokens each host dispatches, part 2 (QUICK: 128)
#   BENCH_MOE_HIDDEN=256      hidden size (FP32 values per token)
#   BENCH_MOE_TOPK=4          experts per token (K)
#   BENCH_MOE_EXPERTS=4       experts per host
#   BENCH_MOE_LINGER=3s       a host that combined keeps serving until idle this long
#   BENCH_MCAST_MB=256        file size in MiB, part 3 (QUICK: 64)
#   BENCH_TCP_SEQUENTIAL=0    1: the TCP peer copies one host after the other
#   BENCH_RUN_TIMEOUT=600     seconds before a run's processes are killed
#   BENCH_LAB_PREFIX=bb       lab names are <prefix><part letter><hex>
set -uo pipefail
[[ $EUID -eq 0 ]] || { echo "bench-bitmap: needs root (namespaces, AF_PACKET)"; exit 1; }
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${PRISMD_BIN:-$ROOT/bin}
QUICK=${BENCH_QUICK:-0}
PARTS=${BENCH_BB_PARTS:-"1 2 3"}
if [[ $QUICK == 1 ]]; then
  ROUNDS=${BENCH_ROUNDS:-1}; FAN_SECS=${BENCH_FANOUT_SECS:-2}; MOE_TOKENS=${BENCH_MOE_TOKENS:-128}
  MCAST_MB=${BENCH_MCAST_MB:-64}
else
  ROUNDS=${BENCH_ROUNDS:-3}; FAN_SECS=${BENCH_FANOUT_SECS:-5}; MOE_TOKENS=${BENCH_MOE_TOKENS:-512}
  MCAST_MB=${BENCH_MCAST_MB:-256}
fi
MOE_LINGER=${BENCH_MOE_LINGER:-3s}
FAN_SIZE=${BENCH_FANOUT_SIZE:-1500}
MOE_HIDDEN=${BENCH_MOE_HIDDEN:-256}; MOE_TOPK=${BENCH_MOE_TOPK:-4}; MOE_EXPERTS=${BENCH_MOE_EXPERTS:-4}
TCP_SEQ=${BENCH_TCP_SEQUENTIAL:-0}
RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-600}
PREFIX=${BENCH_LAB_PREFIX:-bb}
export PRISMD_BIN=$BIN
mkdir -p "$BIN"
[[ -x $BIN/prismd && -x $BIN/prismctl && -x $BIN/prismd-blast ]] ||
  go build -o "$BIN/" ./cmd/prismd ./cmd/prismctl ./cmd/prismd-blast || { echo "bench-bitmap: build failed"; exit 1; }
PRISMCTL=$BIN/prismctl
HEX=$(printf '%04x' $((RANDOM % 65536)))
TMP=$(mktemp -d /tmp/prismd-bench-bitmap.XXXXXX)
STATE=$TMP/state
# Files received in part 3 go to tmpfs when it has room, so both peers
# write to memory and the disk is not what is measured.
DATA=$TMP/data
if [[ -d /dev/shm ]] && (( $(df -Pk /dev/shm | awk 'NR==2{print $4}') > (MCAST_MB * 1024 * 5) )); then
  DATA=$(mktemp -d /dev/shm/prismd-bench-bitmap.XXXXXX)
fi
mkdir -p "$STATE" "$DATA"
PIDS=()     # background processes this script started
LABS=()     # topology files of labs this script brought up
MEASURED=0
T_START=$(date +%s)
HZ=$(getconf CLK_TCK)

cleanup() {
  local p f
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for f in "${LABS[@]}"; do "$PRISMCTL" lab down -q --state-dir "$STATE" "$f" >/dev/null 2>&1; done
  rm -rf "$TMP"
  [[ $DATA == /dev/shm/prismd-bench-bitmap.* ]] && rm -rf "$DATA"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hdr() { echo; echo "=============== $* ==============="; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.3f", a/b; else printf "n/a" }'; }
mean() { awk '{s+=$1; n++} END{if (n) printf "%.0f", s/n}'; }
meanf() { awk '{s+=$1; n++} END{if (n) printf "%.3f", s/n}'; }
median() { sort -g | awk '{v[NR]=$1} END{if (NR) printf "%.3f", (NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2)}'; }
# pairs FILE FIELD SUBJECT PEER -> per-round ratios SUBJECT/PEER of FIELD (rows "kind value... round"; a round
# where either run failed has no ratio)
pairs() { awk -v f="$2" -v s="$3" -v p="$4" '$1==s{a[$NF]=$f} $1==p{b[$NF]=$f} END{for (k=1; k<=1000; k++) if ((k in a) && (k in b) && b[k] > 0) printf "%.3f\n", a[k]/b[k]}' "$1"; }
# sec DURATION -> seconds (Go's time.Duration format: 950ms, 14.2s, 1m2.5s, 12µs)
sec() { awk -v s="$1" 'BEGIN{ if (s ~ /ms$/) v = substr(s,1,length(s)-2)/1e3; else if (s ~ /(µs|us)$/) v = substr(s,1,length(s)-2)/1e6;
  else if (s ~ /m[0-9.]+s$/) { split(s,a,"m"); v = a[1]*60 + substr(a[2],1,length(a[2])-1) } else v = substr(s,1,length(s)-1)+0; printf "%.3f", v }'; }

# lab_up TEMPLATE NAME -> brings up a copy of TEMPLATE (a file, or a shipped name) named NAME; sets LAB_FILE.
lab_up() {
  local src=$1 name=$2
  LAB_FILE=$TMP/$name.yaml
  [[ -f $src ]] || src=$ROOT/deploy/lab/$1.yaml
  sed "s/^name: .*/name: $name/" "$src" >"$LAB_FILE"
  LABS+=("$LAB_FILE")
  if ! "$PRISMCTL" lab up -q --state-dir "$STATE" "$LAB_FILE" >"$TMP/$name.up" 2>&1; then
    echo "lab up $name failed:"; tail -5 "$TMP/$name.up"; return 1
  fi
}
lab_down() {
  "$PRISMCTL" lab down -q --state-dir "$STATE" "$1" >/dev/null 2>&1
  local f keep=()
  for f in "${LABS[@]}"; do [[ $f == "$1" ]] || keep+=("$f"); done
  LABS=("${keep[@]}")
}
ns() { echo "pl-$1-$2"; }
in_ns() { local lab=$1 node=$2; shift 2; ip netns exec "$(ns "$lab" "$node")" "$@"; }
metrics() { in_ns "$1" "$2" curl -s --max-time 5 http://127.0.0.1:9100/metrics; }
tx_frames() { metrics "$1" "$2" | awk '/^prismd_port_transmit_frames_total\{/{s+=$2} END{printf "%.0f\n", s}'; }
ring_drops() { metrics "$1" "$2" | awk '/^prismd_port_(drops|kernel_drops)_total\{/ && !/reason="(hairpin|loopback)"/{s+=$2} END{printf "%.0f\n", s}'; }
jiffies() { awk '{print $14+$15}' /proc/"$(cat "$STATE/$1/$2.pid")"/stat 2>/dev/null || echo 0; }
# bg OUT CMD... -> runs CMD in the background (bounded by RUN_TIMEOUT) with output in OUT; sets BG.
bg() { local out=$1; shift; timeout "$RUN_TIMEOUT" "$@" >"$out" 2>&1 & BG=$!; PIDS+=("$BG"); }

# ---------------------------------------------------------------- part 1
part1() {
  hdr "1. Replication: frames/s out of one prismd, bitmap multicast to 4 ports vs plain forwarding (${FAN_SIZE} B frames, ${FAN_SECS}s runs)"
  local lab=${PREFIX}f$HEX f
  cat >"$TMP/fanout.yaml" <<'EOF'
# One prismd switch fanning out to four hosts: h1 sends, h2..h5 receive.
name: fanout
mtu: 1500
topology:
  nodes:
    sw1: {kind: prismd}
    h1: {kind: host, ipv4: 10.0.0.1/24}
    h2: {kind: host, ipv4: 10.0.0.2/24}
    h3: {kind: host, ipv4: 10.0.0.3/24}
    h4: {kind: host, ipv4: 10.0.0.4/24}
    h5: {kind: host, ipv4: 10.0.0.5/24}
  links:
    - endpoints: ["h1:eth0", "sw1:p1"]
    - endpoints: ["h2:eth0", "sw1:p2"]
    - endpoints: ["h3:eth0", "sw1:p3"]
    - endpoints: ["h4:eth0", "sw1:p4"]
    - endpoints: ["h5:eth0", "sw1:p5"]
EOF
  lab_up "$TMP/fanout.yaml" "$lab" || return 1; f=$LAB_FILE
  local topo=$STATE/$lab/topology.yaml h2mac r a out t0 t1 j0 j1 d0 d1 job=700
  h2mac=$(in_ns "$lab" h2 cat /sys/class/net/eth0/address)
  : >"$TMP/p1.rows"
  one() { # KIND -> appends "KIND out_fps cpu_ns_per_out_frame drops" to p1.rows
    local kind=$1 sent
    t0=$(tx_frames "$lab" sw1); j0=$(jiffies "$lab" sw1); d0=$(ring_drops "$lab" sw1)
    if [[ $kind == fwd ]]; then
      # The switch must know h2 (else the frames are flooded to all 4 ports).
      in_ns "$lab" h2 ping -c1 -W1 10.0.0.1 >/dev/null 2>&1
      t0=$(tx_frames "$lab" sw1); j0=$(jiffies "$lab" sw1); d0=$(ring_drops "$lab" sw1)
      in_ns "$lab" h1 "$BIN/prismd-blast" send --iface eth0 --dst "$h2mac" --size "$FAN_SIZE" --duration "${FAN_SECS}s" >"$TMP/p1.out" 2>&1
    else
      job=$((job + 1))
      in_ns "$lab" h1 timeout "$RUN_TIMEOUT" "$PRISMCTL" mcast blast --receivers h2,h3,h4,h5 --topology "$topo" --node h1 --job $job \
        --size "$FAN_SIZE" --duration "${FAN_SECS}s" >"$TMP/p1.out" 2>&1
    fi
    local rc=$?
    sleep 0.2 # let the switch drain what it queued
    t1=$(tx_frames "$lab" sw1); j1=$(jiffies "$lab" sw1); d1=$(ring_drops "$lab" sw1)
    if [[ $rc -ne 0 ]]; then echo "$kind failed: $(tail -2 "$TMP/p1.out")"; return 1; fi
    sent=$(sed -n 's/^sent \([0-9]*\) frames.*/\1/p' "$TMP/p1.out")
    awk -v k="$kind" -v n=$((t1 - t0)) -v d="$FAN_SECS" -v j=$((j1 - j0)) -v hz="$HZ" -v dr=$((d1 - d0)) -v s="${sent:-0}" -v r="$r" \
      'BEGIN{ printf "%s %.0f %.0f %d %.0f %d\n", k, n/d, (n > 0 ? j*1e9/hz/n : 0), dr, s/d, r }' >>"$TMP/p1.rows"
    tail -1 "$TMP/p1.rows" | awk '{printf "  %-5s out %9d frames/s  prismd CPU %6d ns/out frame  offered %9d frames/s  dropped at the switch %d\n", $1, $2, $3, $5, $4}'
  }
  for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 == 1 )); then order="fwd mcast"; else order="mcast fwd"; fi
    echo "round $r:"
    for a in $order; do one "$a"; done
  done
  lab_down "$f"
  local fo mo fc mc ro rc
  fo=$(awk '$1=="fwd"{print $2}' "$TMP/p1.rows" | mean); mo=$(awk '$1=="mcast"{print $2}' "$TMP/p1.rows" | mean)
  fc=$(awk '$1=="fwd"{print $3}' "$TMP/p1.rows" | mean); mc=$(awk '$1=="mcast"{print $3}' "$TMP/p1.rows" | mean)
  ro=$(pairs "$TMP/p1.rows" 2 mcast fwd | median); rc=$(pairs "$TMP/p1.rows" 3 fwd mcast | median)
  echo
  echo "per round, multicast/forwarding frames out: $(pairs "$TMP/p1.rows" 2 mcast fwd | tr '\n' ' ')"
  printf '%-34s %14s %14s %14s\n' "" bitmap_mcast forwarding "ratio(median)"
  printf '%-34s %14s %14s %14s\n' "frames/s out of the switch (mean)" "${mo:-n/a}" "${fo:-n/a}" "${ro:-n/a}"
  printf '%-34s %14s %14s %14s\n' "input frames/s handled (mean)" "$([[ -n $mo ]] && awk -v m="$mo" 'BEGIN{printf "%.0f", m/4}' || echo n/a)" "${fo:-n/a}" \
    "$([[ -n $ro ]] && awk -v r="$ro" 'BEGIN{printf "%.3f", r/4}' || echo n/a)"
  printf '%-34s %14s %14s %14s\n' "prismd CPU ns per output frame" "${mc:-n/a}" "${fc:-n/a}" "${rc:-n/a}"
  [[ -n $ro ]] && MEASURED=1
  echo "(out = prismd_port_transmit_frames_total delta on sw1 / run time; a multicast frame in makes 4 out, so 4.000 is the ceiling of the first ratio"
  echo " if replication cost nothing per copy, 1.000 if each copy cost as much as forwarding a frame; CPU ratio = forwarding ns / multicast ns)"
}

# ---------------------------------------------------------------- part 2
part2() {
  hdr "2. MoE: tokens/s, dispatch + combine merged in the switches vs K unicast copies summed at the source (spine-leaf, 4 sources)"
  local lab=${PREFIX}m$HEX f
  lab_up spine-leaf "$lab" || return 1; f=$LAB_FILE
  local topo=$STATE/$lab/topology.yaml job=800 r mode order
  echo "every host dispatches $MOE_TOKENS tokens (hidden $MOE_HIDDEN FP32, top-$MOE_TOPK of $((4 * MOE_EXPERTS)) experts, $MOE_EXPERTS per host) and serves its experts"
  : >"$TMP/p2.rows"
  one() { # MODE -> appends "MODE tokens_per_s redispatch_frames" to p2.rows
    local mode=$1 flag="" h pids=() rc=0
    [[ $mode == unicast ]] && flag=--unicast
    job=$((job + 1))
    if ! in_ns "$lab" h1 timeout 60 "$PRISMCTL" moe register --spec "$TMP/moe.$job.json" --topology "$topo" --node h1 --hosts h1,h2,h3,h4 \
      --experts-per-host "$MOE_EXPERTS" --topk "$MOE_TOPK" --hidden "$MOE_HIDDEN" --job $job >"$TMP/p2.reg" 2>&1; then
      echo "  $mode: registration failed: $(tail -1 "$TMP/p2.reg")"; return 1
    fi
    for h in h1 h2 h3 h4; do
      bg "$TMP/p2.$h" ip netns exec "$(ns "$lab" $h)" "$PRISMCTL" moe run --spec "$TMP/moe.$job.json" --topology "$topo" --node $h \
        --job $job --tokens "$MOE_TOKENS" --linger "$MOE_LINGER" --seed $job $flag
      pids+=("$BG")
    done
    for h in "${!pids[@]}"; do wait "${pids[$h]}" || rc=1; done
    if [[ $rc -ne 0 ]] || (( $(cat "$TMP"/p2.h? | grep -c 'verified against the unicast reference') != 4 )); then
      echo "  $mode failed:"; grep -h -E 'prismctl moe run|differ' "$TMP"/p2.h? | head -4; return 1
    fi
    # Aggregate rate: all tokens over the slowest host's dispatch-to-combine time.
    local tot=0 slow=0 rd=0 t
    for h in h1 h2 h3 h4; do
      t=$(sec "$(sed -n 's/.* combined in \([^ ]*\) .*/\1/p' "$TMP/p2.$h")")
      slow=$(awk -v a="$slow" -v b="$t" 'BEGIN{print (b > a ? b : a)}')
      tot=$((tot + MOE_TOKENS))
      rd=$((rd + $(sed -n 's/.*re-dispatch \([0-9]*\),.*/\1/p' "$TMP/p2.$h")))
    done
    awk -v m="$mode" -v n="$tot" -v s="$slow" -v rd="$rd" -v r="$r" 'BEGIN{printf "%s %.0f %d %.3f %d\n", m, (s > 0 ? n/s : 0), rd, s, r}' >>"$TMP/p2.rows"
    tail -1 "$TMP/p2.rows" | awk '{printf "  %-8s %7d tokens/s (%d tokens, slowest host %.3f s), re-dispatch frames %d\n", $1, $2, '"$tot"', $4, $3}'
    grep -h 'combined in' "$TMP"/p2.h? | sed 's/^/      /'
  }
  for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 == 1 )); then order="bitmap unicast"; else order="unicast bitmap"; fi
    echo "round $r:"
    for mode in $order; do one "$mode"; done
  done
  lab_down "$f"
  local b u rb
  b=$(awk '$1=="bitmap"{print $2}' "$TMP/p2.rows" | mean); u=$(awk '$1=="unicast"{print $2}' "$TMP/p2.rows" | mean)
  rb=$(pairs "$TMP/p2.rows" 2 bitmap unicast | median)
  echo
  echo "per round, bitmap/unicast tokens/s: $(pairs "$TMP/p2.rows" 2 bitmap unicast | tr '\n' ' ')"
  printf '%-24s %14s %14s %14s\n' "" bitmap_merged unicast_K "ratio(median)"
  printf '%-24s %14s %14s %14s\n' "tokens/s (4 sources)" "${b:-n/a}" "${u:-n/a}" "${rb:-n/a}"
  [[ -n $rb ]] && MEASURED=1
  echo "(tokens/s = all hosts' tokens / the slowest host's Dispatch-to-Combine time; outputs verified bit for bit against bitmap.ReferenceMoE in both modes)"
}

# ---------------------------------------------------------------- part 3
part3() {
  hdr "3. Reliable multicast of a ${MCAST_MB} MiB file h1 -> h2,h3,h4 (spine-leaf-jumbo, MTU 9000) vs TCP copies through the same switches"
  local lab=${PREFIX}j$HEX f
  lab_up spine-leaf-jumbo "$lab" || return 1; f=$LAB_FILE
  local topo=$STATE/$lab/topology.yaml job=900 r mode order src=$DATA/src.bin
  head -c $((MCAST_MB << 20)) /dev/urandom >"$src" || { echo "cannot write $src"; lab_down "$f"; return 1; }
  local tcpmode=parallel seqflag=""
  [[ $TCP_SEQ == 1 ]] && tcpmode=sequential seqflag=--sequential
  : >"$TMP/p3.rows"
  one() { # MODE -> appends "MODE seconds" to p3.rows
    local mode=$1 h pids=() rc=0 t
    rm -f "$DATA"/h?.bin
    if [[ $mode == mcast ]]; then
      job=$((job + 1))
      for h in h2 h3 h4; do
        bg "$TMP/p3.$h" ip netns exec "$(ns "$lab" $h)" "$PRISMCTL" mcast recv --out "$DATA/$h.bin" --topology "$topo" --node $h --job $job --timeout 10m
        pids+=("$BG")
      done
      sleep 0.5 # receivers open their sockets
      in_ns "$lab" h1 timeout "$RUN_TIMEOUT" "$PRISMCTL" mcast send --file "$src" --receivers h2,h3,h4 --topology "$topo" --node h1 \
        --job $job --mtu 9000 --timeout 10m >"$TMP/p3.send" 2>&1 || rc=1
      for h in "${!pids[@]}"; do wait "${pids[$h]}" || rc=1; done
      (( $(cat "$TMP"/p3.h? | grep -c 'verified') == 3 )) || rc=1
      t=$(sec "$(sed -n 's/^sent .* in \([^ ]*\) (.*/\1/p' "$TMP/p3.send")")
    else
      for h in h2 h3 h4; do
        bg "$TMP/p3.$h" ip netns exec "$(ns "$lab" $h)" "$PRISMCTL" tcpcopy recv --out "$DATA/$h.bin" --listen :7100
        pids+=("$BG")
      done
      sleep 0.3
      in_ns "$lab" h1 timeout "$RUN_TIMEOUT" "$PRISMCTL" tcpcopy send --file "$src" --to 10.0.0.2:7100,10.0.0.3:7100,10.0.0.4:7100 \
        $seqflag >"$TMP/p3.send" 2>&1 || rc=1
      for h in "${!pids[@]}"; do wait "${pids[$h]}" || rc=1; done
      (( $(grep -c 'SHA-256 verified' "$TMP/p3.send") == 3 )) || rc=1
      t=$(sec "$(sed -n 's/^sent .* in \([^ ]*\) (.*/\1/p' "$TMP/p3.send")")
    fi
    if [[ $rc -ne 0 || -z $t ]]; then
      echo "  $mode failed:"; tail -3 "$TMP/p3.send" | sed 's/^/    /'; grep -h -i 'error\|prismctl' "$TMP"/p3.h? | head -3 | sed 's/^/    /'; return 1
    fi
    echo "$mode $t $r" >>"$TMP/p3.rows"
    echo "  $mode: $(grep '^sent' "$TMP/p3.send")"
    [[ $mode == mcast ]] && grep -E '^windows|^ACK' "$TMP/p3.send" | sed 's/^/      /'
  }
  for r in $(seq 1 "$ROUNDS"); do
    if (( r % 2 == 1 )); then order="mcast tcp"; else order="tcp mcast"; fi
    echo "round $r:"
    for mode in $order; do one "$mode"; done
  done
  lab_down "$f"
  rm -f "$src" "$DATA"/h?.bin
  local m t rt
  m=$(awk '$1=="mcast"{print $2}' "$TMP/p3.rows" | meanf); t=$(awk '$1=="tcp"{print $2}' "$TMP/p3.rows" | meanf)
  rt=$(pairs "$TMP/p3.rows" 2 tcp mcast | median)
  echo
  echo "per round, tcp/mcast seconds: $(pairs "$TMP/p3.rows" 2 tcp mcast | tr '\n' ' ')"
  printf '%-30s %12s %12s %14s\n' "" bitmap_mcast "tcp_$tcpmode" "tcp/mcast(med)"
  printf '%-30s %12s %12s %14s\n' "seconds to deliver to all 3" "${m:-n/a}" "${t:-n/a}" "${rt:-n/a}"
  [[ -n $rt ]] && MEASURED=1
  echo "(sender-side time: file digest + transfer until every receiver has acknowledged everything (mcast) / returned the SHA-256 of"
  echo " what it received (tcp); ratio > 1 = multicast faster. Receivers write to ${DATA%/*}.)"
}

for p in $PARTS; do
  t0=$(date +%s)
  part$p || echo "part $p: FAILED (see above); continuing"
  echo "(part $p took $(( $(date +%s) - t0 )) s)"
done
echo
echo "bench-bitmap: total $(( $(date +%s) - T_START )) s"
[[ $MEASURED == 1 ]] || { echo "bench-bitmap: nothing could be measured"; exit 1; }
