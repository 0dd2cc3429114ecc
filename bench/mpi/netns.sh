#!/usr/bin/env bash
# Two "hosts" on one machine: network namespaces tfmpi-a (10.77.0.1) and tfmpi-b (10.77.0.2) joined
# by a veth pair, so that two MPI workers talk over TCP as they would between machines (the
# filesystem stays shared, as a cluster's would be). Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
#
#   bench/mpi/netns.sh up                 create the namespaces and the link
#   bench/mpi/netns.sh down               remove them
#   bench/mpi/netns.sh mpirun ARGS...     up, then `mpirun -np 2 ARGS...` with rank 0 in tfmpi-a and
#                                         rank 1 in tfmpi-b over TCP only (btl tcp,self), then down
#
# mpirun starts in tfmpi-a; it reaches "host" 10.77.0.2 through a launch agent (in place of ssh)
# that runs Open MPI's daemon under `ip netns exec tfmpi-b`.
set -euo pipefail

A=tfmpi-a B=tfmpi-b VA=tfmpi-va VB=tfmpi-vb NET=10.77.0
HERE="$(cd "$(dirname "$0")" && pwd)"

up() {
    down 2>/dev/null || true
    ip netns add "$A"
    ip netns add "$B"
    ip link add "$VA" type veth peer name "$VB"
    ip link set "$VA" netns "$A"
    ip link set "$VB" netns "$B"
    ip -n "$A" addr add "$NET.1/24" dev "$VA"
    ip -n "$B" addr add "$NET.2/24" dev "$VB"
    for ns in "$A" "$B"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$A" link set "$VA" up
    ip -n "$B" link set "$VB" up
}

down() {
    ip netns del "$A" 2>/dev/null || true   # deleting a namespace deletes its end of the pair, and so the pair
    ip netns del "$B" 2>/dev/null || true
}

run_mpirun() {
    up
    trap down EXIT
    local tmp rc
    tmp="$(mktemp -d)"
    printf '%s.1 slots=1\n%s.2 slots=1\n' "$NET" "$NET" >"$tmp/hosts"
    # The launch agent: called as `AGENT HOST COMMAND...` like ssh; runs COMMAND in HOST's namespace.
    cat >"$tmp/agent" <<AGENT
#!/usr/bin/env bash
host="\$1"; shift
case "\$host" in
    $NET.1) ns=$A ;;
    $NET.2) ns=$B ;;
    *) echo "netns agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
    chmod +x "$tmp/agent"
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ip netns exec "$A" \
        mpirun --hostfile "$tmp/hosts" -np 2 --map-by node --oversubscribe \
        --mca plm_rsh_agent "$tmp/agent" \
        --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
        "$@" || rc=$?
    rm -rf "$tmp"
    return "${rc:-0}"
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    mpirun) shift; run_mpirun "$@" ;;
    *) echo "usage: $0 up | down | mpirun ARGS..." >&2; exit 2 ;;
esac
