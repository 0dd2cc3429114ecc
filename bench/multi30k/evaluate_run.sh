#!/usr/bin/env bash
# Scores a Multi30k run directory the way BENCHMARKS.md reports it: for each K, average the last K
# checkpoints (RUN/avgK.safetensors), then translate val and test_2016_flickr with beam 4, α 0.6 and
# print cased sacreBLEU, chrF2, tokenized lowercased BLEU and perplexity.
#
#   bench/multi30k/evaluate_run.sh RUN_DIR [K ...]     (default K: 1 2 3 5)
#
# Needs `cargo build --release` and the run's BPE model at runs/multi30k-en-de/bpe.json (BPE=... to
# choose another); hypotheses go to RUN/hyp-avgK-SPLIT.de.
set -euo pipefail
cd "$(dirname "$0")/../.."
run=$1; shift
ks=${*:-1 2 3 5}
bpe=${BPE:-runs/multi30k-en-de/bpe.json}
data=../shared/data/multi30k
for k in $ks; do
    target/release/transformer average "$run" --last "$k" --output "$run/avg$k.safetensors" > /dev/null
    for split in val test_2016_flickr; do
        out=$(target/release/transformer evaluate --checkpoint "$run/avg$k.safetensors" --bpe "$bpe" \
            --src "$data/$split.en.gz" --ref "$data/$split.de.gz" --output "$run/hyp-avg$k-$split.de" 2>/dev/null)
        echo "== K=$k $split"
        echo "$out" | grep -i "bleu\|chrf\|perplexity"
    done
done
