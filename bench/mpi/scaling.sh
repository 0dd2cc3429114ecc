#!/usr/bin/env bash
# Data-parallel scaling on one machine: target tokens/s of a short run of a training config with
#   1 process x 2 threads,  2 processes x 1 thread (shared memory),  2 processes in two network
#   namespaces (TCP over a veth pair, bench/mpi/netns.sh; needs root),
# all on the same global batches (train.accumulate = 2: one batch per worker per update), and the
# time of one all-reduce of the base model's 63M gradients (shared memory and TCP).
#
#   bench/mpi/scaling.sh [STEPS] [CONFIG] [ALLREDUCE_FLOATS]
#   defaults: 20 updates of configs/multi30k-en-de.toml, 63000000 floats
#   EXTRA="--set model.n_layers=6 ..." adds train options to every run (e.g. the base model's shape)
# Run from the repository root on a quiet machine; builds with --features mpi. Tokens/s is the run's
# target tokens over its training time (run_state.elapsed_s of the last checkpoint: data preparation
# and BPE learning excluded, the first updates' warm-up included). One JSON line per measurement
# goes to stdout and to $OUT (default bench/mpi/results.jsonl).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS="${1:-20}"
CONFIG="${2:-configs/multi30k-en-de.toml}"
FLOATS="${3:-63000000}"
OUT="${OUT:-bench/mpi/results.jsonl}"
WORK="$(mktemp -d /tmp/transformer-mpi-bench.XXXXXX)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cargo build --release --features mpi -q
BIN="$PWD/target/release/transformer"
# The same updates in every mode; no checkpoint or validation inside the timed updates.
COMMON=(--set "train.max_steps=$STEPS" --set train.accumulate=2 --set train.checkpoint_minutes=1000
        --set train.time_limit_minutes=1000 --set "data.bpe=\"$WORK/bpe.json\"")
read -ra EXTRA_ARGS <<<"${EXTRA:-}"
COMMON+=("${EXTRA_ARGS[@]}")

# Target tokens/s of the run in $1: every train record's tokens over the last checkpoint's elapsed_s.
rate() {
    python3 - "$1" <<'PY'
import json, struct, sys, glob, os
d = sys.argv[1]
tokens = sum(json.loads(l)["tokens"] for l in open(os.path.join(d, "metrics.jsonl")) if '"kind":"train"' in l)
ck = sorted(glob.glob(os.path.join(d, "ckpt-*.safetensors")))[-1]
with open(ck, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    state = json.loads(json.loads(f.read(n))["__metadata__"]["run_state"])
print(json.dumps({"tokens": tokens, "elapsed_s": state["elapsed_s"], "tgt_tokens_per_s": tokens / state["elapsed_s"], "steps": state["step"]}))
PY
}

record() { # mode, json from rate
    local line
    line="$(python3 -c 'import json,sys; d=json.loads(sys.argv[2]); d={"mode": sys.argv[1], "config": sys.argv[3], "date": sys.argv[4], **d}; print(json.dumps(d))' "$1" "$2" "$CONFIG" "$(date -u +%FT%TZ)")"
    echo "$line"
    echo "$line" >>"$OUT"
}

# The BPE model is learned once, outside the timed runs.
"$BIN" --threads 2 train --config "$CONFIG" "${COMMON[@]}" --set train.max_steps=0 \
    --set "train.output_dir=\"$WORK/bpe-run\"" >/dev/null 2>&1

"$BIN" --threads 2 train --config "$CONFIG" "${COMMON[@]}" --set "train.output_dir=\"$WORK/p1t2\"" >/dev/null 2>"$WORK/p1t2.log" \
    || { cat "$WORK/p1t2.log" >&2; exit 1; }
record "1 process x 2 threads" "$(rate "$WORK/p1t2")"

mpirun --oversubscribe --bind-to none -np 2 "$BIN" --threads 1 train --config "$CONFIG" "${COMMON[@]}" \
    --set "train.output_dir=\"$WORK/p2t1\"" >/dev/null 2>"$WORK/p2t1.log" || { cat "$WORK/p2t1.log" >&2; exit 1; }
record "2 processes x 1 thread, shared memory" "$(rate "$WORK/p2t1")"

bench/mpi/netns.sh mpirun --bind-to none "$BIN" --threads 1 train --config "$PWD/$CONFIG" "${COMMON[@]}" \
    --set "train.output_dir=\"$WORK/tcp\"" >/dev/null 2>"$WORK/tcp.log" || { cat "$WORK/tcp.log" >&2; exit 1; }
record "2 processes x 1 thread, TCP between two network namespaces" "$(rate "$WORK/tcp")"

# The 2-process runs make the same updates: their loss curves agree exactly (one f32 add per
# gradient element, whatever the transport).
cmp <(grep '"kind":"train"' "$WORK/p2t1/metrics.jsonl") <(grep '"kind":"train"' "$WORK/tcp/metrics.jsonl") \
    && echo "shared memory and TCP runs: identical loss curves" >&2

for transport in "shared memory" TCP; do
    if [ "$transport" = TCP ]; then
        line="$(bench/mpi/netns.sh mpirun "$BIN" bench allreduce --floats "$FLOATS" --json)"
    else
        line="$(mpirun --oversubscribe -np 2 "$BIN" bench allreduce --floats "$FLOATS" --json)"
    fi
    line="$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["transport"]=sys.argv[2]; print(json.dumps(d))' "$line" "$transport")"
    echo "$line"
    echo "$line" >>"$OUT"
done
rm -rf "$WORK"
