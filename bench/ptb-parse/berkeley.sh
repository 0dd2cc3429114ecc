#!/usr/bin/env bash
# The paper's anchor for Table 4 on our data: BerkeleyParser (Petrov et al. 2006; the jar of
# github.com/slavpetrov/berkeleyparser, Java 17) trained on exactly our training files, its number
# of split-merge cycles picked on our validation files, then validation and test parsed with
# -accurate and scored with our `parse-eval` (EVALB-exact, COLLINS.prm) against `transformer
# treebank`'s gold trees. It fetches nothing: give it the jar's path. From the repository root:
#
#   bench/ptb-parse/berkeley.sh --jar PATH/BerkeleyParser-1.7.jar [--out runs/berkeley]
#       [--treebank data/ptb-sample] [--cycles 6] [--seed 1] [--threads 1]
#       [--train-files wsj_0001..wsj_0159] [--valid-files wsj_0160..wsj_0174]
#       [--test-files wsj_0175..wsj_0189] [--extra-test NAME=RANGE ...]
#
# GrammarTrainer saves a grammar after every split, merge and smoothing step; the grammar after
# cycle c's smoothing (`grammar_c_smoothing.gr`) is the c-cycle parser. Each is scored on
# validation; the best (ties to fewer cycles) parses test. OUT/summary.tsv holds one row a cycle
# and OUT/run.txt the picked grammar's test line. Training runs on one core (`taskset -c 0` when
# --threads 1: the other core stays free). B (default target/release/transformer) is our binary.
set -euo pipefail
jar= out=runs/berkeley tb=${TREEBANK:-data/ptb-sample} cycles=6 seed=1 threads=1
train=wsj_0001..wsj_0159 valid=wsj_0160..wsj_0174 test=wsj_0175..wsj_0189
extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --jar) jar=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --treebank) tb=$2; shift 2 ;;
    --cycles) cycles=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --train-files) train=$2; shift 2 ;;
    --valid-files) valid=$2; shift 2 ;;
    --test-files) test=$2; shift 2 ;;
    --extra-test) extra+=("$2"); shift 2 ;;
    *) echo "berkeley.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$jar" ] || { echo "berkeley.sh: --jar PATH is required (BerkeleyParser-1.7.jar from github.com/slavpetrov/berkeleyparser)" >&2; exit 2; }
[ -f "$jar" ] || { echo "berkeley.sh: $jar: no such file" >&2; exit 2; }
[ -d "$tb" ] || tb=../shared/data/ptb-sample
[ -d "$tb" ] || { echo "berkeley.sh: no treebank (run \`transformer data ptb-sample\` or pass --treebank DIR)" >&2; exit 2; }
B=${B:-target/release/transformer}
pin=(); [ "$threads" = 1 ] && command -v taskset >/dev/null && pin=(taskset -c 0)
mkdir -p "$out"
cpu=$(lscpu | grep -m1 'Model name' | sed 's/.*: *//')
echo "$(date -u +%FT%TZ) $cpu; BerkeleyParser $(basename "$jar"), seed $seed, up to $cycles cycles, train $train" | tee "$out/run.txt"

for split in "train:$train" "valid:$valid" "test:$test" ${extra[@]+"${extra[@]}"}; do
  name=${split%%:*} name=${name%%=*} range=${split#*[:=]}
  $B treebank --input "$tb" --files "$range" --words "$out/$name.words" --trees "$out/$name.gold" >/dev/null
done

# Training. Its validation set is the training set itself in SINGLEFILE mode (Corpus.java), so the
# cycle is picked on our validation files below.
if [ ! -f "$out/grammar_${cycles}_smoothing.gr" ]; then
  start=$(date +%s)
  ${pin[@]+"${pin[@]}"} java -Xmx8g -cp "$jar" edu.berkeley.nlp.PCFGLA.GrammarTrainer -path "$out/train.gold" \
    -treebank SINGLEFILE -out "$out/grammar" -SMcycles "$cycles" -randSeed "$seed" > "$out/train.log" 2>&1
  echo "training: $(( $(date +%s) - start )) s" | tee -a "$out/run.txt"
fi

parse() { # grammar words trees
  local start; start=$(date +%s)
  ${pin[@]+"${pin[@]}"} java -Xmx8g -jar "$jar" -gr "$1" -accurate -nThreads "$threads" -inputFile "$2" -outputFile "$3.raw" 2>/dev/null
  # BerkeleyParser roots a tree in an unlabelled bracket, `( (S …) )`, which EVALB (and parse-eval)
  # would count as one more bracket in every sentence: it is rooted at TOP, as the gold trees are.
  sed 's/^( /(TOP /' "$3.raw" > "$3"
  echo $(( $(date +%s) - start ))
}
score() { # gold trees -> "F1 R P tagging"
  $B parse-eval --gold "$1" --test "$2" > "$2.evalb" 2>&1 || true
  local all; all=$(grep -A20 -- '-- All --' "$2.evalb")
  f() { echo "$all" | grep -m1 "$1" | awk -F'= *' '{print $2}'; }
  [ -n "$all" ] || { echo "berkeley.sh: parse-eval could not score $2 (see $2.evalb)" >&2; echo "0 0 0 0"; return; }
  echo "$(f FMeasure) $(f Recall) $(f Precision) $(f Tagging)"
}

printf "cycles\tvalid_F1\tvalid_R\tvalid_P\tvalid_tagging\tparse_s\n" > "$out/summary.tsv"
best= bestf=-1
for c in $(seq 1 "$cycles"); do
  g="$out/grammar_${c}_smoothing.gr"
  [ -f "$g" ] || continue
  s=$(parse "$g" "$out/valid.words" "$out/valid.c$c.trees")
  read -r f r p t <<< "$(score "$out/valid.gold" "$out/valid.c$c.trees")"
  printf "%s\t%s\t%s\t%s\t%s\t%s\n" "$c" "$f" "$r" "$p" "$t" "$s" | tee -a "$out/summary.tsv"
  if awk "BEGIN{exit !($f > $bestf)}"; then best=$c bestf=$f; fi
done
[ -n "$best" ] || { echo "berkeley.sh: no grammar was written (see $out/train.log)" >&2; exit 1; }
echo "picked on validation: $best cycles (F1 $bestf)" | tee -a "$out/run.txt"
for split in "test:$test" ${extra[@]+"${extra[@]}"}; do
  name=${split%%:*} name=${name%%=*}
  s=$(parse "$out/grammar_${best}_smoothing.gr" "$out/$name.words" "$out/$name.trees")
  read -r f r p t <<< "$(score "$out/$name.gold" "$out/$name.trees")"
  n=$(wc -l < "$out/$name.words")
  echo "$name ($n sentences): F1 $f (R $r, P $p), tagging $t, parsed in $s s" | tee -a "$out/run.txt"
done
