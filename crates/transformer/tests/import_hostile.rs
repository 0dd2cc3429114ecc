//! The Marian importer given hostile files (issue: hardening, round 3): pickles that would exhaust
//! memory or the stack, weights that are not numbers, files that never end, settings that are not
//! settings, and an output directory that is the input. Each case is refused with an error that
//! names the file, and nothing that was read is ever written over.

mod common;

use common::TestDir;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use transformer::import::marian::{import, write};
use transformer::import::pickle::{tensor_views, MAX_DEPTH, MAX_VALUES};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/marian/opus/hf")
}

fn tempdir(name: &str) -> TestDir {
    TestDir::new(&format!("import-hostile-{name}"))
}

/// A copy of the Hugging Face fixture in a fresh directory, without the files in `leave_out`.
fn copy_fixture(name: &str, leave_out: &[&str]) -> TestDir {
    let d = tempdir(name);
    for f in std::fs::read_dir(fixture()).unwrap() {
        let f = f.unwrap().path();
        let file = f.file_name().unwrap().to_str().unwrap().to_string();
        if !leave_out.contains(&file.as_str()) {
            std::fs::copy(&f, d.join(&file)).unwrap();
        }
    }
    d
}

/// The fixture's `data.pkl`, a real `torch.save` state dict pickle.
fn fixture_pickle() -> Vec<u8> {
    let file = std::fs::File::open(fixture().join("pytorch_model.bin")).unwrap();
    let mut zip = zip::ZipArchive::new(file).unwrap();
    let mut pkl = Vec::new();
    zip.by_name("pytorch_model/data.pkl").unwrap().read_to_end(&mut pkl).unwrap();
    pkl
}

/// Writes `pkl` as the only entry of `dir/pytorch_model.bin`.
fn write_pickle_archive(dir: &Path, pkl: &[u8]) {
    let file = std::fs::File::create(dir.join("pytorch_model.bin")).unwrap();
    let mut zip = zip::ZipWriter::new(file);
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("archive/data.pkl", options).unwrap();
    zip.write_all(pkl).unwrap();
    zip.finish().unwrap();
}

/// `{'a': x}` where x starts as a 1-tuple and each of `levels` levels makes it `(x, x)` from the
/// value and a memo read of it: 2^levels leaves if every read copied its value (the audit's
/// 457-byte bomb, built the same way, has 63 levels).
fn memo_bomb(levels: u8) -> Vec<u8> {
    let mut p = b"\x80\x02}X\x01\x00\x00\x00aK\x01\x85q\x00".to_vec();
    for i in 1..=levels {
        p.extend_from_slice(&[b'h', i - 1, 0x86, b'q', i]);
    }
    p.extend_from_slice(b"s.");
    p
}

#[test]
fn a_memo_bomb_is_read_in_constant_memory_and_refused_as_no_tensor() {
    // Before the memo shared its values, 63 levels asked for 2^63 copies (the audit saw 4 GB in
    // 10 s, then an abort); now each level is one node.
    let err = tensor_views(&memo_bomb(63)).unwrap_err();
    assert!(err.contains("a is a tuple of 2 values, not a tensor"), "{err}");

    // The same through `import marian`: the error names the archive.
    let dir = copy_fixture("memo-bomb", &["model.safetensors", "pytorch_model.bin"]);
    write_pickle_archive(&dir, &memo_bomb(63));
    let err = import(&dir).unwrap_err().to_string();
    assert!(err.contains("pytorch_model.bin") && err.contains("not a tensor"), "{err}");
}

#[test]
fn nesting_past_the_depth_bound_is_refused_not_a_stack_overflow() {
    let nested = |err: String| assert!(err.contains(&format!("nested deeper than {MAX_DEPTH}")), "{err}");
    // 100,000 nested 1-tuples (TUPLE1): an abort before the bound.
    let mut p = b"\x80\x02}X\x01\x00\x00\x00aK\x01".to_vec();
    p.extend(std::iter::repeat_n(0x85u8, 100_000));
    p.extend_from_slice(b"s.");
    nested(tensor_views(&p).unwrap_err());
    // 1,000,000 MARKs closed by as many TUPLEs.
    let mut p = b"\x80\x02".to_vec();
    p.extend(std::iter::repeat_n(b'(', 1_000_000));
    p.extend(std::iter::repeat_n(b't', 1_000_000));
    p.push(b'.');
    nested(tensor_views(&p).unwrap_err());
    // 200,000 nested dicts: } ('a' })×n then SETITEM ×n.
    let mut p = b"\x80\x02}".to_vec();
    for _ in 0..200_000 {
        p.extend_from_slice(b"X\x01\x00\x00\x00a}");
    }
    p.extend(std::iter::repeat_n(b's', 200_000));
    p.push(b'.');
    nested(tensor_views(&p).unwrap_err());
    // A memo bomb deeper than the bound.
    nested(tensor_views(&memo_bomb(MAX_DEPTH as u8 + 5)).unwrap_err());
    // Exactly at the bound is read: MAX_DEPTH − 1 nested 1-tuples inside the dict.
    let mut p = b"\x80\x02}X\x01\x00\x00\x00aK\x01".to_vec();
    p.extend(std::iter::repeat_n(0x85u8, MAX_DEPTH - 1));
    p.extend_from_slice(b"s.");
    let err = tensor_views(&p).unwrap_err();
    assert!(err.contains("not a tensor"), "{err}");
}

#[test]
fn changing_a_shared_list_again_and_again_is_bounded() {
    // A 1,000-element list put in the memo, then fetched and appended to 100,000 times: each
    // change copies the shared list first, 10^8 copies in all; the count of values built stops it.
    let mut p = b"\x80\x02]q\x00(".to_vec();
    p.extend(std::iter::repeat_n(*b"K\x01", 1000).flatten());
    p.extend_from_slice(b"eq\x00");
    for _ in 0..100_000 {
        p.extend_from_slice(b"h\x00K\x01a");
    }
    p.push(b'.');
    let err = tensor_views(&p).unwrap_err();
    assert!(err.contains(&format!("more than {MAX_VALUES} values")), "{err}");
}

#[test]
fn mutated_state_dict_pickles_never_panic() {
    // A bounded fuzz of the pickle reader from a real torch.save pickle: bytes flipped, cut,
    // repeated and spliced. Every outcome must be a value or an error, never a panic or an abort.
    let pkl = fixture_pickle();
    let views = tensor_views(&pkl).unwrap();
    assert!(views.len() > 30, "the fixture has {} tensors", views.len());
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let (mut ok, mut refused) = (0, 0);
    for _ in 0..3000 {
        let mut p = pkl.clone();
        for _ in 0..1 + next(4) {
            let at = next(p.len());
            match next(5) {
                0 => p[at] = next(256) as u8,
                1 => p.truncate(at),
                2 => {
                    let len = next(64).min(p.len() - at);
                    let chunk = p[at..at + len].to_vec();
                    for _ in 0..1 + next(50) {
                        p.splice(at..at, chunk.iter().copied());
                    }
                }
                3 => {
                    let end = (at + next(32)).min(p.len());
                    p.drain(at..end);
                }
                _ => {
                    let from = next(p.len());
                    let len = next(32).min(p.len() - from);
                    let chunk = p[from..from + len].to_vec();
                    p.splice(at..at, chunk);
                }
            }
            if p.is_empty() {
                break;
            }
        }
        match tensor_views(&p) {
            Ok(_) => ok += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(ok > 0 && refused > 0, "{ok} read, {refused} refused");
}

#[test]
fn an_import_never_writes_into_the_directory_it_reads() {
    let dir = copy_fixture("same-dir", &[]);
    let before = std::fs::read(dir.join("model.safetensors")).unwrap();
    let imported = import(&dir).unwrap();
    for out in [dir.to_path_buf(), dir.join("../").join(dir.file_name().unwrap()), dir.join(".")] {
        let err = write(&imported, &out).unwrap_err().to_string();
        assert!(err.contains("where the model is read from") && err.contains("--output"), "{err}");
    }
    assert_eq!(std::fs::read(dir.join("model.safetensors")).unwrap(), before, "the input weights changed");
    assert!(!dir.join("tokenizer.json").exists(), "a tokenizer.json was written into the input directory");
    // An output file linked to an input file is refused too.
    let out = tempdir("same-dir-linked");
    std::os::unix::fs::symlink(dir.join("model.safetensors"), out.join("model.safetensors")).unwrap();
    let err = write(&imported, &out).unwrap_err().to_string();
    assert!(err.contains("where the model is read from"), "{err}");
    assert_eq!(std::fs::read(dir.join("model.safetensors")).unwrap(), before);
    // Another directory is fine.
    let out = tempdir("same-dir-other");
    let (ckpt, tok) = write(&imported, &out).unwrap();
    assert!(ckpt.is_file() && tok.is_file());
    // The verbs that need a BPE vocabulary (parse, prepare) say what the tokenizer file is.
    let err = transformer::data::bpe::Bpe::load(&tok).err().unwrap().to_string();
    assert!(err.contains("tokenizer.json") && err.contains("an imported model's tokenizer"), "{err}");
}

#[test]
fn a_failed_write_leaves_no_partial_output() {
    // Refused before anything is written: no directory is made.
    let mut bad = import(&fixture()).unwrap();
    bad.checkpoint.params[7] = f32::NAN;
    let partial = tempdir("partial");
    let out = partial.join("new/deeper");
    assert!(write(&bad, &out).is_err());
    assert!(!out.parent().unwrap().exists(), "a refused import made its output directory");
    // A failure after both files are written (the model's name is taken by a directory): neither
    // file is left, and an existing tokenizer.json is not replaced by one that does not match.
    let imported = import(&fixture()).unwrap();
    let out = tempdir("partial-late");
    std::fs::create_dir(out.join("model.safetensors")).unwrap();
    std::fs::write(out.join("tokenizer.json"), "the user's file").unwrap();
    assert!(write(&imported, &out).is_err());
    let mut left: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, ["model.safetensors", "tokenizer.json"], "a failed import left {left:?}");
    assert_eq!(std::fs::read_to_string(out.join("tokenizer.json")).unwrap(), "the user's file");
}

#[test]
fn a_non_finite_weight_is_named_by_its_tensor_and_file() {
    let dir = copy_fixture("nan", &["model.safetensors"]);
    let bytes = std::fs::read(fixture().join("model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let target = "model.encoder.layers.0.fc1.weight";
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> =
        st.tensors().into_iter().map(|(name, v)| (name, v.dtype(), v.shape().to_vec(), v.data().to_vec())).collect();
    let t = owned.iter_mut().find(|t| t.0 == target).expect("the fixture has the tensor");
    assert_eq!(t.1, safetensors::Dtype::F32);
    t.3[12..16].copy_from_slice(&f32::NAN.to_le_bytes());
    let views =
        owned.iter().map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()));
    std::fs::write(dir.join("model.safetensors"), safetensors::serialize(views, &None).unwrap()).unwrap();
    let err = import(&dir).unwrap_err().to_string();
    assert!(err.contains("model.safetensors") && err.contains(target) && err.contains("NaN at element 3"), "{err}");
}

#[test]
fn files_that_never_end_are_refused_with_their_name() {
    if !Path::new("/dev/zero").exists() {
        eprintln!("skipped: no /dev/zero");
        return;
    }
    for file in ["source.spm", "vocab.json"] {
        let dir = copy_fixture(&format!("endless-{file}"), &[file]);
        std::os::unix::fs::symlink("/dev/zero", dir.join(file)).unwrap();
        let err = import(&dir).unwrap_err().to_string();
        assert!(err.contains(file) && err.contains("not a regular file"), "{file}: {err}");
        // A regular file past the bound (sparse: no disk is written) is refused by its size.
        std::fs::remove_file(dir.join(file)).unwrap();
        std::fs::File::create(dir.join(file)).unwrap().set_len(65 << 20).unwrap();
        let err = import(&dir).unwrap_err().to_string();
        assert!(err.contains(file) && err.contains("larger than"), "{file}: {err}");
    }
}

#[test]
fn settings_that_are_not_a_json_object_are_refused() {
    for file in ["config.json", "tokenizer_config.json"] {
        let dir = copy_fixture(&format!("array-{file}"), &[file]);
        std::fs::write(dir.join(file), "[1, 2, 3]").unwrap();
        let err = import(&dir).unwrap_err().to_string();
        assert!(err.contains(file) && err.contains("not a JSON object"), "{file}: {err}");
    }
}

#[test]
fn a_bad_sentencepiece_model_is_named() {
    let dir = copy_fixture("bad-spm", &["target.spm"]);
    std::fs::write(dir.join("target.spm"), b"\x0a\xff\xff\xff\xff\x0f").unwrap();
    let err = import(&dir).unwrap_err().to_string();
    assert!(err.contains("target.spm") && err.contains("not a SentencePiece model"), "{err}");
}

#[test]
fn an_imported_model_translates_blank_lines_as_empty_lines() {
    // The Marian tokenizer appends `</s>` to every line, so a blank line used to reach the model
    // as a sentence and come back as invented text.
    let imported = import(&fixture()).unwrap();
    let out = tempdir("blank");
    let (ckpt, tok) = write(&imported, &out).unwrap();
    let t = transformer::Translator::load(&ckpt, &tok, Default::default()).unwrap();
    let input: Vec<String> = ["", " ", "\u{200B}", "\u{200B}\u{FEFF}"].map(String::from).to_vec();
    let opts = transformer::decode::translator::DecodeOptions::default();
    let (res, _) = t.translate(&input, &opts, &mut ()).unwrap();
    for (line, nbest) in input.iter().zip(&res) {
        assert!(nbest.iter().all(|x| x.text.is_empty() && x.hypothesis.log_prob == 0.0), "{line:?} gave {nbest:?}");
    }
    // A line with a word is searched: its output has a probability below one.
    let (res, _) = t.translate(&["hello".to_string()], &opts, &mut ()).unwrap();
    assert!(res[0][0].hypothesis.log_prob < 0.0, "{:?}", res[0][0]);
}

#[test]
fn a_zip_bomb_inside_a_model_archive_is_refused_before_it_is_read() {
    // 64 MB of zeros deflate to about 64 KB: an entry 1,000 times its archive.
    let dir = tempdir("zip-bomb");
    let path = dir.join("model.npz");
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("Wemb.npy", options).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        zip.write_all(&zeros).unwrap();
    }
    zip.finish().unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < 1 << 20);
    let err = transformer::import::npz::read_npz(&path).unwrap_err().to_string();
    // Refused by what the archive declares before anything is inflated.
    assert!(err.contains("expand to 67108864 bytes in all"), "{err}");
}
