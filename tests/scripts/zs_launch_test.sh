#!/usr/bin/env bash
# scripts/zs-launch with a fake job in place of mpirun (no MPI needed; ctest label unit): the job
# is rerun with --resume auto after a failure and the restart logged with the exit status; exit
# status 2 (bad input) is not retried; spent restarts give the job's last status; with
# --hostfile and --min-ranks a lost host makes it relaunch on fewer ranks with the micro-batch
# that keeps the global batch (skipping a rank count that cannot), and below --min-ranks it stops
# naming the ranks left; a preempted job (exit 75, or SIGTERM to zs-launch, passed on to the
# job) is not restarted.
# Usage: zs_launch_test.sh PATH/TO/zs-launch
set -uo pipefail
launcher="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
expect_contains() {  # expect_contains FILE TEXT WHAT
  grep -qF -- "$2" "$1" || { fail "$3: expected '$2' in:"; cat "$1" >&2; }
}
expect_status() {  # expect_status GOT WANT WHAT
  [[ "$1" == "$2" ]] || fail "$3: exit status $1, expected $2"
}

# The fake job: appends its arguments to $work/calls, then exits with the next status of
# $work/statuses (one per line; 0 once they run out).
cat >"$work/job" <<'JOB'
#!/usr/bin/env bash
dir=$(dirname "$0")
echo "$*" >>"$dir/calls"
status=$(head -n 1 "$dir/statuses" 2>/dev/null)
sed -i '1d' "$dir/statuses" 2>/dev/null
exit "${status:-0}"
JOB
chmod +x "$work/job"
reset() { rm -f "$work/calls" "$work/gone"; printf '%s\n' "$@" >"$work/statuses"; }

# 1. Two failures, then success: rerun with --resume auto (an existing --resume replaced).
reset 70 137
"$launcher" --max-restarts 3 -- "$work/job" -np 2 zs-train --resume step-000002 --steps 8 \
  2>"$work/log"
expect_status $? 0 "retry until success"
expect_contains "$work/log" "restart 1 of 3 after exit status 70" "first restart logged"
expect_contains "$work/log" "restart 2 of 3 after exit status 137" "second restart logged"
[[ $(wc -l <"$work/calls") == 3 ]] || fail "expected 3 launches, got $(wc -l <"$work/calls")"
[[ $(sed -n 1p "$work/calls") == "-np 2 zs-train --resume step-000002 --steps 8" ]] ||
  fail "first launch changed: $(sed -n 1p "$work/calls")"
[[ $(sed -n 3p "$work/calls") == "-np 2 zs-train --resume auto --steps 8" ]] ||
  fail "relaunch without --resume auto: $(sed -n 3p "$work/calls")"

# --resume auto is appended when the command has none.
reset 1
"$launcher" --max-restarts 1 -- "$work/job" -np 2 zs-train --steps 8 2>"$work/log"
expect_status $? 0 "append --resume"
[[ $(sed -n 2p "$work/calls") == "-np 2 zs-train --steps 8 --resume auto" ]] ||
  fail "--resume auto not appended: $(sed -n 2p "$work/calls")"

# 2. Exit status 2 (zs-train's bad input) is not retried.
reset 2
"$launcher" --max-restarts 3 -- "$work/job" zs-train --bad 2>"$work/log"
expect_status $? 2 "bad input"
[[ $(wc -l <"$work/calls") == 1 ]] || fail "bad input was retried"
expect_contains "$work/log" "not restarting" "bad input logged"

# A command that cannot be run is not retried either.
"$launcher" --max-restarts 3 -- "$work/no-such-job" 2>"$work/log"
expect_status $? 127 "missing command"
expect_contains "$work/log" "the command cannot be run" "missing command logged"

# 3. Restarts spent: the job's last status.
reset 70 71 72
"$launcher" --max-restarts 1 -- "$work/job" zs-train 2>"$work/log"
expect_status $? 71 "restarts spent"
expect_contains "$work/log" "all 1 restarts (--max-restarts) are spent" "spent logged"

# 4. Elasticity: hostB answers the first probe only (then it is "gone"); the relaunch has 2
# ranks, micro-batch 4, zs-train's --ranks 2, and the live hosts in place of {hosts}.
printf 'hostA slots=2\nhostB slots=2 # second node\n' >"$work/hosts"
probe="if [ {host} = hostB ]; then [ ! -e $work/gone ] && touch $work/gone; else true; fi"
reset 70
"$launcher" --max-restarts 2 --min-ranks 2 --hostfile "$work/hosts" --probe "$probe" -- \
  "$work/job" -np 4 -w {hosts} zs-train --ranks=4 --micro-batch 2 2>"$work/log"
expect_status $? 0 "elastic relaunch"
[[ $(sed -n 1p "$work/calls") == "-np 4 -w hostA,hostB zs-train --ranks=4 --micro-batch 2" ]] ||
  fail "first elastic launch: $(sed -n 1p "$work/calls")"
[[ $(sed -n 2p "$work/calls") == "-np 2 -w hostA zs-train --ranks=2 --micro-batch 4 --resume auto" ]] ||
  fail "elastic relaunch: $(sed -n 2p "$work/calls")"
expect_contains "$work/log" "dropped: hostB; 2 ranks left on: hostA" "lost host logged"
expect_contains "$work/log" "relaunching on 2 ranks with --micro-batch 4" "relaunch logged"

# A rank count that cannot keep the global batch is skipped: 4 x 1 on three hosts of one slot
# each plus one lost: 3 ranks cannot hold 4 sequences, so 2 ranks x 2.
printf 'a\nb\nc\nd\n' >"$work/hosts4"
probe4="if [ {host} = d ]; then [ ! -e $work/gone ] && touch $work/gone; else true; fi"
reset 70
"$launcher" --min-ranks 2 --hostfile "$work/hosts4" --probe "$probe4" -- \
  "$work/job" -n 4 zs-train --micro-batch=1 2>"$work/log"
expect_status $? 0 "skip a count"
[[ $(sed -n 2p "$work/calls") == "-n 2 zs-train --micro-batch=2 --resume auto" ]] ||
  fail "count 3 not skipped: $(sed -n 2p "$work/calls")"

# 5. Below --min-ranks: an error naming the ranks left, exit 3.
reset 70
"$launcher" --min-ranks 3 --hostfile "$work/hosts" --probe "$probe" -- \
  "$work/job" -np 4 zs-train --micro-batch 2 2>"$work/log"
expect_status $? 3 "below min ranks"
expect_contains "$work/log" "only 2 ranks left (hosts: hostA), fewer than --min-ranks 3" \
  "min ranks error"
[[ $(wc -l <"$work/calls") == 1 ]] || fail "relaunched below --min-ranks"

# 6. Bad command lines.
"$launcher" --min-ranks 2 -- "$work/job" -np 4 zs-train 2>"$work/log"
expect_status $? 2 "min ranks without micro-batch"
expect_contains "$work/log" "--min-ranks needs --micro-batch" "micro-batch needed"
"$launcher" --max-restarts x -- true 2>"$work/log"
expect_status $? 2 "bad max restarts"

# 7. A preemption is not a failure. A job that exits 75 (zs-train stopped by a signal, saved) is
# not restarted.
reset 75
"$launcher" --max-restarts 3 -- "$work/job" zs-train 2>"$work/log"
expect_status $? 75 "a preempted job"
[[ $(wc -l <"$work/calls") == 1 ]] || fail "a preempted job was restarted"
expect_contains "$work/log" "not restarting" "preemption logged"

# SIGTERM to zs-launch reaches the job (which, as zs-train does, saves and exits 75 on it) and
# no restart follows.
cat >"$work/slow_job" <<'JOB'
#!/usr/bin/env bash
dir=$(dirname "$0")
echo "$*" >>"$dir/calls"
trap 'echo "got TERM" >>"$dir/calls"; exit 75' TERM
for _ in $(seq 100); do sleep 0.1; done
exit 0
JOB
chmod +x "$work/slow_job"
reset
"$launcher" --max-restarts 3 -- "$work/slow_job" zs-train 2>"$work/log" &
launcher_pid=$!
for _ in $(seq 50); do [[ -s "$work/calls" ]] && break; sleep 0.1; done
kill -TERM "$launcher_pid"
wait "$launcher_pid"
expect_status $? 75 "SIGTERM to zs-launch"
expect_contains "$work/calls" "got TERM" "the job got the signal"
[[ $(grep -c zs-train "$work/calls") == 1 ]] || fail "relaunched after SIGTERM"
expect_contains "$work/log" "stopped by SIGTERM" "SIGTERM logged"

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "zs-launch: all checks passed"
