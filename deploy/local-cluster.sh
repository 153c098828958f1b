#!/usr/bin/env bash
# A local backplane cluster on loopback, for trying scale-out and for the tests that need one:
#   - a 3-node Redis Cluster (3 primaries, no replicas; sharded pub/sub needs Redis >= 7), and
#   - a 3-node NATS cluster (full mesh of routes).
# Debian: apt-get install redis-server redis-tools nats-server
#
#   deploy/local-cluster.sh start [DIR]   # start both; prints the URLs to export
#   deploy/local-cluster.sh stop  [DIR]   # stop both and remove DIR
#   deploy/local-cluster.sh status [DIR]
#   deploy/local-cluster.sh start-redis-node I [DIR]   # (re)start Redis node I (0-2) in place
#
# LOCAL_CLUSTER_ENGINES (default "redis nats") picks which to start.
# Ports: REDIS_CLUSTER_PORT (default 7101) .. +2, NATS_CLUSTER_PORT (default 4301) .. +2 for
# clients and NATS_ROUTE_PORT (default 6301) .. +2 for the routes between NATS servers.
# Nothing listens beyond 127.0.0.1; nothing is kept on disk beyond DIR.
set -euo pipefail

cmd=${1:-}
dir=${2:-${TMPDIR:-/tmp}/realtime-dispatch-cluster}
redis_base=${REDIS_CLUSTER_PORT:-7101}
nats_base=${NATS_CLUSTER_PORT:-4301}
route_base=${NATS_ROUTE_PORT:-6301}
nodes=(0 1 2)
engines=${LOCAL_CLUSTER_ENGINES:-redis nats}

wait_port() {  # wait up to 10 s for 127.0.0.1:$1 to accept connections
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.1
    done
    echo "local-cluster: nothing listens on 127.0.0.1:$1" >&2
    return 1
}

start_redis_node() {  # a node keeps its identity and slots in its nodes.conf
    local i=$1 port=$(($redis_base + $1)) node_dir="$dir/redis-$1"
    mkdir -p "$node_dir"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$node_dir" \
        --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
        --save "" --appendonly no --daemonize yes --pidfile "$node_dir/redis.pid" \
        --logfile "$node_dir/redis.log"
}

start_redis() {
    local addrs=()
    for i in "${nodes[@]}"; do
        start_redis_node "$i"
        addrs+=("127.0.0.1:$((redis_base + i))")
    done
    for i in "${nodes[@]}"; do wait_port $((redis_base + i)); done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >"$dir/redis-create.log"
    # The cluster answers once every slot is served.
    for _ in $(seq 100); do
        redis-cli -p "$redis_base" cluster info | grep -q 'cluster_state:ok' && return 0
        sleep 0.1
    done
    echo "local-cluster: the Redis Cluster did not reach cluster_state:ok" >&2
    return 1
}

start_nats() {
    local routes=""
    for i in "${nodes[@]}"; do routes+="nats-route://127.0.0.1:$((route_base + i)),"; done
    for i in "${nodes[@]}"; do
        local node_dir="$dir/nats-$i"
        mkdir -p "$node_dir"
        nats-server -a 127.0.0.1 -p $((nats_base + i)) --name "rd-nats-$i" \
            --cluster_name realtime-dispatch --cluster "nats://127.0.0.1:$((route_base + i))" \
            --routes "${routes%,}" -P "$node_dir/nats.pid" -l "$node_dir/nats.log" </dev/null >/dev/null 2>&1 &
    done
    for i in "${nodes[@]}"; do wait_port $((nats_base + i)); done
}

stop_all() {
    for pidfile in "$dir"/*/redis.pid "$dir"/*/nats.pid; do
        [ -f "$pidfile" ] || continue
        kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    sleep 0.3
    rm -rf "$dir"
}

case "$cmd" in
start)
    if [ -e "$dir" ]; then
        echo "local-cluster: $dir exists; stop the running cluster first" >&2
        exit 1
    fi
    mkdir -p "$dir"
    if [[ " $engines " == *" redis "* ]]; then
        start_redis
        echo "REALTIME_REDIS_CLUSTER_URL=redis://127.0.0.1:$redis_base"
    fi
    if [[ " $engines " == *" nats "* ]]; then
        start_nats
        nats_urls=""
        for i in "${nodes[@]}"; do nats_urls+="nats://127.0.0.1:$((nats_base + i)),"; done
        echo "REALTIME_NATS_URL=${nats_urls%,}"
    fi
    ;;
stop)
    stop_all
    ;;
start-redis-node)
    dir=${3:-${TMPDIR:-/tmp}/realtime-dispatch-cluster}
    start_redis_node "$2"
    wait_port $((redis_base + $2))
    ;;
status)
    for i in "${nodes[@]}"; do
        echo "redis-$i $(redis-cli -p $((redis_base + i)) ping 2>/dev/null || echo down)"
    done
    redis-cli -p "$redis_base" cluster info 2>/dev/null | grep cluster_state || true
    for i in "${nodes[@]}"; do
        (exec 3<>"/dev/tcp/127.0.0.1/$((nats_base + i))") 2>/dev/null \
            && echo "nats-$i up" || echo "nats-$i down"
    done
    ;;
*)
    echo "usage: $0 start|stop|status [DIR]" >&2
    exit 2
    ;;
esac
