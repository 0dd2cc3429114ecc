#!/usr/bin/env bash
# Trains the parser of a config and scores its best checkpoint (by validation F1) on the test
# files of the Penn Treebank sample, beam 21, α 0.3, +300, unconstrained and constrained: the rows
# of BENCHMARKS.md's parsing table. From the repository root:
#   bench/ptb-parse/run.sh OUT [CONFIG] [--set key=value ...]
# TREEBANK (default: data/ptb-sample, else ../shared/data/ptb-sample) is where the .mrg files are.
set -euo pipefail
out=$1; shift
cfg=configs/ptb-parse.toml
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then cfg=$1; shift; fi
B=${B:-target/release/transformer}
tb=${TREEBANK:-data/ptb-sample}
[ -d "$tb" ] || tb=../shared/data/ptb-sample
mkdir -p "$out"
echo "$(date -u +%FT%TZ) $(lscpu | grep -m1 'Model name' | sed 's/.*: *//') config $cfg $*" | tee "$out/run.txt"
$B train --config "$cfg" --set train.output_dir="$out" --set data.bpe="$out/vocab.json" \
  --set data.train_src="$tb" --set data.valid_src="$tb" "$@" 2>&1 | tee "$out/train.log" | grep -v ' step [0-9]* (' || true
$B treebank --input "$tb" --files wsj_0175..wsj_0189 --words "$out/test.words" --trees "$out/test.gold" >/dev/null
for mode in unconstrained constrained; do
  flag=; [ $mode = constrained ] && flag=--constrained
  $B evaluate --checkpoint "$out/best.safetensors" --bpe "$out/vocab.json" --ref "$out/test.gold" \
    --output "$out/test-$mode.trees" $flag > "$out/test-$mode.evalb" 2>&1
  all=$(grep -A20 -- '-- All --' "$out/test-$mode.evalb")
  l40=$(grep -A20 -- '-- len<=40 --' "$out/test-$mode.evalb")
  f() { echo "$1" | grep -m1 "$2" | awk -F'= *' '{print $2}'; }
  echo "$mode: F1 $(f "$all" FMeasure) (R $(f "$all" Recall), P $(f "$all" Precision)), F1<=40 $(f "$l40" FMeasure)," \
    "errors $(f "$all" 'Error sentence') of 227, exact $(f "$all" 'Complete match')%, tags $(f "$all" 'Tagging')," \
    "$(grep -m1 'Outputs repaired' "$out/test-$mode.evalb" | sed 's/ *= */ /'), $(grep -m1 'sentences/s' "$out/test-$mode.evalb" | sed 's/.*: //')" | tee -a "$out/run.txt"
done
echo "best validation F1: $(grep 'best so far' "$out/train.log" | tail -1 | sed 's/.*validation F1 //; s/;.*//')" | tee -a "$out/run.txt"
echo "last validation: $(grep '"kind":"valid"' "$out/metrics.jsonl" | tail -1)" | tee -a "$out/run.txt"
