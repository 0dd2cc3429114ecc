#!/usr/bin/env bash
# The long-input probe (docs/parsing.md): 64 Multi30k pairs as they are and joined eight to a
# line, 300 updates each; prints the last validation's shifted-source gap and encoder spread.
# From the repository root: dev/parse-probe/long-inputs.sh
set -euo pipefail
B=${B:-target/release/transformer}
d=runs/long-inputs; mkdir -p $d
src=../shared/data/multi30k; [ -f data/multi30k/val.en.gz ] && src=data/multi30k
for l in en de; do
  zcat $src/val.$l.gz | sed -n '1,64p' > $d/short.$l   # sed reads to the end: no SIGPIPE under pipefail
  paste -d' ' - - - - - - - - < $d/short.$l > $d/long.$l
done
for v in "long 0.7" "long 0.1" "short 0.7"; do
  set -- $v; rm -rf $d/run-$1-$2
  $B train --config dev/parse-probe/long-inputs.toml --set train.output_dir=$d/run-$1-$2 --set train.lr_scale=$2 \
    --set data.train_src=$d/$1.en --set data.train_tgt=$d/$1.de --set data.valid_src=$d/$1.en \
    --set data.valid_tgt=$d/$1.de --set data.bpe=$d/bpe-$1.json > $d/log-$1-$2 2>&1
  echo "$1 lr_scale $2: $(grep stopped $d/log-$1-$2 | sed 's/.*; valid/valid/; s/; checkpoint.*//')"
done
