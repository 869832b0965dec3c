#!/usr/bin/env bash
# prismd benchmark suite: every figure is a RATIO against a peer measured in
# the same run (machines here are noisy; absolute numbers mean little).
#   1. Go micro-benchmarks (-benchmem): validate vs copy, exact add vs float
#      add, engine absorb vs copy, replication vs copy.
#   2. Plain forwarding prismd vs Linux bridge (scripts/bench-forward.sh).
#   3. Single lab: DATA frames/s one prismd absorbs during ALLREDUCE and
#      REDUCE (FP32_ARRIVAL, KULISCH_FIXED), fed by two 'prismd-blast
#      contribute' ranks, vs the same node's forwarding frames/s (prismd-blast
#      send/recv). Issue #5 bar: >= 0.8x (FP32_ARRIVAL), >= 0.5x (KULISCH).
#   4. Spine-leaf, 4 ranks: bytes per link per direction during one ALLREDUCE
#      / vector bytes, vs ring allreduce's 2(N-1)/N; FP32_ARRIVAL and KULISCH
#      on gradient-like data, KULISCH on the mixed exactness-stress data, all
#      with prismd's default kulisch_partials: f64 (KULISCH_F64 partials, the
#      least CPU); and KULISCH on gradient-like data again in a second
#      spine-leaf lab whose switches set kulisch_partials: scaled
#      (KULISCH_SCALED partials, the fewest bytes; acc "kulisch-scaled").
#   5. OpenMPI MPI_Allreduce, 4 namespaced hosts on a Linux bridge (MTU 1500)
#      vs prismd on spine-leaf-jumbo (MTU 9000), 2, 1M and 16M FP32 (2: a small collective's latency),
#      the library's default (repeated shapes kept persistent), ordinary and persistent prismd collectives; both sum
#      small integers (MPI: (i + rank) % 1000; prismd: --data integral), and
#      prismd KULISCH also on gradient-like data (kulisch-gradient: what exact
#      sums of training gradients cost; MPI's time does not depend on data).
# A part that fails says why and the script goes on; exit 1 only if no part
# measured anything. Everything created (labs "b?XXXX", namespaces pl-b?XXXX-*,
# processes) is removed by name/PID on exit.
# Usage (root): scripts/bench.sh        (make bench installs the deps)
# env:
#   PRISMD_BIN=bin      binaries (prismd, prismctl, prismd-blast)
#   BENCH_PARTS="1 2 3 4 5"   which parts to run
#   BENCH_QUICK=1       smaller everything (~3 min): benchtime 200ms, forward
#                       DURATION=2 ROUNDS=1, smaller vectors, MPI 1M only
#   BENCH_TIME=1s       go test -benchtime
#   BENCH_AGG_SOURCE=blast    part 3's DATA source: blast (two 'prismd-blast
#                       contribute' ranks, as fast as the protocol allows, for
#                       BENCH_BLAST_SECS) or ranks (two 'prismctl allreduce' ranks
#                       through the host library, BENCH_AGG_ITERS iterations: its
#                       ~4 us of CPU per frame, not the switch, bounds that rate)
#   BENCH_CONTRIBUTE_ARGS="--rx-ring" flags for 'prismd-blast contribute' in part 3:
#                       by default the ranks read through the TPACKET_V3 ring,
#                       as the forwarding peer's receiver does (with recvmmsg
#                       every delivered frame wakes the rank, and the switch's
#                       sendmmsg pays for that wakeup); "" for recvmmsg. With the
#                       ring, contribute's --progress-lane auto reads PROGRESS on a
#                       recvmmsg lane in REDUCE's non-root rank, which receives
#                       nothing else, so its window's pacing does not wait for
#                       a ring block to fill (a rank receiving RESULT fills its
#                       blocks fast; a lane there cost the switch about a tenth
#                       of its CPU per DATA frame: see
#                       cmd/prismd-blast/contribute.go)
#   BENCH_AGG_COUNT=16777216  FP32 elements per rank and operation in part 3
#                       (default 4194304 with BENCH_AGG_SOURCE=ranks; QUICK: /4)
#   BENCH_AGG_WINDOW=1024  frames in flight per stream in part 3 (AM --window)
#   BENCH_AGG_RUNS="fp32:allreduce fp32:reduce kulisch:allreduce kulisch:reduce"
#                       part 3's aggregation runs (accumulator:collective), e.g.
#                       one of them alone while profiling it
#   BENCH_AGG_ROUNDS=4  part 3's rounds (2 with BENCH_PIN 0 or 1): each runs forwarding and every aggregation
#                       run once (odd rounds forwarding first, even rounds last); on a
#                       noisy machine more rounds give a steadier mean (each round's
#                       ratio is printed, so the spread shows)
#   BENCH_AGG_ITERS=3   allreduce iterations in part 3 (BENCH_AGG_SOURCE=ranks)
#   BENCH_BLAST_SECS=5  prismd-blast duration in part 3 (forwarding, contribute)
#   BENCH_PIN=both      part 3's CPU placement: both = rounds in pairs alternate the
#                       scheduler's ("free") and "pinned" (the switch on the first
#                       half of the cores, its traffic generators on the rest), each
#                       placement's ratios printed, the bar judged best against
#                       best; 0 = free only; 1 = pinned only (see below why)
#   BENCH_GEN_PROCS=1   GOMAXPROCS of part 3's prismd-blast processes (the forwarding
#                       peers and the contribute ranks alike; "" = Go's default, the
#                       machine's cores)
#   BENCH_TRAFFIC_COUNTS="65536 1048576 4194304"  vector sizes (elements), part 4
#   BENCH_TRAFFIC_CFGS="fp32:gradient kulisch:gradient kulisch:mixed kulisch-scaled:gradient"
#                       accumulator:data runs, part 4; an accumulator ending in -scaled
#                       runs in the second lab (switches on kulisch_partials: scaled)
#   BENCH_MPI_COUNTS="2 1048576 16777216"         part 5 sizes (FP32 elements; 2 shows a
#                       small collective's latency, which prismd's per-operation setup sets)
#   BENCH_MPI_REPS=5    timed repetitions (median) in part 5
#   BENCH_MPI_WARMUP=3  untimed repetitions before them (QUICK: 2, the fewest prismctl bench runs), MPI and prismd alike: a
#                       job's first collectives on fresh switches fault in their
#                       accumulator rings (one per operation in flight: released,
#                       running, prepared), which is not the steady state a
#                       training loop runs in
#   BENCH_RANK_TIMEOUT=300   seconds before a rank process is killed
#   BENCH_LAB_PREFIX=b  first letter(s) of part 5's lab names (<prefix>b/j<hex>),
#                       so concurrent runs can keep their namespaces apart
#   BENCH_MPI_ACCS="fp32 fp32-ordinary fp32-persistent kulisch kulisch-ordinary kulisch-persistent kulisch-gradient"
#                       prismd runs part 5 compares with MPI: accumulator alone for the library's
#                       default (repeated calls of a shape kept persistent from the second),
#                       -ordinary for every call through the AM (--ordinary), -persistent for an
#                       explicit persistent collective (set up once), -gradient for --data
#                       gradient instead of integral
#   (part 2 also honours DURATION, SIZES, ROUNDS: see scripts/bench-forward.sh)
set -uo pipefail
[[ $EUID -eq 0 ]] || { echo "bench: needs root (namespaces, AF_PACKET)"; exit 1; }
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${PRISMD_BIN:-$ROOT/bin}
QUICK=${BENCH_QUICK:-0}
PARTS=${BENCH_PARTS:-"1 2 3 4 5"}
P5_RUNS="fp32 fp32-ordinary fp32-persistent kulisch kulisch-ordinary kulisch-persistent kulisch-gradient"
AGG_SOURCE=${BENCH_AGG_SOURCE:-blast}
AGG_WINDOW=${BENCH_AGG_WINDOW:-1024}
AGG_ALL="fp32:allreduce fp32:reduce kulisch:allreduce kulisch:reduce" # every part 3 aggregation run
AGG_RUNS=${BENCH_AGG_RUNS:-$AGG_ALL}
AGG_ROUNDS=${BENCH_AGG_ROUNDS:-$([[ ${BENCH_PIN-both} == both ]] && echo 4 || echo 2)}
[[ $AGG_ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bench: BENCH_AGG_ROUNDS=$AGG_ROUNDS: give a whole number of rounds, 1 or more"; exit 2; }
for x in $AGG_RUNS; do
  [[ " $AGG_ALL " == *" $x "* ]] || { echo "bench: BENCH_AGG_RUNS: unknown run '$x' (use some of: $AGG_ALL)"; exit 2; }
done
# Part 3's traffic generators, senders and receivers of both sides, run on
# one P each: three busy processes (the switch and two peers) share the 2
# cores here, and a peer on two Ps woke its other thread for every hand-off
# between its reading and its sending goroutine (futex wakeups, a fifth of a
# REDUCE root's samples in context switches). Same lab, 3 interleaved
# rounds, default vs 1: REDUCE 682-698k vs 744-761k DATA frames/s,
# ALLREDUCE 511-531k vs 524-550k, forwarding 874-899k vs 853-978k frames/s.
# The lab gives its switches a share of the cores the same way
# (deploy.SwitchProcsFor).
# Part 3's CPU placement. Left to the scheduler on 2 cores ("free"), the
# ALLREDUCE's ranks wake on the switch's core (its sendmmsg delivers their
# RESULT and wakes them there) and wait in its run queue while the other
# core idles: /proc/PID/schedstat over 2 s of ALLREDUCE (session 30), ranks
# 0.40 s on CPU and 0.26-0.35 s runnable but waiting, the machine 16% idle,
# against 0.2% while forwarding. Pinned ("pinned": the switch on the first
# half of the cores, its traffic generators on the rest), that idle goes,
# but forwarding's sender and receiver then share one core that bounds
# their rate while the switch has CPU to spare (4 rounds each: forwarding
# 359k pinned against 388k free frames/s; ALLREDUCE 339k against 287k).
# Each placement favours one side, so by default (BENCH_PIN=both) part 3
# runs both, alternating in pairs of rounds, prints each placement's
# ratios, and judges the bar by each side at its best: the best
# placement's mean DATA rate over the best placement's mean forwarding
# rate. BENCH_PIN=0 runs free only, BENCH_PIN=1 pinned only.
PIN=${BENCH_PIN-both}
NCPU=$(nproc)
SW_CPUS="" GEN_CPUS="" ALL_CPUS="0-$((NCPU - 1))"
case $PIN in
  0 | 1 | both) ;;
  *) echo "bench: BENCH_PIN=$PIN: use both (default), 0 (scheduler's placement) or 1 (switch and generators on separate cores)"; exit 2 ;;
esac
if [[ $PIN != 0 ]] && (( NCPU >= 2 )); then
  cpus() { if (( $1 == $2 )); then echo "$1"; else echo "$1-$2"; fi; }
  SW_CPUS=$(cpus 0 $((NCPU / 2 - 1))) GEN_CPUS=$(cpus $((NCPU / 2)) $((NCPU - 1)))
elif [[ $PIN == 1 ]]; then
  echo "bench: BENCH_PIN=1: pinning needs 2 or more CPUs (this machine has $NCPU); use BENCH_PIN=0"; exit 2
else
  PIN=0 # one CPU: nothing to place
fi
GEN_PROCS=${BENCH_GEN_PROCS-1}
GEN_ENV=()   # env assignments for part 3's prismd-blast processes
[[ -n $GEN_PROCS ]] && GEN_ENV=("GOMAXPROCS=$GEN_PROCS")
GEN_PIN=()   # command prefix that places them (pinned rounds: taskset -c GEN_CPUS)
case $AGG_SOURCE in
  blast) agg_count=16777216 ;;
  ranks) agg_count=4194304 ;;
  *) echo "bench: BENCH_AGG_SOURCE=$AGG_SOURCE: use blast (prismd-blast contribute) or ranks (prismctl allreduce)"; exit 2 ;;
esac
if [[ $QUICK == 1 ]]; then
  BENCH_TIME=${BENCH_TIME:-200ms}
  AGG_COUNT=${BENCH_AGG_COUNT:-$((agg_count / 4))}; AGG_ITERS=${BENCH_AGG_ITERS:-2}; BLAST_SECS=${BENCH_BLAST_SECS:-2}
  TRAFFIC_COUNTS=${BENCH_TRAFFIC_COUNTS:-"65536 1048576"}
  MPI_COUNTS=${BENCH_MPI_COUNTS:-"1048576"}; MPI_REPS=${BENCH_MPI_REPS:-3}; MPI_WARMUP=${BENCH_MPI_WARMUP:-2}
  export DURATION=${DURATION:-2} ROUNDS=${ROUNDS:-1}
else
  BENCH_TIME=${BENCH_TIME:-1s}
  AGG_COUNT=${BENCH_AGG_COUNT:-$agg_count}; AGG_ITERS=${BENCH_AGG_ITERS:-3}; BLAST_SECS=${BENCH_BLAST_SECS:-5}
  TRAFFIC_COUNTS=${BENCH_TRAFFIC_COUNTS:-"65536 1048576 4194304"}
  MPI_COUNTS=${BENCH_MPI_COUNTS:-"2 1048576 16777216"}; MPI_REPS=${BENCH_MPI_REPS:-5}; MPI_WARMUP=${BENCH_MPI_WARMUP:-3}
fi
RANK_TIMEOUT=${BENCH_RANK_TIMEOUT:-300}
export PRISMD_BIN=$BIN
mkdir -p "$BIN"
[[ -x $BIN/prismd && -x $BIN/prismctl && -x $BIN/prismd-blast ]] ||
  go build -o "$BIN/" ./cmd/prismd ./cmd/prismctl ./cmd/prismd-blast || { echo "bench: build failed"; exit 1; }
PRISMCTL=$BIN/prismctl
HEX=$(printf '%04x' $((RANDOM % 65536)))
TMP=$(mktemp -d /tmp/prismd-bench.XXXXXX)
STATE=$TMP/state
mkdir -p "$STATE"
PIDS=()     # background processes this script started
LABS=()     # topology files of labs this script brought up
MEASURED=0
T_START=$(date +%s)

cleanup() {
  local p f
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for f in "${LABS[@]}"; do "$PRISMCTL" lab down -q --state-dir "$STATE" "$f" >/dev/null 2>&1; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hdr() { echo; echo "=============== $* ==============="; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.3f", a/b; else printf "n/a" }'; }

# lab_up TEMPLATE NAME -> brings up a copy of TEMPLATE named NAME; sets LAB_FILE.
lab_up() {
  local src=$1 name=$2
  LAB_FILE=$TMP/$2.yaml
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
metrics() { ip netns exec "$(ns "$1" "$2")" curl -s --max-time 5 http://127.0.0.1:9100/metrics; }

# am_start LAB [AM FLAGS] -> starts 'prismctl am' in h1, waits until it answers; sets AM_PID, AM_URL.
am_start() {
  local lab=$1 addr=10.0.0.1:7000 i
  shift
  ip netns exec "$(ns "$lab" h1)" "$PRISMCTL" am --topology "$STATE/$lab/topology.yaml" --listen $addr --iface eth0 "$@" \
    >"$TMP/$lab.am.log" 2>&1 &
  AM_PID=$!; PIDS+=("$AM_PID"); AM_URL=http://$addr
  for i in $(seq 1 200); do
    ip netns exec "$(ns "$lab" h2)" curl -s --max-time 1 -o /dev/null "$AM_URL/v1/ops" && return 0
    kill -0 "$AM_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "prismctl am did not come up:"; tail -5 "$TMP/$lab.am.log"; return 1
}
am_stop() { kill "$AM_PID" 2>/dev/null; wait "$AM_PID" 2>/dev/null; }

# ranks LAB N JOB OUTPREFIX CMD ARGS... -> runs one rank per host h1..hN; returns non-zero if any failed.
placement() {
  case $PIN in
    both) echo "rounds in pairs free (the scheduler's placement) and pinned (sw1 on CPUs $SW_CPUS, generators and ranks on $GEN_CPUS); the verdict takes each side at its best placement" ;;
    1) echo "pinned: sw1 on CPUs $SW_CPUS, generators and ranks on $GEN_CPUS" ;;
    *) echo "free: the scheduler's placement" ;;
  esac
}
RANK_PIN=() # command prefix for ranks(): part 3 places them (BENCH_PIN)
ranks() {
  local lab=$1 n=$2 job=$3 out=$4 i rc=0 pids=()
  shift 4
  for i in $(seq 0 $((n - 1))); do
    "${RANK_PIN[@]}" timeout "$RANK_TIMEOUT" ip netns exec "$(ns "$lab" h$((i + 1)))" "$PRISMCTL" "$@" --coordinator "$AM_URL" \
      --rank $i --size "$n" --iface eth0 --node h$((i + 1)) --job "$job" >"$out.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { rc=1; echo "rank $i failed: $(grep -v "^#" "$out.$i" | tail -1 | cut -c1-400)"; }; done
  return $rc
}

# ---------------------------------------------------------------- part 1
part1() {
  hdr "1. Go micro-benchmarks (-benchmem, benchtime $BENCH_TIME): ratios within one run"
  local out=$TMP/gobench.txt
  go test -run '^$' -bench . -benchmem -benchtime "$BENCH_TIME" ./parser ./kulisch ./bitmapfwd ./engine ./engine/bitmap ./stream ./dataplane \
    >"$out" 2>&1 || echo "(go test returned non-zero; using whatever benchmarks ran)"
  # name(without -GOMAXPROCS) ns/op B/op allocs/op
  awk '/^pkg: /{pkg=$2; sub(/.*prismd\/prismd\//,"",pkg)}
       /^Benchmark/{n=$1; sub(/-[0-9]+$/,"",n); ns="";bo="";al="";
         for(i=2;i<=NF;i++){ if($i=="ns/op")ns=$(i-1); if($i=="B/op")bo=$(i-1); if($i=="allocs/op")al=$(i-1)}
         print pkg, n, ns, bo, al}' "$out" >"$TMP/gobench.tab"
  if [[ ! -s $TMP/gobench.tab ]]; then echo "no benchmark results:"; tail -20 "$out"; return 1; fi
  echo "-- all benchmarks"
  printf '%-14s %-48s %14s %8s %9s\n' pkg benchmark ns/op B/op allocs/op
  awk '{printf "%-14s %-48s %14s %8s %9s\n", $1, $2, $3, $4, $5}' "$TMP/gobench.tab"
  grep -E '^(FAIL|---)' "$out" | head -5
  echo
  echo "-- pairs (ratio = subject ns/op / baseline ns/op; same go test run)"
  printf '%-34s %-30s %12s %12s %8s\n' subject baseline subj_ns base_ns ratio
  local pair s b sv bv
  for pair in \
    BenchmarkValidate/Decode1500FP32:BenchmarkValidate/Copy1500 \
    BenchmarkValidate/Decode1500Kulisch280:BenchmarkValidate/Copy1500 \
    BenchmarkValidate/Build1500FP32:BenchmarkValidate/Copy1500 \
    BenchmarkAddFP32:BenchmarkAddFP32Plain \
    BenchmarkAddFP32Arrival:BenchmarkAddFP32Plain \
    BenchmarkAddFP32Lane:BenchmarkAddFP32Plain \
    BenchmarkAbsorbFP32Arrival:BenchmarkCopyFrame \
    BenchmarkAbsorbKulischFixed:BenchmarkCopyFrame \
    BenchmarkReplicate4:BenchmarkPlainCopy4 \
    BenchmarkReplicate4Auth:BenchmarkPlainCopy4 \
    BenchmarkAggregate2:BenchmarkPlainCopy4; do
    s=${pair%%:*} b=${pair##*:}
    sv=$(awk -v n="$s" '$2==n{print $3; exit}' "$TMP/gobench.tab")
    bv=$(awk -v n="$b" '$2==n{print $3; exit}' "$TMP/gobench.tab")
    printf '%-34s %-30s %12s %12s %8s\n' "${s#Benchmark}" "${b#Benchmark}" "${sv:-missing}" "${bv:-missing}" \
      "$([[ -n $sv && -n $bv ]] && ratio "$sv" "$bv" || echo n/a)"
  done
  MEASURED=1
  echo
  echo "-- PRISMD_RATIO=1 go test -run Speed -v ./kulisch/"
  PRISMD_RATIO=1 go test -count=1 -run Speed -v ./kulisch/ 2>&1 | grep -vE '^(=== RUN|ok |PASS$)' | head -30
}

# ---------------------------------------------------------------- part 2
part2() {
  hdr "2. Plain forwarding: prismd vs Linux bridge (scripts/bench-forward.sh, DURATION=${DURATION:-5} ROUNDS=${ROUNDS:-3})"
  [[ -x scripts/bench-forward.sh ]] || { echo "scripts/bench-forward.sh missing"; return 1; }
  scripts/bench-forward.sh 2>&1 | tee "$TMP/forward.txt"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] && grep -q '^median' "$TMP/forward.txt" && MEASURED=1
  [[ $rc -eq 0 ]] || echo "bench-forward.sh exited $rc"
}

# ---------------------------------------------------------------- part 3
data_frames() { metrics "$1" "$2" | awk '/^prismd_frames_total\{/ && /class="data"/{s+=$2} END{printf "%.0f\n", s}'; }

part3() {
  hdr "3. Single lab: DATA frames/s absorbed while reducing vs plain forwarding frames/s, same node, same run (DATA from: $AGG_SOURCE)"
  local lab=bs$HEX f
  lab_up single "$lab" || return 1; f=$LAB_FILE
  # A window of AGG_WINDOW frames per stream: at the AM's default of 64 a
  # contributor waits for PROGRESS every 64 frames, and that round trip
  # through two processes on 2 cores, not the switch's work, sets the rate.
  # A REDUCE's root also takes every RESULT, and at 256 its loop still set
  # the rate: 2 runs each, 256 vs 1024, REDUCE FP32 0.676-0.706 vs
  # 0.794-0.802 of forwarding (KULISCH 0.620-0.626 vs 0.715-0.743),
  # ALLREDUCE, where the switch's CPU is the bound, the same (0.615-0.627
  # vs 0.596-0.610). One lab, one switch, no tree: the AM's default stays
  # 64 (control/am: deep windows burst on spurious timeouts in trees).
  am_start "$lab" --window "$AGG_WINDOW" || { lab_down "$f"; return 1; }
  [[ -n $SW_CPUS ]] && echo "(placement, BENCH_PIN=$PIN: pinned = sw1 on CPUs $SW_CPUS, its traffic generators and ranks on CPUs $GEN_CPUS; free = the scheduler's)"
  # place free|pinned: sw1's affinity, and the generators' prefix (GEN_PIN;
  # RANK_PIN for ranks(), BENCH_AGG_SOURCE=ranks).
  local -a RANK_PIN=()
  place() {
    local cpus=$ALL_CPUS
    GEN_PIN=() RANK_PIN=()
    if [[ $1 == pinned ]]; then cpus=$SW_CPUS GEN_PIN=(taskset -c "$GEN_CPUS") RANK_PIN=("${GEN_PIN[@]}"); fi
    taskset -a -p -c "$cpus" "$(cat "$STATE/$lab/sw1.pid")" >/dev/null ||
      { echo "bench: cannot set sw1's CPUs to $cpus (BENCH_PIN=0 runs without)" >&2; return 1; }
  }
  local h2mac blast_size job=10
  h2mac=$(ip netns exec "$(ns "$lab" h2)" cat /sys/class/net/eth0/address)
  blast_size=1500
  # Forwarding peer: prismd-blast h1 -> h2 through sw1 for BLAST_SECS, full-size frames (DATA frames at MTU 1500 are full size).
  HZ=$(getconf CLK_TCK)
  # sw_jiffies -> "USER SYS BUSY": sw1's user and system jiffies, and the
  # whole machine's busy jiffies (every CPU, idle and iowait left out): the
  # ranks or blast peers share these cores, so what the machine spends per
  # frame, not only sw1, sets the rate.
  sw_jiffies() {
    local us; us=$(awk '{print $14, $15}' /proc/"$(cat "$STATE/$lab/sw1.pid")"/stat 2>/dev/null) || us="0 0"
    echo "$us $(awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat)"
  }
  # cpu_ns "J0" "J1" FRAMES -> "TOTAL USER SYS BUSY" ns per frame (sw1 user+sys, user, sys; machine busy)
  cpu_ns() {
    awk -v a="$1" -v b="$2" -v hz="$HZ" -v n="$3" 'BEGIN{split(a, x); split(b, y)
      if (n <= 0) { print "0 0 0 0"; exit }
      u = (y[1]-x[1])*1e9/hz/n; s = (y[2]-x[2])*1e9/hz/n; m = (y[3]-x[3])*1e9/hz/n
      printf "%.0f %.0f %.0f %.0f\n", u+s, u, s, m }'
  }
  fwd() {
    env "${GEN_ENV[@]}" "${GEN_PIN[@]}" ip netns exec "$(ns "$lab" h2)" "$BIN/prismd-blast" recv --iface eth0 --duration $((BLAST_SECS + 1))s >"$TMP/p3.recv" 2>&1 &
    local rp=$!; PIDS+=("$rp"); sleep 0.3
    local j0 j1 n; j0=$(sw_jiffies)
    env "${GEN_ENV[@]}" "${GEN_PIN[@]}" ip netns exec "$(ns "$lab" h1)" "$BIN/prismd-blast" send --iface eth0 --dst "$h2mac" --size $blast_size --duration ${BLAST_SECS}s >"$TMP/p3.send" 2>&1
    wait $rp
    j1=$(sw_jiffies)
    n=$(awk '{print $2 + 0}' "$TMP/p3.recv")
    echo "$(awk -v d="$BLAST_SECS" -v n="${n:-0}" 'BEGIN{printf "%.0f", n/d}') $(cpu_ns "$j0" "$j1" "${n:-0}")"
  }
  # agg_blast ACC COLL JOB -> "DATA_FRAMES SECONDS CPU_NS": two 'prismd-blast contribute' ranks (h1 rank 0, h2 rank 1;
  # REDUCE to rank 0) back to back for BLAST_SECS. DATA_FRAMES is sw1's prismd_frames_total{class="data"} delta,
  # SECONDS the mean of the ranks' data-phase time (grant to last frame, summed over their operations).
  agg_blast() {
    local acc=$1 coll=$2 job=$3 d0 d1 j0 j1 i t rc=0 pids=() out=$TMP/p3.$1.$2
    d0=$(data_frames "$lab" sw1); j0=$(sw_jiffies)
    for i in 0 1; do
      env "${GEN_ENV[@]}" "${GEN_PIN[@]}" timeout "$RANK_TIMEOUT" ip netns exec "$(ns "$lab" h$((i + 1)))" "$BIN/prismd-blast" contribute --coordinator "$AM_URL" \
        --rank $i --size 2 --job "$job" --node h$((i + 1)) --iface eth0 --coll "$coll" --root 0 --acc "$acc" \
        --count "$AGG_COUNT" --duration "${BLAST_SECS}s" ${BENCH_CONTRIBUTE_ARGS---rx-ring} >"$out.$i" 2>&1 &
      pids+=($!)
    done
    for i in 0 1; do wait "${pids[$i]}" || { rc=1; echo "rank $i failed: $(grep -v '^contribute ' "$out.$i" | tail -1 | cut -c1-600)" >&2; }; done
    d1=$(data_frames "$lab" sw1); j1=$(sw_jiffies)
    (( rc == 0 )) || return 1
    t=$(sed -n 's/^contribute .* seconds=\([0-9.]*\) .*verified=yes.*/\1/p' "$out".[01] | awk '{s += $1; n++} END{if (n == 2) printf "%.6f", s / 2}')
    [[ -n $t ]] || { echo "no verified summary line from both ranks: $(cat "$out".[01])" >&2; return 1; }
    echo "$((d1 - d0)) $t $(cpu_ns "$j0" "$j1" $((d1 - d0)))"
  }
  # agg_ranks ACC COLL JOB -> the same through the host library: two 'prismctl allreduce' ranks, AGG_ITERS iterations;
  # SECONDS is the ranks' transfer time (grant to done) summed over iterations, mean of the 2 ranks.
  agg_ranks() {
    local acc=$1 coll=$2 job=$3 d0 d1 j0 j1 t root=() out=$TMP/p3.$1.$2
    [[ $coll == reduce ]] && root=(--root 0)
    d0=$(data_frames "$lab" sw1); j0=$(sw_jiffies)
    ranks "$lab" 2 "$job" "$out" allreduce --count "$AGG_COUNT" --acc "$acc" --iters "$AGG_ITERS" "${root[@]}" >&2 || return 1
    d1=$(data_frames "$lab" sw1); j1=$(sw_jiffies)
    t=$(cat "$out".[01] | sed -n 's/.*transfer \([^)]*\)).*/\1/p' | awk '
      function sec(s) { if (s ~ /ms$/) return substr(s,1,length(s)-2)/1e3; if (s ~ /µs$|us$/) return substr(s,1,length(s)-2)/1e6;
        if (s ~ /m[0-9.]+s$/) { split(s,a,"m"); return a[1]*60 + substr(a[2],1,length(a[2])-1) } return substr(s,1,length(s)-1)+0 }
      { tot += sec($1) } END { printf "%.6f\n", tot / 2 }')
    echo "$((d1 - d0)) $t $(cpu_ns "$j0" "$j1" $((d1 - d0)))"
  }
  # Interleave so drift hits both sides alike: odd rounds fwd then every aggregation, even rounds the
  # aggregations in reverse then fwd.
  local runs=() order=() rows=() r i x a c fw res n t cpu fps pl
  read -r -a runs <<<"$AGG_RUNS"
  for ((r = 1; r <= AGG_ROUNDS; r++)); do
    # Placement by pairs of rounds (free, free, pinned, pinned, ...), so
    # each placement sees forwarding both first and last.
    case $PIN in
      0) pl=free ;;
      1) pl=pinned ;;
      both) if (( (r - 1) / 2 % 2 == 0 )); then pl=free; else pl=pinned; fi ;;
    esac
    place "$pl" || { am_stop; lab_down "$f"; return 1; }
    if (( r % 2 == 1 )); then order=(fwd "${runs[@]}")
    else order=(); for ((i = ${#runs[@]} - 1; i >= 0; i--)); do order+=("${runs[$i]}"); done; order+=(fwd); fi
    for x in "${order[@]}"; do
      if [[ $x == fwd ]]; then
        fw=$(fwd); rows+=("fwd - $fw $r $pl")
        read -r fps cpu <<<"$fw"
        echo "round $r ($pl) forward: $fps fps, ns/frame: prismd CPU (total user sys) and machine busy $cpu (prismd-blast ${blast_size}B, ${BLAST_SECS}s)"
        continue
      fi
      a=${x%%:*} c=${x##*:} job=$((job + 1))
      if res=$(agg_"$AGG_SOURCE" "$a" "$c" $job); then
        read -r n t cpu <<<"$res"
        fps=$(awk -v n="$n" -v t="$t" 'BEGIN{ if (t > 0) printf "%.0f", n/t; else print 0 }')
        rows+=("$a $c $fps $cpu $r $pl")
        echo "round $r ($pl) $a $c: $n DATA frames absorbed in $t s of data phase = $fps fps, ns/frame: prismd CPU (total user sys) and machine busy $cpu (whole run incl. setup)"
      else echo "round $r ($pl) $a $c: failed"; fi
    done
  done
  am_stop; lab_down "$f"
  printf '%s\n' "${rows[@]}" >"$TMP/p3.rows"
  local places=() q bar v f best
  for pl in free pinned; do grep -q " $pl\$" "$TMP/p3.rows" && places+=("$pl"); done
  # mean of field F over the rows of A C in placement P ("" = every placement)
  col() { awk -v a="$1" -v c="$2" -v f="$3" -v p="$4" '$1==a && $2==c && (p=="" || $NF==p){s+=$f;n++} END{if(n) printf "%.0f", s/n}' "$TMP/p3.rows"; }
  echo
  # rounds: each round's ratio against that round's forwarding run, so the
  # spread shows how much of a verdict is the machine's noise.
  printf '%-14s %-10s %-7s %12s %12s %8s %13s\n' accumulator collective place data_fps fwd_fps ratio rounds
  for x in "${runs[@]}"; do
    a=${x%%:*} c=${x##*:}
    local name=FP32_ARRIVAL; [[ $a == kulisch ]] && name=KULISCH_FIXED
    for pl in "${places[@]}"; do
      v=$(col "$a" "$c" 3 "$pl") f=$(col fwd - 3 "$pl")
      local spread
      spread=$(awk -v a="$a" -v c="$c" -v p="$pl" -v rounds="$AGG_ROUNDS" '$NF!=p{next} $1=="fwd"{f[$(NF-1)]=$3} $1==a && $2==c{d[$(NF-1)]=$3}
        END{s=""; for (r = 1; r <= rounds; r++) if ((r in f) && (r in d) && f[r] > 0) s = s (s == "" ? "" : "/") sprintf("%.3f", d[r]/f[r]); print (s == "" ? "-" : s)}' "$TMP/p3.rows")
      printf '%-14s %-10s %-7s %12s %12s %8s %13s\n' $name "$c" "$pl" "${v:-n/a}" "${f:-n/a}" \
        "$([[ -n $v && -n $f && $f -gt 0 ]] && ratio "$v" "$f" || echo n/a)" "$spread"
    done
  done
  echo
  # The verdict: each side at the placement it does best in.
  printf '%-14s %-10s %20s %20s %8s %6s %s\n' accumulator collective "data_fps (best)" "fwd_fps (best)" ratio bar verdict
  local fbest fpl
  fbest=0 fpl=-
  for pl in "${places[@]}"; do f=$(col fwd - 3 "$pl"); [[ -n $f ]] && (( f > fbest )) && fbest=$f fpl=$pl; done
  for x in "${runs[@]}"; do
    a=${x%%:*} c=${x##*:}
    local name=FP32_ARRIVAL; [[ $a == kulisch ]] && name=KULISCH_FIXED
    bar=0.8; [[ $a == kulisch ]] && bar=0.5
    local bpl=-
    best=0
    for pl in "${places[@]}"; do v=$(col "$a" "$c" 3 "$pl"); [[ -n $v ]] && (( v > best )) && best=$v bpl=$pl; done
    if (( best == 0 || fbest == 0 )); then
      printf '%-14s %-10s %20s %20s %8s %6s %s\n' $name "$c" n/a n/a n/a $bar "not measured"; continue
    fi
    q=$(ratio "$best" "$fbest")
    printf '%-14s %-10s %20s %20s %8s %6s %s\n' $name "$c" "$best ($bpl)" "$fbest ($fpl)" "$q" "$bar" \
      "$(awk -v q="$q" -v b=$bar 'BEGIN{print (q >= b ? "PASS" : "BELOW BAR")}')"
    MEASURED=1
  done
  echo
  printf '%-14s %-10s %-7s %18s %17s %17s %24s %22s %14s\n' accumulator collective place cpu_ns/data_frame cpu_ns/fwd_frame fwd_cpu/data_cpu \
    "user+sys/data_frame" "user+sys/fwd_frame" machine_ratio
  local fcpu fu fs fm du ds dm
  for pl in "${places[@]}"; do
    fcpu=$(col fwd - 4 "$pl") fu=$(col fwd - 5 "$pl") fs=$(col fwd - 6 "$pl") fm=$(col fwd - 7 "$pl")
    for x in "${runs[@]}"; do
      a=${x%%:*} c=${x##*:}
      v=$(col "$a" "$c" 4 "$pl") du=$(col "$a" "$c" 5 "$pl") ds=$(col "$a" "$c" 6 "$pl") dm=$(col "$a" "$c" 7 "$pl")
      printf '%-14s %-10s %-7s %18s %17s %17s %24s %22s %14s\n' $a "$c" "$pl" "${v:-n/a}" "${fcpu:-n/a}" \
        "$([[ -n $v && -n $fcpu ]] && ratio "$fcpu" "$v" || echo n/a)" "${du:-?}+${ds:-?}" "${fu:-?}+${fs:-?}" \
        "$([[ -n $dm && -n $fm && $dm -gt 0 ]] && ratio "$fm" "$dm" || echo n/a)"
    done
  done
  echo "(CPU ratio = prismd's own cost per frame: the fraction of its forwarding rate it could absorb if fed and CPU-bound;"
  echo " user+sys splits it: a kernel cost per frame close to forwarding's says the extra is the engine's user-space work;"
  echo " machine_ratio = the whole machine's busy CPU per forwarded frame / per DATA frame, prismd plus its ranks or blast"
  echo " peers on the same cores: the rate ratio a CPU-bound machine would show)"
  if [[ $AGG_SOURCE == blast ]]; then
    echo "(data_fps = prismd_frames_total{class=\"data\"} delta on sw1 / mean data-phase time of the 2 'prismd-blast contribute' ranks," \
      "operations of $AGG_COUNT FP32 back to back for ${BLAST_SECS}s; REDUCE to rank 0; fwd_fps = mean of the placement's blast runs received in h2;" \
      "every prismd-blast at GOMAXPROCS=${GEN_PROCS:-default}; $(placement))"
  else
    echo "(data_fps = prismd_frames_total{class=\"data\"} delta on sw1 / mean transfer time of the 2 'prismctl allreduce' ranks" \
      "summed over $AGG_ITERS iterations of $AGG_COUNT FP32: bounded by the host library's send rate; fwd_fps = mean of the placement's blast runs received in h2; $(placement))"
  fi
}

# ---------------------------------------------------------------- part 4
port_bytes() { # LAB SWITCH -> lines "SWITCH PORT rx tx"
  metrics "$1" "$2" | awk -v sw="$2" '
    /^prismd_port_(receive|transmit)_bytes_total\{/ { match($0, /port="[^"]*"/); p = substr($0, RSTART+6, RLENGTH-7)
      if ($0 ~ /receive/) rx[p] += $2; else tx[p] += $2; seen[p] = 1 }
    END { for (p in seen) printf "%s %s %.0f %.0f\n", sw, p, rx[p], tx[p] }' | sort
}
part4() {
  hdr "4. Traffic per link per direction, 4 ranks, spine-leaf (MTU 1500), one ALLREDUCE per accumulator and data"
  local cfgs=${BENCH_TRAFFIC_CFGS:-fp32:gradient kulisch:gradient kulisch:mixed kulisch-scaled:gradient}
  local job=40 cfg rc=0 dflt=() scaled=() busiest=()
  for cfg in $cfgs; do
    if [[ ${cfg%%:*} == *-scaled ]]; then scaled+=("$cfg"); else dflt+=("$cfg"); fi
  done
  # FP32_ARRIVAL partials are FP32 (4 B a value); exact KULISCH partials are
  # as wide as the sums need: narrow for gradient-like data, wide for the
  # "mixed" stress data (subnormals to 1e30 in one vector). How a switch
  # encodes them for its parent is its kulisch_partials: f64 (prismd's
  # default, KULISCH_F64 where binary64 holds a frame's values) in the first
  # lab, scaled (KULISCH_SCALED only) in the second.
  if (( ${#dflt[@]} )); then p4_lab spine-leaf "bl$HEX" "${dflt[@]}" || rc=1; fi
  if (( ${#scaled[@]} )); then
    local tpl=$TMP/spine-leaf-scaled.yaml n
    sed 's/{kind: prismd}/{kind: prismd, kulisch_partials: scaled}/' deploy/lab/spine-leaf.yaml >"$tpl"
    n=$(grep -c 'kind: prismd, kulisch_partials: scaled}' "$tpl")
    if (( n != 3 )); then
      echo "spine-leaf-scaled: set kulisch_partials on $n of 3 switches (deploy/lab/spine-leaf.yaml changed?); skipping ${scaled[*]}"; rc=1
    else p4_lab "$tpl" "bk$HEX" "${scaled[@]}" || rc=1; fi
  fi
  echo "(into_switch = prismd_port_receive_bytes_total delta on that switch port, out_of_switch = transmit delta; Ethernet headers included; AM control traffic included)"
  echo
  echo "busiest link, one direction, as a multiple of the vector (bar: 1.0 = the vector once per direction; a ring allreduce: 1.500)"
  echo "(kulisch: switches on kulisch_partials f64, prismd's default; kulisch-scaled: on scaled, the same ALLREDUCE in a second lab)"
  printf '%-14s %-9s %9s %9s\n' acc data elements busiest
  (( ${#busiest[@]} )) && printf '%s\n' "${busiest[@]}"
  return $rc
}
# p4_lab TEMPLATE LAB ACC:DATA... -> brings up LAB from TEMPLATE, runs one ALLREDUCE per ACC:DATA and
# size (ACC's -scaled suffix only labels the lab's kulisch_partials), appends to part4's busiest, takes it down.
p4_lab() {
  local tpl=$1 lab=$2 f c sw vb cfg acc data kp
  shift 2
  lab_up "$tpl" "$lab" || return 1; f=$LAB_FILE
  kp=$(sed -n 's/^kulisch_partials: //p' "$STATE/$lab/l1.yaml" 2>/dev/null)
  [[ -n $kp ]] || kp="f64 (not set: the default)"
  echo "lab $lab: switches on kulisch_partials: $kp"
  am_start "$lab" || { lab_down "$f"; return 1; }
  # link names: switch:port -> what is on the other side
  awk '/endpoints/ { gsub(/[\[\]",]/, " "); print $3, $4 }' "$f" >"$TMP/p4.links"
  for cfg in "$@"; do
    acc=${cfg%%:*} data=${cfg##*:}
    for c in $TRAFFIC_COUNTS; do
      vb=$((c * 4))
      for sw in s1 l1 l2; do port_bytes "$lab" $sw; done >"$TMP/p4.before"
      if ! ranks "$lab" 4 $((job++)) "$TMP/p4.$c" allreduce --count "$c" --acc "${acc%-scaled}" --data "$data"; then
        echo "count $c ($acc, $data): allreduce failed"; continue
      fi
      for sw in s1 l1 l2; do port_bytes "$lab" $sw; done >"$TMP/p4.after"
      echo
      echo "-- $acc, $data data -- rank 0: $(grep -m1 '^rank 0' "$TMP/p4.$c.0")"
      echo "-- vector $c FP32 = $vb B per rank; ring allreduce moves 2(N-1)/N = 1.500 x vector per rank link per direction"
      printf '%-22s %14s %14s %9s %9s\n' "link (switch:port<->peer)" "into_switch_B" "out_of_switch_B" "in/vec" "out/vec"
      join <(awk '{print $1":"$2, $3, $4}' "$TMP/p4.before" | sort) <(awk '{print $1":"$2, $3, $4}' "$TMP/p4.after" | sort) |
        while read -r key r0 t0 r1 t1; do
          local peer; peer=$(awk -v k="$key" '$1==k{print $2} $2==k{print $1}' "$TMP/p4.links")
          awk -v k="$key" -v p="$peer" -v r=$((r1 - r0)) -v t=$((t1 - t0)) -v v=$vb \
            'BEGIN{printf "%-22s %14d %14d %9.3f %9.3f\n", k"<->"p, r, t, r/v, t/v}'
        done | tee "$TMP/p4.table"
      busiest+=("$(printf '%-14s %-9s %9s %9.3f' "$acc" "$data" "$c" "$(awk 'BEGIN{m=0} {if ($4>m) m=$4; if ($5>m) m=$5} END{print m}' "$TMP/p4.table")")")
      MEASURED=1
    done
  done
  am_stop; lab_down "$f"
}

# ---------------------------------------------------------------- part 5
part5() {
  hdr "5. MPI_Allreduce (OpenMPI, Linux bridge, MTU 1500) vs prismd ALLREDUCE (spine-leaf-jumbo, MTU 9000), 4 ranks"
  local c rows=()
  declare -A mpi_ms prism_ms mpi_cpu
  local hz; hz=$(getconf CLK_TCK)
  # --- OpenMPI on a bridge
  if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
    echo "OpenMPI not installed (make bench-deps installs openmpi-bin libopenmpi-dev)"
  elif ! mpicc -O2 -o "$TMP/mpi_allreduce" scripts/bench/mpi_allreduce.c 2>"$TMP/mpicc.err"; then
    echo "mpicc failed:"; tail -5 "$TMP/mpicc.err"
  else
    local lab=${BENCH_LAB_PREFIX:-b}b$HEX f
    if lab_up scripts/bench/bridge-4.yaml "$lab"; then
      f=$LAB_FILE
      printf '10.0.0.%d slots=1\n' 1 2 3 4 >"$TMP/hostfile"
      export BENCH_MPI_LAB=$lab
      for c in $MPI_COUNTS; do
        # OpenMPI's launcher now and then fails to wire up its daemons
        # ("internal programming error ... routed=direct", seen right after
        # the previous size's run); one more try, said so, before n/a.
        local try
        for try in 1 2; do
          timeout "$RANK_TIMEOUT" ip netns exec "$(ns "$lab" h1)" mpirun --allow-run-as-root --oversubscribe -np 4 \
            --hostfile "$TMP/hostfile" --mca plm_rsh_agent "$ROOT/scripts/bench/mpi-agent.sh" \
            --mca mpi_yield_when_idle 1 --mca routed direct --mca btl tcp,self --mca btl_tcp_if_include 10.0.0.0/24 \
            --mca oob_tcp_if_include 10.0.0.0/24 "$TMP/mpi_allreduce" "$c" "$MPI_REPS" "$MPI_WARMUP" >"$TMP/mpi.$c" 2>&1
          grep -q 'median_ms=' "$TMP/mpi.$c" && break
          (( try == 1 )) && { echo "MPI $c FP32: mpirun failed once (its last lines: $(tail -3 "$TMP/mpi.$c" | tr '\n' ' ' | cut -c1-200)); trying again"; sleep 1; }
        done
        local ms; ms=$(sed -n 's/.*median_ms=\([0-9.]*\).*/\1/p' "$TMP/mpi.$c")
        mpi_cpu[$c]=$(sed -n 's/.*cpu_ms=\([0-9.]*\).*/\1/p' "$TMP/mpi.$c")
        if [[ -n $ms ]]; then mpi_ms[$c]=$ms; echo "MPI  $c FP32: $(grep mpi_allreduce "$TMP/mpi.$c")"
        else echo "MPI $c FP32 failed:"; tail -8 "$TMP/mpi.$c"; fi
      done
      lab_down "$f"
    fi
  fi
  # --- prismd on spine-leaf-jumbo
  local lab=${BENCH_LAB_PREFIX:-b}j$HEX f job=60 acc
  # p5_jiffies -> CPU jiffies (user + system) of the three prismd so far.
  p5_jiffies() {
    local s t=0 j
    for s in s1 l1 l2; do
      j=$(awk '{print $14+$15}' "/proc/$(cat "$STATE/$lab/$s.pid" 2>/dev/null)/stat" 2>/dev/null) || j=0
      t=$((t + ${j:-0}))
    done
    echo $t
  }
  f=
  if lab_up spine-leaf-jumbo "$lab" && f=$LAB_FILE && am_start "$lab"; then
    local run pers data
    for run in ${BENCH_MPI_ACCS:-$P5_RUNS}; do
      acc=${run%-persistent} acc=${acc%-ordinary} acc=${acc%-gradient} pers=() data=integral
      [[ $run == *-persistent ]] && pers=(--persistent)
      [[ $run == *-ordinary ]] && pers=(--ordinary)
      [[ $run == *-gradient ]] && data=gradient
      for c in $MPI_COUNTS; do
        local j0 j1; j0=$(p5_jiffies)
        if ranks "$lab" 4 $((job++)) "$TMP/p5.$run.$c" bench -b $((c * 4)) -e $((c * 4)) -n "$MPI_REPS" -w "$MPI_WARMUP" --mtu 9000 --acc $acc --data $data "${pers[@]}"; then
          j1=$(p5_jiffies)
          # The median of rank 0's timed runs (like MPI's), else bench's mean.
          local us; us=$(grep -m1 '^# times(us):' "$TMP/p5.$run.$c.0" | cut -d: -f2 | tr ' ' '\n' | grep . | sort -n |
            awk '{a[NR] = $1} END{if (NR) print a[int((NR + 1) / 2)]}')
          [[ -n $us ]] || us=$(awk '!/^#/ && NF > 4 {print $4; exit}' "$TMP/p5.$run.$c.0")
          prism_ms[$run.$c]=$(awk -v u="$us" 'BEGIN{printf "%.3f", u/1000}')
          echo "prismd $c FP32 ($run): $(grep -v '^#' "$TMP/p5.$run.$c.0" | head -1)"
          # CPU per collective: the switches' over warm-up + timed runs
          # (setup included), the ranks' own over the timed runs.
          echo "  CPU per collective: switches $(awk -v j=$((j1 - j0)) -v hz="$hz" -v n=$((MPI_REPS + MPI_WARMUP)) 'BEGIN{printf "%.1f", j * 1000 / hz / n}') ms (s1+l1+l2)," \
            "ranks $(cat "$TMP/p5.$run.$c".[0-9] | awk '/ms CPU per collective/ {s += $(NF-4)} END{printf "%.1f", s}') ms (4 ranks)," \
            "OpenMPI ranks ${mpi_cpu[$c]:-n/a} ms"
        else echo "prismd $c ($run) failed"; fi
      done
    done
    am_stop
  fi
  [[ -n ${f:-} ]] && lab_down "$f"
  echo
  local runs=${BENCH_MPI_ACCS:-$P5_RUNS}
  printf '%-10s %10s' FP32_elems mpi_ms
  for run in $runs; do printf ' %24s %7s' "prismd_${run}_ms" "mpi/it"; done
  echo
  for c in $MPI_COUNTS; do
    local m=${mpi_ms[$c]:-} p
    printf '%-10s %10s' "$c" "${m:-n/a}"
    for run in $runs; do
      p=${prism_ms[$run.$c]:-}
      printf ' %24s %7s' "${p:-n/a}" "$([[ -n $m && -n $p ]] && ratio "$m" "$p" || echo n/a)"
      [[ -n $p ]] && MEASURED=1
    done
    echo
    [[ -n $m ]] && MEASURED=1
  done
  echo "(median of $MPI_REPS after $MPI_WARMUP warm-up runs; a plain run is the library's default, which keeps a repeated shape as a" \
    "persistent collective from its second call (set up in the warm-up); an -ordinary one (--ordinary) includes each call's setup" \
    "(AM barrier, grant); a -persistent one (prismctl bench --persistent, like MPI_Allreduce_init) was set up once in the warm-up; mpi/it > 1 = prismd faster;" \
    "reference MPI at MTU 1500 on this machine class: 10.7 ms 1M, 208 ms 16M)"
}

for p in $PARTS; do
  t0=$(date +%s)
  part$p || echo "part $p: FAILED (see above); continuing"
  echo "(part $p took $(( $(date +%s) - t0 )) s)"
done
echo
echo "bench: total $(( $(date +%s) - T_START )) s"
[[ $MEASURED == 1 ]] || { echo "bench: nothing could be measured"; exit 1; }
