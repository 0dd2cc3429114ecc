//! Imported Marian / OPUS-MT models against `transformers` (fixtures written by
//! dev/reference/marian_fixtures.py: small models in the OPUS-MT shape, saved as a Hugging Face
//! directory in both weight formats and as a native Marian .npz, with float64 reference outputs).

mod common;

use common::TestDir;
use safetensors::SafeTensors;
use std::path::{Path, PathBuf};
use transformer::import::marian::{import, Imported};
use transformer::import::IdMap;
use transformer::{Batch, Transformer, Workspace};

fn fixture(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/marian").join(variant)
}

struct Reference {
    json: serde_json::Value,
    tensors: Vec<u8>,
}

impl Reference {
    fn open(variant: &str) -> Self {
        let dir = fixture(variant);
        let json = serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
        Reference { json, tensors: std::fs::read(dir.join("reference.safetensors")).unwrap() }
    }
    fn ids(&self, key: &str) -> Vec<Vec<u32>> {
        self.json[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect())
            .collect()
    }
    fn tensor(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let t = st.tensor(name).unwrap();
        let v = t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        (t.shape().to_vec(), v)
    }
}

/// The id maps of an import: (source, target); the source map is the target's when shared.
fn maps(imp: &Imported) -> (IdMap, IdMap) {
    let t = &imp.tokenizer;
    let tv = t.target_vocab.as_ref().unwrap_or(&t.source_vocab);
    let start = |v: &transformer::import::marian::Vocab| v.id(&t.pad);
    let map = |v: &transformer::import::marian::Vocab| {
        IdMap::new(v.len(), start(v), v.id(&t.eos).unwrap(), v.id(&t.unk).unwrap()).unwrap()
    };
    (map(&t.source_vocab), map(tv))
}

/// Max |a − b| / max(1, |b|) over all elements.
fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / y.abs().max(1.0)).fold(0.0, f32::max)
}

fn check_numerics(variant: &str, dir: &str) {
    let mut imp = import(&fixture(variant).join(dir)).unwrap();
    if dir == "native" {
        // Marian's own sinusoid frequencies and LayerNorm ε differ from the port's that made the
        // reference: compare the weights under the port's settings (`native_model_settings`
        // checks Marian's).
        let c = &mut imp.checkpoint.config;
        (c.import.sinusoid_layout, c.layer_norm_eps) = (transformer::SinusoidLayout::Halves, 1e-5);
    }
    let r = Reference::open(variant);
    let (smap, tmap) = maps(&imp);
    let model = Transformer::from_params(imp.checkpoint.config.clone(), imp.checkpoint.params.clone()).unwrap();
    let (src, tgt) = (r.ids("source_ids"), r.ids("target_ids"));
    let v = model.config.vocab_size;
    let mut ws = Workspace::new();
    for i in 0..4 {
        let s: Vec<u32> = src[i].iter().map(|&x| smap.ours(x)).collect();
        // The labels end with </s>: the batch adds our EOS (Marian's </s>) itself.
        let t: Vec<u32> = tgt[i][..tgt[i].len() - 1].iter().map(|&x| tmap.ours(x)).collect();
        let batch = Batch::from_pairs(&[(s, t)]);
        model.forward(&batch, &mut ws, None).unwrap();
        let (shape, enc_ref) = r.tensor(&format!("encoder_output.{i}"));
        let enc = model.encoder_output(&ws);
        assert_eq!(enc.len(), enc_ref.len(), "{variant}/{dir}: encoder output shape {shape:?}");
        let e = max_rel(enc, &enc_ref);
        assert!(e < 1e-4, "{variant}/{dir} pair {i}: encoder output off by {e:e}");
        let (shape, logits_ref) = r.tensor(&format!("logits.{i}"));
        let (rows, vf) = (shape[0], shape[1]);
        // Our logits in the reference's id order; a column we do not have (a native model has
        // no <pad>, the port's decoder start) keeps the reference's value.
        let mut ours = logits_ref.clone();
        assert_eq!(v, vf + 1, "{variant}/{dir}: our vocabulary adds our own rows");
        for row in 0..rows {
            for j in 0..v {
                // A native model has no logit for the <pad> the import appends (masked).
                let pad = imp.tokenizer.target_vocab.as_ref().unwrap_or(&imp.tokenizer.source_vocab).id("<pad>");
                if let Some(f) = tmap.foreign(j as u32).filter(|&f| dir != "native" || Some(f) != pad) {
                    ours[row * vf + f as usize] = ws.logits[row * v + j];
                }
            }
        }
        let e = max_rel(&ours, &logits_ref);
        assert!(e < 1e-4, "{variant}/{dir} pair {i}: logits off by {e:e}");
    }
}

/// Events that fail the test on any warning or message.
struct NoWarnings;

impl transformer::events::Events for NoWarnings {
    fn log(&mut self, message: &str) {
        panic!("{message}");
    }
}

#[test]
fn hf_safetensors_numerics_equal_transformers() {
    for variant in ["opus", "relu_nobias", "gelu_separate"] {
        check_numerics(variant, "hf");
    }
}

#[test]
fn hf_pytorch_bin_numerics_equal_transformers() {
    for variant in ["opus", "relu_nobias", "gelu_separate"] {
        // The same directory without model.safetensors reads pytorch_model.bin.
        let tmp = tempdir(variant);
        for f in std::fs::read_dir(fixture(variant).join("hf")).unwrap() {
            let f = f.unwrap().path();
            if f.file_name().unwrap() != "model.safetensors" {
                std::fs::copy(&f, tmp.join(f.file_name().unwrap())).unwrap();
            }
        }
        let a = import(&fixture(variant).join("hf")).unwrap();
        let b = import(&tmp).unwrap();
        assert_eq!(b.source, "hf-pytorch");
        assert_eq!(a.checkpoint.config, b.checkpoint.config);
        assert!(a.checkpoint.params == b.checkpoint.params, "{variant}: the two formats give different weights");
    }
}

#[test]
fn native_npz_numerics_equal_transformers() {
    for variant in ["opus", "relu_nobias", "gelu_separate"] {
        check_numerics(variant, "native");
    }
}

#[test]
fn native_model_settings_are_marians() {
    let imp = import(&fixture("opus").join("native")).unwrap();
    let c = &imp.checkpoint.config;
    assert_eq!(c.import.sinusoid_layout, transformer::SinusoidLayout::Marian);
    assert_eq!(c.import.activation, transformer::Activation::Swish);
    assert!(c.import.output_bias && c.import.scale_embedding && c.import.source_vocab_size.is_none());
    let sep = import(&fixture("gelu_separate").join("native")).unwrap();
    // Marian's pieces, the appended <pad>, and our padding row.
    assert_eq!(sep.checkpoint.config.import.source_vocab_size, Some(sep.tokenizer.source_vocab.len() + 1));
    assert_eq!(sep.tokenizer.source_vocab.pieces.last().map(String::as_str), Some("<pad>"));
}

fn tempdir(name: &str) -> TestDir {
    TestDir::new(&format!("marian-test-{name}"))
}

/// The fixture imported (`import marian` + `write`) into a temporary directory and loaded as a
/// translator session, and the directory (removed when dropped).
fn session(variant: &str, dir: &str) -> (transformer::Translator, TestDir) {
    // A directory of its own for each call: tests that run at once must not remove each other's.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = tempdir(&format!("{variant}-{dir}-session-{n}"));
    let imp = import(&fixture(variant).join(dir)).unwrap();
    let (ckpt, tok) = transformer::import::marian::write(&imp, &out).unwrap();
    let t = transformer::Translator::load(&ckpt, &tok, Default::default()).unwrap();
    (t, out)
}

fn strings(r: &Reference, key: &str) -> Vec<String> {
    r.json[key].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[test]
fn tokenizer_ids_equal_marian_tokenizer() {
    for (variant, dir) in [("opus", "hf"), ("gelu_separate", "hf"), ("opus", "native"), ("gelu_separate", "native")] {
        let (t, _dir) = session(variant, dir);
        let r = Reference::open(variant);
        let transformer::data::tokenizer::Tokenizer::Marian(m) = t.tokenizer() else {
            panic!("not a Marian tokenizer")
        };
        let (smap, tmap) = m.maps();
        for (i, (s, ids)) in strings(&r, "sources").iter().zip(r.ids("source_ids")).enumerate() {
            // The tokenizer itself (the session reads a blank line as no ids at all: see
            // `greedy_output_equals_generate`).
            let ours: Vec<u32> = m.encode_source(s).iter().map(|&id| smap.foreign(id).unwrap()).collect();
            assert_eq!(ours, ids, "{variant}/{dir} source {i}: {s:?}");
        }
        for (i, (s, ids)) in strings(&r, "targets").iter().zip(r.ids("target_ids")).enumerate() {
            let mut ours: Vec<u32> = t.encode_target(s).unwrap().iter().map(|&id| tmap.foreign(id).unwrap()).collect();
            ours.push(ids[ids.len() - 1]); // our batches append EOS; MarianTokenizer appends </s>
            assert_eq!(ours, ids, "{variant}/{dir} target {i}: {s:?}");
        }
    }
}

#[test]
fn evaluate_nll_equals_the_transformers_loss() {
    for (variant, dir) in [("opus", "hf"), ("relu_nobias", "hf"), ("gelu_separate", "hf")] {
        let (t, _dir) = session(variant, dir);
        let r = Reference::open(variant);
        let totals = t.perplexity(&strings(&r, "sources"), &strings(&r, "targets"), &mut NoWarnings).unwrap();
        let ours = totals.nll / totals.tokens as f64;
        let want = r.json["mean_nll"].as_f64().unwrap();
        assert!((ours - want).abs() < 1e-4 * want, "{variant}: mean NLL {ours} vs transformers {want}");
        assert_eq!(totals.tokens, r.ids("target_ids").iter().map(Vec::len).sum::<usize>());
    }
}

#[test]
fn greedy_output_equals_generate() {
    use transformer::decode::translator::DecodeOptions;
    for variant in ["opus", "relu_nobias", "gelu_separate"] {
        let (t, _dir) = session(variant, "hf");
        let r = Reference::open(variant);
        let transformer::data::tokenizer::Tokenizer::Marian(m) = t.tokenizer() else { panic!("not Marian") };
        let tmap = m.maps().1.clone();
        let mut opts = DecodeOptions::default();
        opts.search.beam = 1;
        let (out, _) = t.translate(&strings(&r, "sources"), &opts, &mut NoWarnings).unwrap();
        let (want_ids, want_text) = (r.ids("greedy_ids"), strings(&r, "greedy_text"));
        for (i, (nbest, src)) in out.iter().zip(strings(&r, "sources")).enumerate() {
            if transformer::decode::translator::is_blank(&src) {
                // `generate` writes what the model makes of `</s>` alone; a blank line is
                // translated as an empty line here, never into invented text.
                assert!(nbest[0].text.is_empty() && nbest[0].hypothesis.tokens.is_empty(), "{variant} sentence {i}");
                continue;
            }
            let mut ids: Vec<u32> = nbest[0].hypothesis.tokens.iter().map(|&id| tmap.foreign(id).unwrap()).collect();
            ids.push(0); // </s>
            assert_eq!(ids, want_ids[i], "{variant} sentence {i}");
            assert_eq!(nbest[0].text, want_text[i], "{variant} sentence {i}");
        }
    }
}

/// Beam search on the imported model equals the rule of decode/beam.rs, written out naively over
/// teacher-forced forward passes: every live hypothesis extended by every token but PAD and BOS
/// (only EOS at the length limit, input + 50), the best candidates by log-probability (ties: lower
/// row, then lower id) filling the slots not taken by finished ones, finished ones scored
/// log P / ((5 + |Y|)/6)^0.6, the best finished one returned.
#[test]
fn beam_output_follows_the_documented_rule() {
    use transformer::decode::translator::DecodeOptions;
    use transformer::{BOS, EOS, PAD};
    let (t, _dir) = session("opus", "hf");
    let r = Reference::open("opus");
    let srcs = strings(&r, "sources");
    let (out, _) = t.translate(&srcs, &DecodeOptions::default(), &mut NoWarnings).unwrap();
    let m = t.model();
    let v = m.config.vocab_size;
    let mut ws = Workspace::new();
    let lp = |n: usize| ((5.0 + n as f64) / 6.0).powf(0.6);
    for (i, s) in srcs.iter().enumerate().take(6) {
        let src = t.encode_source(s).unwrap();
        let limit = src.len() + 50;
        let mut next = |prefix: &[u32]| -> Vec<f64> {
            let batch = Batch::from_pairs(&[(src.clone(), prefix.to_vec())]);
            m.forward(&batch, &mut ws, None).unwrap();
            let row = &ws.logits[prefix.len() * v..][..v];
            let mx = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
            let lse = mx + row.iter().map(|&x| (x as f64 - mx).exp()).sum::<f64>().ln();
            row.iter().map(|&x| x as f64 - lse).collect()
        };
        let (mut live, mut finished) = (vec![(Vec::<u32>::new(), 0.0f64)], Vec::<(Vec<u32>, f64)>::new());
        while !live.is_empty() {
            let mut cands = Vec::new();
            for (row, (prefix, logp)) in live.iter().enumerate() {
                let lps = next(prefix);
                for tok in 0..v as u32 {
                    let allowed = if prefix.len() >= limit { tok == EOS } else { tok != PAD && tok != BOS };
                    if allowed {
                        cands.push((logp + lps[tok as usize], row, tok));
                    }
                }
            }
            cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
            let free = 4 - finished.len();
            let mut next_live = Vec::new();
            for &(logp, row, tok) in cands.iter().take(free) {
                let mut y = live[row].0.clone();
                if tok == EOS {
                    finished.push((y.clone(), logp / lp(y.len() + 1)));
                } else {
                    y.push(tok);
                    next_live.push((y, logp));
                }
            }
            live = next_live;
        }
        finished.sort_by(|a, b| b.1.total_cmp(&a.1));
        assert_eq!(out[i][0].hypothesis.tokens, finished[0].0, "sentence {i}");
        assert!((out[i][0].hypothesis.score - finished[0].1).abs() < 1e-4);
    }
}

/// A copy of the native fixture's files into a fresh directory, `decoder.yml` left out.
fn native_copy(name: &str) -> TestDir {
    let (from, to) = (fixture("opus").join("native"), tempdir(name));
    for f in ["model.npz", "source.spm", "target.spm", "vocab.yml"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    to
}

/// Marian writes `decoder.yml`'s `models:` and `vocabs:` as they were where it was run; the import
/// finds them as Marian's decoder does: relative to the directory, else by file name in it.
#[test]
fn native_models_and_vocabularies_are_found_as_marians_decoder_finds_them() {
    let want = import(&fixture("opus").join("native")).unwrap().checkpoint.params;
    let dir = native_copy("paths");
    // Paths of the machine that trained it.
    std::fs::write(
        dir.join("decoder.yml"),
        "models:\n  - /home/someone/run/model.npz\nvocabs:\n  - /home/someone/run/vocab.yml\n  - /home/someone/run/vocab.yml\n",
    )
    .unwrap();
    assert_eq!(import(&dir).unwrap().checkpoint.params, want);
    // Relative paths, into a subdirectory.
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::rename(dir.join("model.npz"), dir.join("sub/model.npz")).unwrap();
    std::fs::write(dir.join("decoder.yml"), "models:\n  - sub/model.npz\nvocabs:\n  - vocab.yml\n  - vocab.yml\n")
        .unwrap();
    assert_eq!(import(&dir).unwrap().checkpoint.params, want);
    // A name that is nowhere: the error names what was looked for.
    std::fs::write(dir.join("decoder.yml"), "models:\n  - /tmp/elsewhere/other.npz\n").unwrap();
    let e = import(&dir).unwrap_err().to_string();
    assert!(e.contains("decoder.yml") && e.contains("other.npz") && e.contains("neither"), "{e}");
    // No decoder.yml: one `*.vocab.yml` (the OPUS-MT release name) is the shared vocabulary.
    let dir = native_copy("release-names");
    std::fs::rename(dir.join("vocab.yml"), dir.join("opus.spm32k-spm32k.vocab.yml")).unwrap();
    assert_eq!(import(&dir).unwrap().checkpoint.params, want);
    // None at all: the error lists what was looked for.
    std::fs::remove_file(dir.join("opus.spm32k-spm32k.vocab.yml")).unwrap();
    std::fs::remove_file(dir.join("target.spm")).unwrap();
    let e = import(&dir).unwrap_err().to_string();
    assert!(e.contains("no vocabularies") && e.contains("*.vocab.yml") && e.contains("vocab.src.yml"), "{e}");
}

/// Marian writes its `special:model.yml` as element type '<i1' (numpy writes '|i1'): both read.
#[test]
fn a_model_yml_written_by_marian_as_little_endian_int8_reads() {
    let dir = native_copy("i1");
    let model = dir.join("model.npz");
    common::rewrite_model_yml(&model, &model, |bytes| {
        let at = bytes.windows(3).position(|w| w == b"|i1").expect("numpy's int8 descr");
        bytes[at] = b'<';
    });
    let want = import(&fixture("opus").join("native")).unwrap().checkpoint.params;
    assert_eq!(import(&dir).unwrap().checkpoint.params, want);
}

/// What the Python package stands on, in the library: a model directory read by name, token
/// strings to ids and back (a Marian source gets its `</s>`), per-token log-probabilities that sum
/// to the pair's, and CTranslate2's compute types.
#[test]
fn a_model_directory_read_by_pieces_scores_as_the_text_does() {
    use transformer::data::tokenizer::Side;
    use transformer::decode::{contains_model, model_files};
    use transformer::Precision;
    let (t, out) = session("opus", "hf");
    let r = Reference::open("opus");
    assert_eq!(model_files(&out).unwrap(), (out.join("model.safetensors"), out.join("tokenizer.json")));
    assert!(contains_model(&out));
    // A Hugging Face directory is named as such; an empty one says what it lacks.
    let hf = fixture("opus").join("hf");
    assert!(!contains_model(&hf));
    let err = model_files(&hf).unwrap_err().to_string();
    assert!(err.contains("Hugging Face model directory: import it first"), "{err}");
    let empty = tempdir("model-dir-empty");
    let err = model_files(&empty).unwrap_err().to_string();
    assert!(err.contains("holds no checkpoint: looked for model.safetensors, best.safetensors"), "{err}");
    let err = model_files(&empty.join("missing")).unwrap_err();
    assert!(matches!(&err, transformer::Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound));
    // A run directory gives its last ckpt-*.safetensors; a quick start's tokenizer is in its run/.
    let run = tempdir("model-dir-run");
    for step in ["00000100", "00000900", "00000250"] {
        std::fs::copy(out.join("model.safetensors"), run.join(format!("ckpt-{step}.safetensors"))).unwrap();
    }
    std::fs::write(run.join("ckpt-notes.txt"), "not a checkpoint").unwrap();
    let err = model_files(&run).unwrap_err().to_string();
    assert!(
        err.contains("holds no tokenizer: looked for tokenizer.json, vocab.json, bpe.json in it and in its run/"),
        "{err}"
    );
    std::fs::create_dir(run.join("run")).unwrap();
    std::fs::copy(out.join("tokenizer.json"), run.join("run").join("vocab.json")).unwrap();
    assert_eq!(model_files(&run).unwrap(), (run.join("ckpt-00000900.safetensors"), run.join("run").join("vocab.json")));
    std::fs::copy(out.join("model.safetensors"), run.join("best.safetensors")).unwrap();
    assert_eq!(model_files(&run).unwrap().0, run.join("best.safetensors"));
    assert!(contains_model(&run));
    let tok = t.tokenizer();
    let (srcs, tgts) = (strings(&r, "sources"), strings(&r, "targets"));
    let mut pairs = Vec::new();
    for (s, g) in srcs.iter().zip(&tgts) {
        let ids = t.encode_source(s).unwrap();
        let pieces: Vec<String> = ids.iter().map(|&id| tok.piece_of_id(Side::Source, id).unwrap()).collect();
        // The pieces without `</s>` read back to the same ids, `</s>` appended (blank: `</s>` alone).
        let words = &pieces[..pieces.len().saturating_sub(1)];
        let back = tok.source_ids_of_pieces(words);
        if ids.is_empty() {
            assert_eq!(back, vec![transformer::EOS], "{s:?}");
        } else {
            assert_eq!(back, ids, "{s:?}");
        }
        let target = t.encode_target(g).unwrap();
        for &id in &target {
            assert_eq!(tok.id_of_piece(Side::Target, &tok.piece_of_id(Side::Target, id).unwrap()), Some(id));
        }
        pairs.push((back, target));
    }
    assert_eq!(tok.source_ids_of_pieces(&["no-such-piece"]), vec![transformer::UNK, transformer::EOS]);
    assert_eq!(tok.piece_of_id(Side::Target, tok.vocab_size() as u32), None);
    // Per-token log-probabilities: one a target token and EOS, summing to the text's scores.
    let per_token = t.token_log_probs(&pairs[..pairs.len() - 1]).unwrap();
    let whole = t.log_probs(&srcs[..pairs.len() - 1], &tgts[..pairs.len() - 1]).unwrap();
    for ((lp, w), (_, tgt)) in per_token.iter().zip(&whole).zip(&pairs) {
        assert_eq!(lp.len(), tgt.len() + 1);
        let sum: f64 = lp.iter().map(|&x| f64::from(x)).sum();
        assert!((sum - w.log_prob).abs() < 1e-9 * w.log_prob.abs().max(1.0), "{sum} vs {}", w.log_prob);
    }
    let err = t.token_log_probs(&[(Vec::new(), vec![5])]).unwrap_err().to_string();
    assert!(err.contains("line 1: cannot be scored: its source is empty"), "{err}");
    // CTranslate2's compute types.
    assert_eq!(Precision::from_compute_type("default", false).unwrap(), Precision::F32);
    assert_eq!(Precision::from_compute_type("default", true).unwrap(), Precision::Int8);
    for (name, p) in [("float32", Precision::F32), ("int8", Precision::Int8), ("int8_float32", Precision::Int8)] {
        assert_eq!(Precision::from_compute_type(name, false).unwrap(), p);
    }
    let err = Precision::from_compute_type("float16", false).unwrap_err().to_string();
    assert!(err.contains("compute_type \"float16\" is not supported: use one of default, auto"), "{err}");
    let int8 = transformer::Translator::load_dir_as(&out, "int8", transformer::Task::Translation).unwrap();
    assert_eq!(int8.model().prepared().map(|p| p.precision()), Some(Precision::Int8));
}
