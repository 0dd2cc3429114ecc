#!/usr/bin/env bash
# Silver trees for §6.3's semi-supervised row: BerkeleyParser (trained on our training split by
# bench/ptb-parse/berkeley.sh) parses the sentences of `transformer data news-text`. A dev script:
# the product does not ship Java.
#
#   dev/parsing/silver.sh split  [--out runs/silver] [--max-words 40]   # shuffle, cut into chunks
#   dev/parsing/silver.sh parse  --jar JAR --grammar G [--out runs/silver] [--core N] [--accurate]
#   dev/parsing/silver.sh gather [--out runs/silver]                     # -> OUT/silver.mrg
#   dev/parsing/silver.sh ours   --checkpoint C --vocab V [--out runs/silver] [--beam 21] [--threads N]
#   dev/parsing/silver.sh agree  [--out runs/silver]     # -> OUT/silver-ours.mrg, OUT/silver-agree.mrg
#
# `split` keeps sentences of 5..max-words tokens from data/news-text/{abc,brown}.txt, shuffled with
# a fixed seed, 1,000 a chunk. `parse` parses every chunk that has no trees yet (so several
# workers, one a core, share the chunks, and an interrupted run resumes once its locks are
# removed), pinned to --core.
# `gather` writes every parsed tree, in chunk order, to OUT/silver.mrg, dropping BerkeleyParser's
# failures `(())` and any tree whose words differ from its sentence's.
# `ours` parses every chunk with our own parser instead (`transformer parse --constrained`, no Java:
# self-training), into OUT/chunks/NNN.ours; `agree` writes every one of those trees to
# OUT/silver-ours.mrg and, for Vinyals et al. (2015)'s high-confidence corpus, to
# OUT/silver-agree.mrg each of BerkeleyParser's trees that our parser's tree equals (labels, tags
# and brackets; the root's label aside).
set -euo pipefail
cmd=$1; shift
out=runs/silver jar= grammar= core=0 accurate= maxw=40 ckpt= vocab= beam=21 threads=
B=${B:-target/release/transformer}
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --jar) jar=$2; shift 2 ;;
    --grammar) grammar=$2; shift 2 ;;
    --core) core=$2; shift 2 ;;
    --accurate) accurate=-accurate; shift ;;
    --max-words) maxw=$2; shift 2 ;;
    --checkpoint) ckpt=$2; shift 2 ;;
    --vocab) vocab=$2; shift 2 ;;
    --beam) beam=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "silver.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $cmd in
  split)
    mkdir -p "$out/chunks"
    python3 - "$out/chunks" "$maxw" <<'PY'
import random, sys
out, maxw = sys.argv[1], int(sys.argv[2])
lines = [l for f in ('data/news-text/abc.txt', 'data/news-text/brown.txt') for l in open(f, encoding='utf-8')
         if 5 <= len(l.split()) <= maxw]
random.Random(1).shuffle(lines)
for i in range(0, len(lines), 1000):
    open(f'{out}/{i // 1000:03d}.words', 'w', encoding='utf-8').writelines(lines[i:i + 1000])
print(f'{len(lines)} sentences in {(len(lines) + 999) // 1000} chunks')
PY
    ;;
  parse)
    [ -f "$jar" ] && [ -f "$grammar" ] || { echo "silver.sh parse: --jar and --grammar name files" >&2; exit 2; }
    for w in "$out"/chunks/*.words; do
      t=${w%.words}.trees
      [ -e "$t" ] && continue
      # A chunk is claimed by creating its lock directory (atomic: two workers never share one);
      # a worker killed mid-chunk leaves its lock: `rm -r OUT/chunks/*.lock` before resuming.
      mkdir "$t.lock" 2>/dev/null || continue
      taskset -c "$core" java -Xmx4g -jar "$jar" -gr "$grammar" $accurate -inputFile "$w" -outputFile "$t.part" 2>/dev/null
      mv "$t.part" "$t" && rmdir "$t.lock"
      echo "$(date -u +%T) $t"
    done
    ;;
  gather)
    python3 - "$out" <<'PY'
import glob, re, sys
out = sys.argv[1]
kept = failed = differ = quotes = 0
with open(f'{out}/silver.mrg', 'w', encoding='utf-8') as f:
    for t in sorted(glob.glob(f'{out}/chunks/*.trees')):
        words = open(t[:-len('.trees')] + '.words', encoding='utf-8').read().splitlines()
        trees = open(t, encoding='utf-8').read().splitlines()
        assert len(words) == len(trees), t
        for w, tree in zip(words, trees):
            if tree.replace(' ', '') == '(())':
                failed += 1
                continue
            if " ` ' " in f" {w} ":
                # A closing quote the first `data news-text` split in two (fixed since): left out.
                quotes += 1
                continue
            if re.findall(r'\(\S+ ([^()\s]+)\)', tree) != w.split():
                differ += 1
                continue
            f.write(tree + '\n')
            kept += 1
print(f'{kept} silver trees in {out}/silver.mrg ({failed} parse failures, {differ} with other words, {quotes} with a split closing quote, left out)')
PY
    ;;
  ours)
    [ -f "$ckpt" ] && [ -f "$vocab" ] || { echo "silver.sh ours: --checkpoint and --vocab name files" >&2; exit 2; }
    t=(); [ -n "$threads" ] && t=(--threads "$threads")
    for w in "$out"/chunks/*.words; do
      o=${w%.words}.ours
      [ -e "$o" ] && continue
      $B parse --checkpoint "$ckpt" --bpe "$vocab" --constrained --beam "$beam" ${t[@]+"${t[@]}"} --input "$w" > "$o.part" 2>/dev/null
      mv "$o.part" "$o"
      echo "$(date -u +%T) $o"
    done
    ;;
  agree)
    python3 - "$out" <<'PY'
import glob, re, sys
out = sys.argv[1]
def norm(tree):
    # The tree's tokens with the root's label (TOP, ROOT or none) taken off and spaces dropped.
    toks = re.findall(r'\(|\)|[^()\s]+', tree)
    assert toks[0] == '(' and toks[-1] == ')', tree
    body = toks[2:-1] if toks[1] in ('TOP', 'ROOT') else toks[1:-1]
    return ' '.join(body)
ours = agree = berkeley = 0
with open(f'{out}/silver-ours.mrg', 'w', encoding='utf-8') as fo, open(f'{out}/silver-agree.mrg', 'w', encoding='utf-8') as fa:
    for o in sorted(glob.glob(f'{out}/chunks/*.ours')):
        words = open(o[:-len('.ours')] + '.words', encoding='utf-8').read().splitlines()
        mine = open(o, encoding='utf-8').read().splitlines()
        assert len(words) == len(mine), o
        try:
            theirs = open(o[:-len('.ours')] + '.trees', encoding='utf-8').read().splitlines()
        except FileNotFoundError:
            theirs = [None] * len(mine)
        for w, m, b in zip(words, mine, theirs):
            if re.findall(r'\(\S+ ([^()\s]+)\)', m) != w.split():
                continue
            fo.write(m + '\n')
            ours += 1
            if b is None or b.replace(' ', '') == '(())':
                continue
            berkeley += 1
            if norm(b) == norm(m):
                fa.write(b + '\n')
                agree += 1
print(f'{ours} of our trees in {out}/silver-ours.mrg; {agree} of the {berkeley} with a BerkeleyParser tree agree, in {out}/silver-agree.mrg')
PY
    ;;
  *) echo "silver.sh: split, parse, gather, ours or agree" >&2; exit 2 ;;
esac
