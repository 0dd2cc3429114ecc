#!/usr/bin/env bash
# Same numbers before and after a refactor: runs two release binaries of `transformer` on the same
# work and compares what they write, byte for byte.
#   dev/refactor-check.sh BEFORE AFTER OUT [tiny|parse|multi30k|translate|marian|speed]...
# From the repository root, with data/multi30k (`transformer data multi30k`) and the Penn Treebank
# sample (data/ptb-sample or ../shared/data/ptb-sample). Without a stage name it runs them all:
#   tiny       configs/tiny-test.toml, 200 updates: every record of metrics.jsonl
#   parse      a small parser on 20 treebank files, 3 epochs with F1 validation and the average:
#              every record of metrics.jsonl, and the test trees of its best checkpoint
#   multi30k   configs/multi30k-en-de.toml, 6 epochs, both binaries at once on one thread each:
#              every record of metrics.jsonl
#   translate  test_2016_flickr.en with the multi30k run's last checkpoint (else the tiny run's;
#              beam 4, α 0.6) at f32, bf16 and int8
#   marian     the tests' imported OPUS-MT fixtures: the written checkpoint and tokenizer, and
#              their translations of 50 sentences
#   speed      bench train-step (f32, bf16) and translate --speed (and with PARSER=DIR, parse --speed
#              of a bench/ptb-parse/run.sh run's test words), interleaved, 3 rounds
set -euo pipefail
before=$(realpath "$1"); after=$(realpath "$2"); out=$3; shift 3
stages=${*:-tiny parse multi30k translate marian speed}
mkdir -p "$out"
tb=data/ptb-sample; [ -d "$tb" ] || tb=../shared/data/ptb-sample
# A safetensors file as text that does not depend on the order of its header's keys (the
# metadata is a hash map, written in a different order by every process): the header sorted,
# then the tensor bytes' SHA-256.
canonical() {
  python3 -c 'import hashlib, json, struct, sys
b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
print(json.dumps(json.loads(b[8:8 + n]), sort_keys=True)); print(hashlib.sha256(b[8 + n:]).hexdigest())' "$1" > "$1.txt"
}
same() { # what, file a, file b
  # A validation record's "seconds" is wall time: no two runs share it, so metrics leave it out.
  case "$2" in *metrics.jsonl) for f in "$2" "$3"; do sed -E 's/"seconds":[0-9.e+-]*,//' "$f" > "$f.noseconds"; done; set -- "$1 (validation \"seconds\" left out)" "$2.noseconds" "$3.noseconds";; esac
  if cmp -s "$2" "$3"; then echo "$1: identical ($(wc -l < "$2") lines)"; else echo "$1: DIFFERENT ($2 vs $3)"; return 1; fi
}
# The model translate and speed use: the multi30k run's last checkpoint, else the tiny run's.
pick_model() {
  if ls "$out"/m30k-after/ckpt-*.safetensors >/dev/null 2>&1; then
    ckpt=$(ls "$out"/m30k-after/ckpt-*.safetensors | sort | tail -1); bpe=$out/m30k-bpe.json
  else
    ckpt=$(ls "$out"/tiny-after/ckpt-*.safetensors | sort | tail -1); bpe=$out/tiny-bpe.json
  fi
}
echo "$(date -u +%FT%TZ) $(lscpu | grep -m1 'Model name' | sed 's/.*: *//'); before $before, after $after"
for stage in $stages; do
  case $stage in
  tiny)
    for who in before after; do
      rm -rf "$out/tiny-$who"
      ${!who} train --config configs/tiny-test.toml --set train.output_dir="$out/tiny-$who" \
        --set data.bpe="$out/tiny-bpe.json" --set train.max_steps=200 --set train.checkpoint_steps=50 >/dev/null 2>&1
    done
    same "tiny-test metrics" "$out/tiny-before/metrics.jsonl" "$out/tiny-after/metrics.jsonl" ;;
  parse)
    small=(--set model.n_layers=1 --set model.d_model=64 --set model.d_ff=128 --set model.n_heads=2
      --set model.d_k=32 --set model.d_v=32 --set data.train_src="$tb" --set data.valid_src="$tb"
      --set data.train_files=wsj_0001..wsj_0020 --set data.vocab_size=1000 --set data.bpe="$out/parse-bpe.json"
      --set train.max_epochs=3 --set train.valid_f1_epochs=1 --set train.valid_f1_beam=4
      --set train.checkpoint_steps=20 --set train.warmup=50)
    for who in before after; do
      rm -rf "$out/parse-$who"
      ${!who} train --config configs/ptb-parse.toml --set train.output_dir="$out/parse-$who" "${small[@]}" >/dev/null 2>&1
      ${!who} treebank --input "$tb" --files wsj_0175..wsj_0179 --trees "$out/parse-gold" >/dev/null
      ${!who} evaluate --checkpoint "$out/parse-$who/best.safetensors" --bpe "$out/parse-bpe.json" \
        --ref "$out/parse-gold" --output "$out/parse-$who/test.trees" --beam 4 > "$out/parse-$who/test.evalb" 2>/dev/null
    done
    same "parser metrics (F1 validations and the average included)" "$out/parse-before/metrics.jsonl" "$out/parse-after/metrics.jsonl"
    same "parser test trees" "$out/parse-before/test.trees" "$out/parse-after/test.trees"
    same "parser EVALB report" "$out/parse-before/test.evalb" "$out/parse-after/test.evalb" ;;
  multi30k)
    for who in before after; do
      rm -rf "$out/m30k-$who"
      ${!who} --threads 1 train --config configs/multi30k-en-de.toml --set train.output_dir="$out/m30k-$who" \
        --set data.bpe="$out/m30k-bpe.json" --set train.max_epochs=6 --set train.time_limit_minutes=600 >/dev/null 2>&1 &
      # The first learns the BPE file the second reads.
      if [ $who = before ]; then while [ ! -s "$out/m30k-bpe.json" ]; do sleep 5; done; fi
    done
    wait
    same "multi30k metrics, 6 epochs" "$out/m30k-before/metrics.jsonl" "$out/m30k-after/metrics.jsonl"
    grep '"kind":"valid"' "$out/m30k-after/metrics.jsonl" | sed 's/.*"ppl":\([0-9.]*\).*/\1/' | tr '\n' ' '; echo "(validation perplexity per epoch)" ;;
  translate)
    pick_model
    for precision in f32 bf16 int8; do
      for who in before after; do
        ${!who} translate --checkpoint "$ckpt" --bpe "$bpe" --input data/multi30k/test_2016_flickr.en.gz \
          --precision $precision > "$out/translate-$precision-$who.txt" 2>/dev/null
      done
      same "translations of test_2016_flickr at $precision ($(basename "$ckpt"))" \
        "$out/translate-$precision-before.txt" "$out/translate-$precision-after.txt"
    done ;;
  marian)
    # The imported OPUS-MT fixtures (HF and native) of the tests, imported by each binary: the
    # written checkpoint and tokenizer, and translations of Multi30k's first 50 English sentences.
    { gzip -dc data/multi30k/test_2016_flickr.en.gz || true; } | head -50 > "$out/marian-in.txt"
    for fixture in opus/hf opus/native gelu_separate/hf; do
      name=${fixture//\//-}
      for who in before after; do
        rm -rf "$out/marian-$name-$who"
        ${!who} import marian "crates/transformer/tests/fixtures/marian/$fixture" --output "$out/marian-$name-$who" >/dev/null 2>&1
        ${!who} translate --checkpoint "$out/marian-$name-$who/model.safetensors" \
          --tokenizer "$out/marian-$name-$who/tokenizer.json" --input "$out/marian-in.txt" \
          > "$out/marian-$name-$who.txt" 2>/dev/null
      done
      canonical "$out/marian-$name-before/model.safetensors"; canonical "$out/marian-$name-after/model.safetensors"
      same "imported $fixture: checkpoint (header sorted, tensor bytes)" "$out/marian-$name-before/model.safetensors.txt" \
        "$out/marian-$name-after/model.safetensors.txt"
      same "imported $fixture: tokenizer" "$out/marian-$name-before/tokenizer.json" "$out/marian-$name-after/tokenizer.json"
      same "imported $fixture: translations" "$out/marian-$name-before.txt" "$out/marian-$name-after.txt"
    done ;;
  speed)
    pick_model
    for round in 1 2 3; do
      for who in before after; do
        f32=$(${!who} bench train-step --steps 10 2>&1 | grep -o 'median step [0-9.]* s' | head -1)
        bf16=$(${!who} bench train-step --steps 20 --bf16 2>&1 | grep -o 'median step [0-9.]* s' | head -1)
        dec=$({ ${!who} translate --checkpoint "$ckpt" --bpe "$bpe" \
          --input data/multi30k/test_2016_flickr.en.gz --speed >/dev/null; } 2>&1 | grep -o 'in [0-9.]* s' | head -1)
        parse=
        if [ -n "${PARSER:-}" ]; then # PARSER=RUN_DIR of bench/ptb-parse/run.sh: its best model parses its test words
          parse=$({ ${!who} parse --checkpoint "$PARSER/best.safetensors" --bpe "$PARSER/vocab.json" \
            --input "$PARSER/test.words" --speed >/dev/null; } 2>&1 | grep -o 'in [0-9.]* s' | head -1)
          parse="; parse $parse"
        fi
        echo "round $round $who: train-step f32 $f32, bf16 $bf16; translate $dec$parse"
      done
    done ;;
  *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
