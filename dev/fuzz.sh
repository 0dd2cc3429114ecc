#!/usr/bin/env bash
# Fuzzes every reader of untrusted bytes for a bounded time each (libFuzzer via cargo-fuzz; needs
# a nightly toolchain: `rustup toolchain install nightly && cargo install cargo-fuzz`). The corpus
# each target grows is kept in fuzz/corpus/TARGET (minimised with `cargo fuzz cmin` at the end);
# a crash is written to fuzz/artifacts/TARGET and makes this script fail.
#
#   dev/fuzz.sh            # every target, 60 s each
#   SECONDS_EACH=600 dev/fuzz.sh checkpoint
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${SECONDS_EACH:-60}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(run_config checkpoint bpe_json prepared_data ptb_trees pickle npy npz sentencepiece marian_vocab marian_yml ct2_model_bin)
fi
for t in "${targets[@]}"; do
    echo "== $t: ${seconds} s"
    mkdir -p "corpus/$t"
    cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=4096
    cargo +nightly fuzz cmin "$t" "corpus/$t" >/dev/null 2>&1 || true
    echo "$t: no crash; corpus $(ls "corpus/$t" | wc -l) inputs"
done
