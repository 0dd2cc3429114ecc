#!/usr/bin/env bash
# The newcomer's first command, measured: a clean release build of a fresh clone, then
# `transformer quickstart` at its defaults (10 minutes) from an empty directory, reporting the
# build time, the time to the first training progress line, the total time, the peak memory and
# the report's BLEU. Usage: bench/quickstart/run.sh [MINUTES] (default 10). Needs /usr/bin/time.
set -euo pipefail
minutes="${1:-10}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d /tmp/transformer-quickstart-bench.XXXXXX)"
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(date -u '+%Y-%m-%d %H:%M UTC')"
git clone -q "$root" "$work/clone"
start=$(date +%s.%N)
(cd "$work/clone" && cargo build --release -q 2>/dev/null)
build=$(echo "$(date +%s.%N) - $start" | bc)
echo "clean release build: ${build%.*} s"
mkdir "$work/run"
cd "$work/run"
start=$(date +%s.%N)
/usr/bin/time -v "$work/clone/target/release/transformer" quickstart --minutes "$minutes" --output out \
    > report.txt 2> >(while IFS= read -r line; do
        printf '%s %s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$line"
    done > stderr.txt)
sleep 1
first=$(grep -m1 "tgt tok/s" stderr.txt | cut -d' ' -f1)
total=$(echo "$(date +%s.%N) - $start" | bc)
echo "first training progress line after ${first} s; quickstart total ${total%.*} s"
grep "Maximum resident set size" stderr.txt | sed 's/^[0-9.]* *//'
cat report.txt
echo "(files in $work)"
