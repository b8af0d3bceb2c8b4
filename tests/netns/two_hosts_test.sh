#!/usr/bin/env bash
# Two hosts on one machine (ctest labels netns and mpi; needs root): two network namespaces joined
# by a veth pair, 10.231.0.1 and 10.231.0.2 on a private /24 that exists only inside them, and
# zs-train under Open MPI across them. mpirun runs in the first namespace; its rsh agent is
# `ip netns exec` (a script written below that maps each host address to its namespace, as ssh
# would log in to that host), and the TCP transports (the MPI traffic and the daemons' own) are
# pinned to the veth. Nothing is ever sent to an address other than the namespaces' own.
#
#  1. Bits: 2 ranks (one per host) and 4 ranks (two per host) end with final weights equal byte
#     for byte to the local backend's (ranks as threads) on the same run.
#  2. A host cut mid-step: the veth is downed on the second host during a 4-rank run. Every rank
#     process must be gone within the collective timeout + 5 s, mpirun must end non-zero with an
#     error that names the lost host, and no process may be left in either namespace. mpirun only
#     notices a silent host through the daemons' TCP keepalive (Open MPI's default waits 300 s and
#     then 9 probes 20 s apart, and until then mpirun waits for the lost daemon even after every
#     rank has ended), so the recipe sets oob_tcp_keepalive_* to a few seconds.
#  3. Resume: the link comes back up and the job continues on the surviving host alone, 2 ranks
#     with the micro-batch doubled (the global batch kept), from the newest checkpoint that
#     verifies (--resume auto), resharded from 4 ranks, and finishes.
#
# The namespaces are named zsnt-<pid>-a/b; they (and the veth, which lives only inside them) are
# removed on every exit, and a run deletes those left by an earlier run that was killed outright.
# Exit 77 (ctest's SKIP_RETURN_CODE) only when not root or `ip netns` cannot make a namespace.
# Usage: two_hosts_test.sh ZS_TRAIN MPIEXEC CORPUS
set -uo pipefail
zs_train="$1" mpiexec="$2" corpus="$3"

readonly prefix=zsnt-
readonly ns_a="${prefix}$$-a" ns_b="${prefix}$$-b"
readonly ip_a=10.231.0.1 ip_b=10.231.0.2 veth=zsnt0
# The collective timeout of the ranks (zs-train reads ZS_COMM_TIMEOUT_S) and the daemons'
# keepalive: a lost daemon is noticed 2-4 s after the cut, well before a rank's collective times
# out, so the job ends on Open MPI's error that names the lost host.
readonly comm_timeout=8
readonly keepalive=(--mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1
                    --mca oob_tcp_keepalive_probes 2)

if [[ $(id -u) != 0 ]]; then
  echo "SKIPPED: the netns test needs root to make network namespaces (CI runs it as root)"
  exit 77
fi
if ! command -v ip >/dev/null || ! ip netns list >/dev/null 2>&1; then
  echo "SKIPPED: 'ip netns' is not available here (install iproute2)"
  exit 77
fi

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }

# Kills what still runs inside a namespace (a rank or daemon the test started there) and deletes
# it; the veth end inside goes with it, and its peer with that.
remove_ns() {
  local ns=$1 pid
  ip netns list | awk '{print $1}' | grep -qx -- "$ns" || return 0
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null || fail "could not delete namespace $ns"
}
# Namespaces of an earlier run whose test process is gone (killed by a ctest timeout, say).
for ns in $(ip netns list | awk '{print $1}' | grep "^${prefix}[0-9]*-[ab]$"); do
  owner=${ns#"$prefix"}
  owner=${owner%-*}
  [[ -d /proc/$owner ]] || { echo "removing stale namespace $ns"; remove_ns "$ns"; }
done

work=$(mktemp -d)
mpirun_pid=
cleanup() {
  [[ -n $mpirun_pid ]] && kill -KILL "$mpirun_pid" 2>/dev/null
  ip -n "$ns_b" link set "$veth" up 2>/dev/null
  remove_ns "$ns_a"
  remove_ns "$ns_b"
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The two hosts. The veth is made with its ends already inside the namespaces, so no interface of
# this test ever exists outside them; both ends have one name, which the transports are pinned to.
ip netns add "$ns_a" || { echo "SKIPPED: 'ip netns add' failed: no network namespaces here"; exit 77; }
ip netns add "$ns_b" || exit 1
set -e
ip link add name "$veth" netns "$ns_a" type veth peer name "$veth" netns "$ns_b"
for ns in "$ns_a" "$ns_b"; do
  # IPv4 only on the veth: Open MPI would otherwise also try its IPv6 link-local address.
  ip netns exec "$ns" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/all/disable_ipv6;
                             echo 1 >/proc/sys/net/ipv6/conf/default/disable_ipv6'
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" addr add "$ip_a/24" dev "$veth"
ip -n "$ns_b" addr add "$ip_b/24" dev "$veth"
ip -n "$ns_a" link set "$veth" up
ip -n "$ns_b" link set "$veth" up
set +e

# mpirun's rsh agent: "AGENT HOST COMMAND..." runs COMMAND on HOST as ssh would, through a shell
# (Open MPI quotes the daemon's arguments for one), in HOST's namespace.
cat >"$work/netns-rsh" <<EOF
#!/bin/sh
case "\$1" in
  $ip_a) ns=$ns_a ;;
  $ip_b) ns=$ns_b ;;
  *) echo "netns-rsh: unknown host '\$1'" >&2; exit 255 ;;
esac
shift
exec ip netns exec "\$ns" /bin/sh -c "\$*"
EOF
# Every rank notes its rank, pid and namespace before it becomes zs-train (exec keeps the pid).
cat >"$work/rank" <<EOF
#!/bin/sh
echo "\$OMPI_COMM_WORLD_RANK \$\$ \$(ip netns identify)" >>"\$ZS_NETNS_RANKS"
exec "\$@"
EOF
chmod +x "$work/netns-rsh" "$work/rank"
printf '%s slots=1\n%s slots=1\n' "$ip_a" "$ip_b" >"$work/hosts1"
printf '%s slots=2\n%s slots=2\n' "$ip_a" "$ip_b" >"$work/hosts2"
printf '%s slots=2\n' "$ip_a" >"$work/hosts_a"

model=(--text "$corpus" --layers 2 --width 32 --heads 2 --context 32 --zero-stage 3 --threads 1
       --eval-batches 2 --no-progress)
mpi=("$mpiexec" --allow-run-as-root --oversubscribe --mca plm_rsh_agent "$work/netns-rsh"
     --mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include "$veth"
     --mca oob_tcp_if_include "$veth" "${keepalive[@]}" -x ZS_COMM_TIMEOUT_S -x ZS_NETNS_RANKS)
export ZS_COMM_TIMEOUT_S=$comm_timeout
# mpirun_in_a TAG HOSTFILE NP ARGS...: zs-train on NP ranks under mpirun started in host a's
# namespace, in the background (output in $work/TAG.out, ranks in $work/TAG.ranks), ended after
# $job_limit seconds.
job_limit=30
mpirun_in_a() {
  local tag=$1 hosts=$2 np=$3
  shift 3
  : >"$work/$tag.ranks"
  ZS_NETNS_RANKS="$work/$tag.ranks" timeout "$job_limit" ip netns exec "$ns_a" "${mpi[@]}" \
    --hostfile "$hosts" -np "$np" "$work/rank" "$zs_train" --backend mpi "${model[@]}" "$@" \
    >"$work/$tag.out" 2>&1 &
  mpirun_pid=$!
}
# The namespaces of ranks 0..N-1, in rank order ("a a b b").
placement() {
  sort -n "$work/$1.ranks" | awk -v a="$ns_a" -v b="$ns_b" \
    '{ printf "%s%s", sep, ($3 == a ? "a" : $3 == b ? "b" : "?" $3); sep = " " }'
}
show() { echo "--- $1"; sed 's/^/  /' "$work/$1.out"; }

# 1. Bits: the same 6 steps on the local backend and across the two hosts.
for np in 2 4; do
  micro=$((4 / np))
  "$zs_train" --backend local --ranks "$np" "${model[@]}" --steps 6 --micro-batch "$micro" \
    --save-weights "$work/local$np.safetensors" >"$work/local$np.out" 2>&1 ||
    { show "local$np"; fail "the local reference run on $np ranks failed"; }
  mpirun_in_a "np$np" "$work/hosts$((np / 2))" "$np" --steps 6 --micro-batch "$micro" \
    --save-weights "$work/np$np.safetensors"
  wait "$mpirun_pid"
  status=$?
  mpirun_pid=
  show "np$np"
  expected=$([[ $np == 2 ]] && echo "a b" || echo "a a b b")
  [[ $status == 0 ]] || fail "$np ranks across the namespaces: mpirun exited with $status"
  [[ $(placement "np$np") == "$expected" ]] ||
    fail "$np ranks: ranks ran in namespaces '$(placement "np$np")', expected '$expected'"
  if cmp -s "$work/local$np.safetensors" "$work/np$np.safetensors"; then
    echo "$np ranks on two hosts: final weights equal the local backend's bit for bit"
  else
    fail "$np ranks on two hosts: the final weights differ from the local backend's"
  fi
done

# 2. The cut. 4 ranks, a checkpoint every 50 steps; once the one of step 100 is saved (the run is
# then far from its end), host b's end of the veth goes down.
ckpt="$work/ckpt"
long=(--steps 1200 --log-interval 50 --checkpoint-dir "$ckpt" --checkpoint-interval 50)
mpirun_in_a cut "$work/hosts2" 4 --micro-batch 1 "${long[@]}"
for _ in $(seq 600); do
  grep -q "saved checkpoint .*step-000100" "$work/cut.out" && break
  kill -0 "$mpirun_pid" 2>/dev/null || break
  sleep 0.05
done
if ! grep -q "saved checkpoint .*step-000100" "$work/cut.out"; then
  show cut
  fail "the 4-rank run never saved its checkpoint of step 100; nothing to cut"
else
  cut_ms=$(now_ms)
  ip -n "$ns_b" link set "$veth" down
  echo "link to host b cut"
  deadline=$((cut_ms + (comm_timeout + 5) * 1000))
  declare -A ended=()
  # A rank has ended when its pid is gone or a zombie (its parent, a daemon, may be gone too).
  alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
  }
  mpirun_status=
  while :; do
    t=$(($(now_ms) - cut_ms))
    while read -r rank pid ns; do
      [[ -n ${ended[$rank]:-} ]] && continue
      alive "$pid" || { ended[$rank]=$t; echo "rank $rank ($ns) ended ${t} ms after the cut"; }
    done <"$work/cut.ranks"
    if [[ -z $mpirun_status ]] && ! kill -0 "$mpirun_pid" 2>/dev/null; then
      wait "$mpirun_pid"
      mpirun_status=$?
      mpirun_pid=
      echo "mpirun exited with $mpirun_status ${t} ms after the cut"
    fi
    [[ ${#ended[@]} == 4 && -n $mpirun_status ]] && break
    (($(now_ms) > deadline)) && break
    sleep 0.05
  done
  show cut
  [[ $(placement cut) == "a a b b" ]] || fail "the cut run's ranks ran in '$(placement cut)'"
  for rank in 0 1 2 3; do
    [[ -n ${ended[$rank]:-} ]] ||
      fail "rank $rank still runs $((comm_timeout + 5)) s after the cut (collective timeout ${comm_timeout} s)"
  done
  if [[ -z $mpirun_status ]]; then
    fail "mpirun still runs $((comm_timeout + 5)) s after the cut"
  elif [[ $mpirun_status == 0 ]]; then
    fail "mpirun exited 0 after a host was cut"
  fi
  grep -qE "Remote daemon: .* on node $ip_b" "$work/cut.out" ||
    fail "no error names the lost host $ip_b"
  ip -n "$ns_b" link set "$veth" up
  # Nothing of the job may stay behind on either host (a daemon that never noticed, a rank).
  sleep 1
  for ns in "$ns_a" "$ns_b"; do
    left=$(ip netns pids "$ns" | tr '\n' ' ')
    [[ -z $left ]] || fail "processes left in $ns after the job ended: $left"
  done

  # 3. Resume on host a alone: 2 ranks x micro-batch 2 = 4 x 1. The ~1100 steps left take
  # ~15 s on a quiet machine and 70 s and more when the suite runs beside it (ctest -j4 on 2
  # cores: 60-120 ms per step), so this job gets longer than the others.
  job_limit=100
  mpirun_in_a resume "$work/hosts_a" 2 --micro-batch 2 "${long[@]}" --resume auto
  wait "$mpirun_pid"
  status=$?
  mpirun_pid=
  show resume
  [[ $status == 0 ]] || fail "the resumed run on host a exited with $status"
  [[ $(placement resume) == "a a" ]] || fail "the resumed run's ranks ran in '$(placement resume)'"
  grep -qE "resumed from checkpoint .*step-0*([1-9][0-9]{2,}) after [0-9]+ steps" \
    "$work/resume.out" || fail "the resumed run did not start from a checkpoint of step >= 100"
  grep -q "resharded from 4 ranks" "$work/resume.out" || fail "the resumed run was not resharded"
  grep -q "eval after step 1200" "$work/resume.out" || fail "the resumed run did not finish"
fi

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "two hosts in network namespaces: all checks passed"
