#!/usr/bin/env bash
# One lever of issue 24 on a parsing config: trains NAME with the given --set overrides, then
# parses the validation sentences with beam 4 (unconstrained) and reports exact match, EVALB F1,
# repaired outputs, and the last validation's shifted-sentence gap and encoder spread.
# usage: dev/parse-probe/probe.sh CONFIG NAME [--set k=v ...]   (from the repository root)
set -euo pipefail
cfg=$1; name=$2; shift 2
B=${B:-target/release/transformer}
out=runs/probe/$name
rm -rf "$out"; mkdir -p "$out"
start=$(date +%s)
$B train --config "$cfg" --set train.output_dir="$out" "$@" > "$out/train.log" 2>&1
secs=$(( $(date +%s) - start ))
src=$(grep -o '^valid_src = "[^"]*"' "$cfg" | cut -d'"' -f2)
files=$(grep -o '^valid_files = "[^"]*"' "$cfg" | cut -d'"' -f2)
for a in "$@"; do case $a in data.valid_files=*) files=${a#*=};; esac; done
$B treebank --input "$src" --files "$files" --words "$out/valid.words" --trees "$out/valid.gold" >/dev/null 2>&1
bpe=$(grep -o '^bpe = "[^"]*"' "$cfg" | cut -d'"' -f2)
for a in "$@"; do case $a in data.bpe=*) bpe=${a#*=};; esac; done
ckpt=$(ls -t "$out"/ckpt-*.safetensors | head -1)
$B parse --checkpoint "$ckpt" --bpe "$bpe" --input "$out/valid.words" --beam 4 --skip-long --speed > "$out/valid.test" 2> "$out/parse.err"
$B parse --checkpoint "$ckpt" --bpe "$bpe" --input "$out/valid.words" --beam 4 --skip-long --constrained > "$out/valid.ctest" 2>/dev/null
f1=$($B parse-eval --gold "$out/valid.gold" --test "$out/valid.test" --summary-only 2>/dev/null | grep -m1 'Bracketing FMeasure' | awk '{print $NF}')
cf1=$($B parse-eval --gold "$out/valid.gold" --test "$out/valid.ctest" --summary-only 2>/dev/null | grep -m1 'Bracketing FMeasure' | awk '{print $NF}')
exact=$(paste -d'\t' "$out/valid.gold" "$out/valid.test" | awk -F'\t' '$1==$2{n++} END{print n+0"/"NR}')
repaired=$(grep -o '[0-9]* of [0-9]* outputs needed repair\|[0-9]* repaired' "$out/parse.err" | head -1 || true)
last=$(grep '"kind":"valid"' "$out/metrics.jsonl" | tail -1)
gap=$(echo "$last" | grep -o '"gap":[^,}]*' | cut -d: -f2)
spread=$(echo "$last" | grep -o '"spread":[^,}]*' | cut -d: -f2)
steps=$(echo "$last" | grep -o '"step":[0-9]*' | cut -d: -f2)
printf '%s\tsteps %s\t%ss\tgap %.3f\tspread %.3f\texact %s\tF1 %s\tconstrained F1 %s\t%s\t%s\n' \
  "$name" "$steps" "$secs" "$gap" "$spread" "$exact" "$f1" "$cf1" "$repaired" "$*" | tee -a runs/probe/results.tsv
