//! The native Marian reader and `export marian` given hostile files (issue: hardening, round 4):
//! an `.npz` whose entries together inflate past what the archive could hold, header counts that
//! would build millions of names, a FIFO for a model, `decoder.yml` paths that reach files outside
//! the model's directory, vocabularies with a piece twice, options this import does not compute,
//! and an export into a directory holding dangling links. Each is refused with an error naming the
//! file, quickly, quoting nothing of a file that is not what it should be, and leaving nothing.

mod common;

use common::TestDir;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use transformer::import::marian::import;

fn fixture(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/marian").join(variant)
}

fn real(variant: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/marian-real").join(variant)
}

/// The native OPUS-like fixture's files in a fresh directory, `decoder.yml` left out.
fn native_copy(name: &str) -> TestDir {
    let (from, to) = (fixture("opus").join("native"), TestDir::new(&format!("import-round4-{name}")));
    for f in ["model.npz", "source.spm", "target.spm", "vocab.yml"] {
        std::fs::copy(from.join(f), to.join(f)).unwrap();
    }
    to
}

/// A `.npy` file: version 1.0 header for `descr` and `shape`, then `data`.
fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut b = b"\x93NUMPY\x01\x00".to_vec();
    b.extend((h.len() as u16).to_le_bytes());
    b.extend(h.as_bytes());
    b.extend(data);
    b
}

/// An `.npz` of `(name, bytes)` entries, deflated.
fn npz(path: &Path, entries: &[(String, Vec<u8>)]) {
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    for (name, bytes) in entries {
        zip.start_file(format!("{name}.npy"), opts).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap();
}

/// The audit's bomb, scaled down: many entries of zeros, each under the per-entry bound (4 × the
/// archive + 1 MiB), together far past it. Before, every array was inflated and held first.
#[test]
fn a_zip_bomb_spread_over_many_npz_entries_is_refused_by_its_total() {
    let dir = TestDir::new("import-round4-npz-bomb");
    let zeros = vec![0u8; 1 << 20];
    let entries: Vec<(String, Vec<u8>)> =
        (0..64).map(|i| (format!("w{i}"), npy("<f2", &format!("({},)", zeros.len() / 2), &zeros))).collect();
    let path = dir.join("model.npz");
    npz(&path, &entries);
    let archive = std::fs::metadata(&path).unwrap().len();
    let per_entry = 4 * archive + (1 << 20);
    assert!(entries[0].1.len() as u64 <= per_entry, "each entry stays under the per-entry bound");
    assert!(64 * entries[0].1.len() as u64 > per_entry, "together they are past it");
    let e = transformer::import::npz::read_npz(&path).unwrap_err().to_string();
    assert!(e.contains("model.npz") && e.contains("in all"), "{e}");
    // Through the importer, the same.
    let e = import(dir.path()).unwrap_err().to_string();
    assert!(e.contains("in all"), "{e}");
}

/// An archive whose central directory declares small sizes while its entries inflate to far more:
/// what is read is counted against the same bound as what is declared.
#[test]
fn an_npz_that_understates_its_sizes_is_refused_as_it_inflates() {
    let dir = TestDir::new("import-round4-npz-lies");
    let zeros = vec![0u8; 1 << 20];
    let entries: Vec<(String, Vec<u8>)> =
        (0..64).map(|i| (format!("w{i}"), npy("<f2", &format!("({},)", zeros.len() / 2), &zeros))).collect();
    let path = dir.join("model.npz");
    npz(&path, &entries);
    // Every local and central header says each entry inflates to 100 bytes.
    let mut bytes = std::fs::read(&path).unwrap();
    let (mut local, mut central) = (0, 0);
    for at in 0..bytes.len().saturating_sub(30) {
        match &bytes[at..at + 4] {
            b"PK\x03\x04" => {
                bytes[at + 22..at + 26].copy_from_slice(&100u32.to_le_bytes());
                local += 1;
            }
            b"PK\x01\x02" => {
                bytes[at + 24..at + 28].copy_from_slice(&100u32.to_le_bytes());
                central += 1;
            }
            _ => {}
        }
    }
    assert_eq!((local, central), (64, 64));
    std::fs::write(&path, bytes).unwrap();
    let e = transformer::import::npz::read_npz(&path).unwrap_err().to_string();
    assert!(
        e.contains("model.npz") && !e.contains("expand to"),
        "refused as it inflates, not by what it declares: {e}"
    );
}

/// A `special:model.yml` with a depth of three million: refused by its count at once, before a
/// name is built for any layer (before, 41 s and 2.2 GB at 300,000; out of memory at 3,000,000).
#[test]
fn a_huge_depth_in_model_yml_is_refused_before_anything_is_built() {
    for (depth, key) in [(3_000_000usize, "enc-depth"), (300_000, "enc-depth")] {
        let dir = TestDir::new("import-round4-depth");
        let yml = format!("type: transformer\nenc-depth: {depth}\ndec-depth: {depth}\n\0");
        npz(
            &dir.join("model.npz"),
            &[("special:model.yml".into(), npy("|i1", &format!("({},)", yml.len()), yml.as_bytes()))],
        );
        let start = Instant::now();
        let e = import(dir.path()).unwrap_err().to_string();
        assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
        assert!(e.contains("model.npz") && e.contains(&format!("{key} {depth}")) && e.contains("at most 1024"), "{e}");
    }
}

/// A FIFO named `model.npz` and no `decoder.yml`: the `.npz` is picked as a regular file or not at
/// all (before, `import` blocked on opening it for ever).
#[test]
fn a_fifo_named_model_npz_is_refused_not_waited_on() {
    let dir = native_copy("fifo");
    std::fs::remove_file(dir.join("model.npz")).unwrap();
    let made = std::process::Command::new("mkfifo").arg(dir.join("model.npz")).status().unwrap();
    assert!(made.success());
    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(import(&path).map(|_| ()).map_err(|e| e.to_string()));
    });
    let got = rx.recv_timeout(Duration::from_secs(20)).expect("import blocked on the FIFO");
    let e = got.unwrap_err();
    assert!(e.contains("nor a .npz model"), "{e}");
    // Named as the model by decoder.yml, it is not a file either: refused, not opened; and the
    // reader itself refuses what is not a regular file.
    std::fs::write(dir.join("decoder.yml"), "models:\n  - model.npz\nvocabs:\n  - vocab.yml\n  - vocab.yml\n").unwrap();
    let path = dir.path().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(import(&path).map(|_| ()).map_err(|e| e.to_string()));
    });
    let e = rx.recv_timeout(Duration::from_secs(20)).expect("import blocked on the FIFO").unwrap_err();
    assert!(e.contains("decoder.yml") && e.contains("model.npz"), "{e}");
    let e = transformer::import::npz::read_npz(&dir.join("model.npz")).unwrap_err().to_string();
    assert!(e.contains("not a regular file"), "{e}");
}

/// `decoder.yml` naming files elsewhere: the file of that name beside the model wins over an
/// absolute or parent path, and a file that is not a vocabulary is named, never quoted.
#[test]
fn decoder_yml_paths_prefer_the_files_beside_the_model_and_quote_nothing() {
    let want = import(&fixture("opus").join("native")).unwrap().checkpoint.params;
    let dir = native_copy("paths");
    let elsewhere = TestDir::new("import-round4-elsewhere");
    // Another vocabulary, of other pieces, at the absolute path decoder.yml names.
    let other: String = (0..1175).map(|i| format!("p{i}: {i}\n")).collect();
    std::fs::write(elsewhere.join("vocab.yml"), other).unwrap();
    let abs = elsewhere.join("vocab.yml").display().to_string();
    std::fs::write(dir.join("decoder.yml"), format!("models:\n  - model.npz\nvocabs:\n  - {abs}\n  - {abs}\n"))
        .unwrap();
    assert_eq!(import(dir.path()).unwrap().checkpoint.params, want, "the vocabulary beside the model wins");
    // A parent path too: the namesake beside the model wins over the file it names.
    let name = format!("{}-vocab.yml", dir.path().file_name().unwrap().to_str().unwrap());
    let parent = dir.path().parent().unwrap().join(&name);
    std::fs::write(&parent, "this is no vocabulary\n").unwrap();
    std::fs::copy(dir.join("vocab.yml"), dir.join(&name)).unwrap();
    std::fs::write(dir.join("decoder.yml"), format!("models:\n  - model.npz\nvocabs:\n  - ../{name}\n  - ../{name}\n"))
        .unwrap();
    assert_eq!(import(dir.path()).unwrap().checkpoint.params, want);
    // With no namesake, a parent path is followed as Marian follows it: from the model's
    // directory, not from where the command runs (the one-line file there is no vocabulary).
    std::fs::remove_file(dir.join(&name)).unwrap();
    let e = import(dir.path()).unwrap_err().to_string();
    std::fs::remove_file(&parent).unwrap();
    assert!(e.contains(&name) && e.contains("line 1"), "read from beside the directory: {e}");
    // A secret file with no namesake beside the model: followed (as Marian does), but its content
    // is never quoted; the error names the file and line.
    std::fs::write(elsewhere.join("secret.txt"), "root:x:0:0: hunter2-SECRET-4242\n").unwrap();
    let secret = elsewhere.join("secret.txt").display().to_string();
    std::fs::write(dir.join("decoder.yml"), format!("models:\n  - model.npz\nvocabs:\n  - {secret}\n  - {secret}\n"))
        .unwrap();
    let e = import(dir.path()).unwrap_err().to_string();
    assert!(e.contains("secret.txt") && e.contains("line 1"), "{e}");
    assert!(!e.contains("hunter2") && !e.contains("SECRET"), "the file's content is quoted: {e}");
}

/// A `.yml` vocabulary with a piece twice (directly, or through an escape that reads as the same
/// piece, or a bad escape): named by file and line, not "special id … outside the vocabulary".
#[test]
fn a_yml_vocabulary_with_a_piece_twice_or_a_bad_escape_names_the_file_and_line() {
    let dir = native_copy("dup-piece");
    let text = std::fs::read_to_string(dir.join("vocab.yml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (piece, _) = lines[10].rsplit_once(':').unwrap();
    for (edit, want) in [
        (format!("{piece}: 20"), "line 21: the piece of line 11 again"),
        ("\"\\q\": 20".to_string(), "line 21: an escape YAML does not have"),
        ("\"ab\\x4\": 20".to_string(), "line 21: a bad"),
    ] {
        let mut l = lines.clone();
        l[20] = &edit;
        std::fs::write(dir.join("vocab.yml"), l.join("\n") + "\n").unwrap();
        let e = import(dir.path()).unwrap_err().to_string();
        assert!(e.contains("vocab.yml") && e.contains(want), "{edit}: {e}");
        assert!(!e.contains("outside the vocabulary"), "{e}");
    }
}

/// `special:model.yml` stored as float32: "stored as numbers", not "missing".
#[test]
fn a_model_yml_stored_as_numbers_is_named_as_such() {
    let dir = native_copy("f4-yml");
    let model = dir.join("model.npz");
    common::rewrite_model_yml(&model, &model, |bytes| {
        let at = bytes.windows(3).position(|w| w == b"|i1").expect("numpy's int8 descr");
        bytes[at..at + 3].copy_from_slice(b"<f4");
        // The shape's count of bytes becomes a count of floats: a quarter, padded to its length.
        let find = |pat: &[u8]| bytes.windows(pat.len()).position(|w| w == pat).unwrap();
        let (open, close) = (find(b"'shape': (") + 10, find(b",), }"));
        let n: usize = std::str::from_utf8(&bytes[open..close]).unwrap().parse().unwrap();
        let quarter = format!("{:<width$}", n / 4, width = close - open);
        bytes[open..close].copy_from_slice(quarter.as_bytes());
    });
    let e = import(dir.path()).unwrap_err().to_string();
    assert!(e.contains("special:model.yml is stored as numbers"), "{e}");
}

/// Options Marian has and this import does not compute import no more as a different model: each
/// is refused by name; an unknown key too. The real Marian's 58 keys at their values import.
#[test]
fn model_yml_options_this_import_does_not_compute_are_refused_by_name() {
    let variant = real("tied_all_relu");
    for (from, to, want) in [
        (
            "transformer-attention-mask: default",
            "transformer-attention-mask: alibi  ",
            "transformer-attention-mask: \"alibi\" is not supported",
        ),
        ("transformer-pool: false", "transformer-pool: true ", "transformer-pool: \"true\" is not supported"),
        ("factors-dim-emb: 0", "factors-dim-emb: 8", "factors-dim-emb: \"8\""),
        (
            "right-left: false",
            "right-lefty: no  ",
            "does not know, which may change what the model computes: right-lefty",
        ),
    ] {
        let dir = TestDir::new("import-round4-keys");
        for f in std::fs::read_dir(&variant).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(&f, dir.join(f.file_name().unwrap())).unwrap();
        }
        common::rewrite_model_yml(&variant.join("model.npz"), &dir.join("model.npz"), |bytes| {
            assert_eq!(from.len(), to.len());
            let at = bytes.windows(from.len()).position(|w| w == from.as_bytes()).unwrap_or_else(|| panic!("{from}"));
            bytes[at..at + from.len()].copy_from_slice(to.as_bytes());
        });
        let e = import(dir.path()).unwrap_err().to_string();
        assert!(e.contains("model.npz") && e.contains(want), "{to}: {e}");
    }
    // As Marian wrote them, every fixture imports.
    for v in ["tied_all_relu", "tied_target_swish", "tied_all_gelu", "untied"] {
        let r = import(&real(v));
        assert!(r.is_ok() || r.as_ref().err().unwrap().to_string().contains("untied output"), "{v}: {:?}", r.err());
    }
}
