#!/usr/bin/env bash
# One parsing checkpoint on the test files (wsj_0175-0189) and the held-back files (wsj_0190-0199,
# which no configuration reads or tunes on), unconstrained and constrained, beam 21, α 0.3 (§6.3):
#   dev/parsing/evaluate.sh CHECKPOINT VOCAB OUT [--checkpoint MORE ...]
# writes OUT/{test,heldout}.{unc,con}.trees and prints one line a set and mode:
#   NAME MODE F1 R P tagging. More `--checkpoint C` arguments make an ensemble. B (default
#   target/release/transformer) is our binary; the gold trees come from `transformer treebank`.
set -euo pipefail
ckpt=$1 vocab=$2 out=$3; shift 3
B=${B:-target/release/transformer}
tb=data/ptb-sample; [ -d "$tb" ] || tb=../shared/data/ptb-sample
mkdir -p "$out"
for split in test=wsj_0175..wsj_0189 heldout=wsj_0190..wsj_0199; do
  name=${split%%=*} range=${split#*=}
  [ -f "$out/$name.gold" ] || $B treebank --input "$tb" --files "$range" --words "$out/$name.words" --trees "$out/$name.gold" >/dev/null
  for mode in unc con; do
    flag=(); [ $mode = con ] && flag=(--constrained)
    $B evaluate --checkpoint "$ckpt" "$@" --bpe "$vocab" --src "$out/$name.words" --ref "$out/$name.gold" \
      --output "$out/$name.$mode.trees" ${flag[@]+"${flag[@]}"} > "$out/$name.$mode.log" 2>&1
    python3 - "$name" "$mode" "$out/$name.$mode.log" <<'PY'
import re, sys
name, mode, log = sys.argv[1:]
text = open(log, encoding='utf-8').read()
def num(label):
    m = re.search(label + r'\s*=\s*([0-9.]+)', text)
    return m.group(1) if m else '?'
# EVALB's summary: the first block is every sentence (the second, those of 40 words or fewer).
print(name, mode, 'F1', num('Bracketing FMeasure'), 'R', num('Bracketing Recall'), 'P', num('Bracketing Precision'),
      'tagging', num('Tagging accuracy'), 'repaired', num('Outputs repaired'))
PY
  done
done
