//! The downloaders against a local HTTP server on 127.0.0.1 serving a mirror. Multi30k: verified
//! downloads, the cache, a corrupted file (checksum error, nothing kept) and a missing file. The
//! Penn Treebank sample: an archive of stand-in files refused (checksums, a missing file, damage),
//! the nltk_data search; and, where ../shared has the verified copy, NLTK's treebank.zip rebuilt
//! from it, then the same, and the treebank of nltk_data directories and local mirrors.

mod common;

use common::TestDir;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use transformer::data::download::{fetch_verified, sha256_hex, Source, MULTI30K_FILES};
use transformer::Error;

/// The repository's built-in Multi30k (English and German): the mirror the tests serve.
fn built_in() -> PathBuf {
    transformer::test_support::repo("data/multi30k")
}

/// The files of `MULTI30K_FILES` the repository carries (English and German).
fn en_de() -> Vec<(&'static str, &'static str)> {
    MULTI30K_FILES.iter().copied().filter(|(n, _)| n.contains(".en.") || n.contains(".de.")).collect()
}

/// Serves files of `dir` over HTTP on 127.0.0.1 (404 for missing ones) from a background thread
/// that stops by itself after 60 s or 100 requests. Returns the base URL and the request counter.
fn serve(dir: PathBuf) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline && c.load(Ordering::SeqCst) < 100 {
            let Ok((stream, _)) = listener.accept() else {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            };
            stream.set_nonblocking(false).unwrap();
            c.fetch_add(1, Ordering::SeqCst);
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                    break;
                }
            }
            let name = request.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_string();
            let mut stream = stream;
            match std::fs::read(dir.join(&name)) {
                Ok(body) => {
                    write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len())
                        .unwrap();
                    stream.write_all(&body).unwrap();
                }
                Err(_) => {
                    write!(stream, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap()
                }
            }
        }
    });
    (url, count)
}

/// What a fetch told: its lines, and the last count of a download's bytes.
#[derive(Default)]
struct Heard {
    lines: Vec<String>,
    last: (u64, Option<u64>),
}

impl transformer::events::Events for Heard {
    fn log(&mut self, message: &str) {
        self.lines.push(message.to_string());
    }

    fn download(&mut self, done: u64, total: Option<u64>) {
        self.last = (done, total);
    }
}

fn tmpdir(name: &str) -> TestDir {
    TestDir::new(&format!("transformer-dl-{name}"))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn downloads_verify_and_cache() {
    let files = en_de();
    assert_eq!(files.len(), 6);
    let (url, count) = serve(built_in());
    let cache = tmpdir("ok");
    let paths = fetch_verified(&Source::Url(url.clone()), &files, &cache, &mut ()).unwrap();
    assert_eq!(paths.len(), 6);
    for (p, (_, sha)) in paths.iter().zip(&files) {
        assert_eq!(sha256_hex(&std::fs::read(p).unwrap()), *sha);
    }
    assert_eq!(count.load(Ordering::SeqCst), 6);
    // Second call: everything comes from the verified cache.
    fetch_verified(&Source::Url(url), &files, &cache, &mut ()).unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 6, "cached files must not be fetched again");
    // A local mirror works the same way.
    let cache2 = tmpdir("mirror");
    fetch_verified(&Source::Dir(built_in()), &MULTI30K_FILES[..2], &cache2, &mut ()).unwrap();
    assert_eq!(files_in(&cache2), ["train.de.gz", "train.en.gz"]);
}

/// Extra check: the checksums of all twelve files (French and Czech included) against the copy of
/// every language in ../shared, served as a download is.
#[test]
fn shared_every_language_verifies_against_the_mirror() {
    let Some(mirror) = transformer::test_support::shared("data/multi30k") else { return };
    let (url, count) = serve(mirror);
    let cache = tmpdir("all-languages");
    let paths = fetch_verified(&Source::Url(url), &MULTI30K_FILES, &cache, &mut ()).unwrap();
    assert_eq!(paths.len(), 12);
    for (p, (_, sha)) in paths.iter().zip(MULTI30K_FILES) {
        assert_eq!(sha256_hex(&std::fs::read(p).unwrap()), sha);
    }
    assert_eq!(count.load(Ordering::SeqCst), 12);
}

#[test]
fn corrupted_file_is_a_checksum_error_and_is_not_kept() {
    let mirror = tmpdir("corrupt-mirror");
    for (name, _) in &MULTI30K_FILES[4..6] {
        std::fs::copy(built_in().join(name), mirror.join(name)).unwrap();
    }
    let mut bytes = std::fs::read(mirror.join("val.de.gz")).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(mirror.join("val.de.gz"), bytes).unwrap();
    let (url, _) = serve(mirror.to_path_buf());
    let cache = tmpdir("corrupt");
    let err = fetch_verified(&Source::Url(url), &MULTI30K_FILES[4..6], &cache, &mut ()).unwrap_err();
    assert!(matches!(err, Error::Checksum { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("val.de.gz") && msg.contains("f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
        "{msg}"
    );
    assert_eq!(files_in(&cache), ["val.en.gz"], "the corrupt file must not be kept");
}

#[test]
fn missing_file_is_an_error_naming_the_url() {
    let mirror = tmpdir("missing-mirror");
    std::fs::copy(built_in().join("val.en.gz"), mirror.join("val.en.gz")).unwrap();
    let (url, _) = serve(mirror.to_path_buf());
    let cache = tmpdir("missing");
    let err = fetch_verified(&Source::Url(url.clone()), &MULTI30K_FILES[4..6], &cache, &mut ()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Download { .. }), "{msg}");
    assert!(msg.contains(&format!("{url}val.de.gz")) && msg.contains("404"), "{msg}");
    // A missing local mirror file names its path.
    let err = fetch_verified(&Source::Dir(cache.join("nowhere")), &MULTI30K_FILES[..1], &cache, &mut ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nowhere/train.en.gz"), "{err}");
}

// The Penn Treebank sample (`data ptb-sample`): NLTK's treebank.zip rebuilt from the verified copy
// in ../shared, served on 127.0.0.1, taken from nltk_data directories and local mirrors.

mod ptb {
    use super::{files_in, serve, tmpdir, Heard, TestDir};
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::Ordering;
    use transformer::data::download::sha256_hex;
    use transformer::data::ptb_sample::{
        fetch_ptb_sample, find_nltk_treebank, nltk_data_dirs, TreebankSource, PTB_SAMPLE_FILES,
    };
    use transformer::Error;

    /// The verified copy, or `None` (with a message) where this checkout has no ../shared: these
    /// tests check the real sample's checksums, so only the real sample will do.
    fn sample() -> Option<PathBuf> {
        transformer::test_support::shared("data/ptb-sample")
    }

    /// A change to one file of the archive: its new bytes, or `None` to leave it out.
    type Change = dyn Fn(&str, Vec<u8>) -> Option<Vec<u8>>;

    /// NLTK's layout: `treebank/combined/*.mrg`, `treebank/README`, and other folders we must
    /// ignore. `change(name, bytes)` may alter or drop (`None`) a file; `extra` adds files.
    fn treebank_zip(sample: &Path, change: &Change, extra: &[(&str, &[u8])]) -> Vec<u8> {
        let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        zip.add_directory("treebank/", opts).unwrap();
        zip.start_file("treebank/README", opts).unwrap();
        zip.write_all(&std::fs::read(sample.join("README.orig")).unwrap()).unwrap();
        for (name, _) in PTB_SAMPLE_FILES {
            if let Some(bytes) = change(name, std::fs::read(sample.join(name)).unwrap()) {
                zip.start_file(format!("treebank/combined/{name}"), opts).unwrap();
                zip.write_all(&bytes).unwrap();
            }
        }
        zip.start_file("treebank/parsed/wsj_0001.prd", opts).unwrap();
        zip.write_all(b"( (S (NP Pierre Vinken) ))\n").unwrap();
        for (name, bytes) in extra {
            zip.start_file(*name, opts).unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap().into_inner()
    }

    fn unchanged(_: &str, b: Vec<u8>) -> Option<Vec<u8>> {
        Some(b)
    }

    const EXTRA: &[(&str, &[u8])] = &[("treebank/combined/wsj_0199.mrg", b"( (S (NP (NN x)) ))\n")];

    #[test]
    fn shared_downloads_verify_keep_the_readme_and_cache() {
        let Some(sample) = sample() else { return };
        let served = tmpdir("ptb-served");
        std::fs::write(served.join("treebank.zip"), treebank_zip(&sample, &unchanged, EXTRA)).unwrap();
        let (url, count) = serve(served.to_path_buf());
        let source = TreebankSource::Url(format!("{url}treebank.zip"));
        let dest_dir = tmpdir("ptb-dest");
        let dest = dest_dir.join("ptb-sample");
        let mut heard = Heard::default();
        let got = fetch_ptb_sample(&source, &dest, &mut heard).unwrap();
        let Heard { lines, last } = heard;
        let zip_len = std::fs::metadata(served.join("treebank.zip")).unwrap().len();
        assert_eq!(last, (zip_len, Some(zip_len)), "the progress ends at the whole archive");
        assert_eq!((got.verified, got.cached), (189, false));
        assert_eq!(got.unverified, ["wsj_0199.mrg"]);
        assert!(lines.iter().any(|l| l.contains("wsj_0199.mrg kept unverified")), "{lines:?}");
        for (name, sha) in PTB_SAMPLE_FILES {
            assert_eq!(sha256_hex(&std::fs::read(dest.join(name)).unwrap()), sha, "{name}");
        }
        assert_eq!(std::fs::read(dest.join("README")).unwrap(), std::fs::read(sample.join("README.orig")).unwrap());
        let names = files_in(&dest);
        assert_eq!(names.len(), 191, "189 verified, 1 unverified, the README; nothing else: {names:?}");
        assert_eq!(count.load(Ordering::SeqCst), 1);
        // Again: the verified copy is kept and nothing is fetched.
        let again = fetch_ptb_sample(&source, &dest, &mut ()).unwrap();
        assert_eq!((again.cached, again.unverified.as_slice()), (true, &["wsj_0199.mrg".to_string()][..]));
        assert_eq!(count.load(Ordering::SeqCst), 1, "a verified copy must not be fetched again");
        // A corrupt file in the copy: fetched again, and repaired.
        std::fs::write(dest.join("wsj_0042.mrg"), b"(damaged").unwrap();
        let repaired = fetch_ptb_sample(&source, &dest, &mut ()).unwrap();
        assert!(!repaired.cached);
        assert_eq!(count.load(Ordering::SeqCst), 2);
        assert_eq!(sha256_hex(&std::fs::read(dest.join("wsj_0042.mrg")).unwrap()), PTB_SAMPLE_FILES[41].1);
    }

    /// The sample's file names holding the project's own trees (tests/treebank) instead of the
    /// sample's, and a README: an archive that looks like NLTK's and fails every checksum.
    fn stand_in() -> TestDir {
        let dir = tmpdir("ptb-stand-in");
        let trees = std::fs::read(transformer::test_support::treebank().join("own_0001.mrg")).unwrap();
        for (name, _) in PTB_SAMPLE_FILES {
            std::fs::write(dir.join(name), &trees).unwrap();
        }
        std::fs::write(dir.join("README.orig"), "a stand-in for the Penn Treebank sample\n").unwrap();
        dir
    }

    /// What needs no real sample: an archive or a directory whose files fail their checksums is
    /// refused naming the first, and nothing is written; an incomplete or damaged archive and a
    /// missing URL are refused saying what to do; the nltk_data search finds an archive and
    /// explains an empty directory. (Fetching the real sample, its cache and its repair are the
    /// extra checks `shared_…` below.)
    #[test]
    fn refusals_and_the_nltk_data_search_need_no_real_sample() {
        let stand_in = stand_in();
        let served = tmpdir("ptb-stand-in-served");
        std::fs::write(served.join("treebank.zip"), treebank_zip(&stand_in, &unchanged, EXTRA)).unwrap();
        std::fs::write(
            served.join("short.zip"),
            treebank_zip(&stand_in, &|n, b| (n != "wsj_0150.mrg").then_some(b), &[]),
        )
        .unwrap();
        let mut damaged = treebank_zip(&stand_in, &unchanged, &[]);
        let n = damaged.len();
        for b in &mut damaged[n / 2..n / 2 + 16] {
            *b ^= 0xff;
        }
        std::fs::write(served.join("damaged.zip"), damaged).unwrap();
        let (url, count) = serve(served.to_path_buf());
        let dest_dir = tmpdir("ptb-stand-in-dest");
        let dest = dest_dir.join("ptb-sample");

        for source in [
            TreebankSource::Url(format!("{url}treebank.zip")),
            TreebankSource::local(&served.join("treebank.zip")),
            TreebankSource::local(&stand_in),
        ] {
            let err = fetch_ptb_sample(&source, &dest, &mut ()).unwrap_err();
            assert!(matches!(err, Error::Checksum { .. }), "{err}");
            let msg = err.to_string();
            assert!(msg.contains("wsj_0001.mrg") && msg.contains(PTB_SAMPLE_FILES[0].1), "{msg}");
            assert!(!dest.exists(), "nothing may be written when a file is corrupt");
        }
        assert_eq!(count.load(Ordering::SeqCst), 1);

        let err =
            fetch_ptb_sample(&TreebankSource::Url(format!("{url}short.zip")), &dest, &mut ()).unwrap_err().to_string();
        assert!(err.contains("has no wsj_0150.mrg") && err.contains("1 of the sample's 189 files missing"), "{err}");
        let err = fetch_ptb_sample(&TreebankSource::Url(format!("{url}damaged.zip")), &dest, &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("damaged.zip") && err.contains("fetch it again"), "{err}");
        let err = fetch_ptb_sample(&TreebankSource::Url(format!("{url}missing.zip")), &dest, &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("404") && err.contains("--from-nltk-data DIR"), "{err}");
        assert!(!dest.exists());

        // NLTK's search order, and an archive found in the second directory searched.
        let dirs = nltk_data_dirs(Some("/a:/b".as_ref()), Some(Path::new("/home/u")));
        assert_eq!(&dirs[..3], [Path::new("/a"), Path::new("/b"), Path::new("/home/u/nltk_data")]);
        assert_eq!(dirs[3], Path::new("/usr/share/nltk_data"));
        let root = tmpdir("ptb-stand-in-nltk");
        let (empty, zipped) = (root.join("empty"), root.join("zipped"));
        std::fs::create_dir_all(empty.join("corpora")).unwrap();
        std::fs::create_dir_all(zipped.join("corpora")).unwrap();
        std::fs::copy(served.join("treebank.zip"), zipped.join("corpora/treebank.zip")).unwrap();
        let (found, source) = find_nltk_treebank(&[empty.clone(), zipped.clone()]).unwrap();
        assert_eq!((found, &source), (zipped.clone(), &TreebankSource::Zip(zipped.join("corpora/treebank.zip"))));
        let err = TreebankSource::from_nltk_data(&empty).unwrap_err().to_string();
        assert!(err.contains("python -m nltk.downloader") && err.contains("empty"), "{err}");
    }

    #[test]
    fn shared_a_checksum_mismatch_names_the_file_and_writes_nothing() {
        let Some(sample) = sample() else { return };
        let served = tmpdir("ptb-corrupt-served");
        let altered = |name: &str, mut b: Vec<u8>| {
            if name == "wsj_0100.mrg" {
                let n = b.len() / 2;
                b[n] ^= 0x20;
            }
            Some(b)
        };
        std::fs::write(served.join("treebank.zip"), treebank_zip(&sample, &altered, EXTRA)).unwrap();
        std::fs::write(
            served.join("short.zip"),
            treebank_zip(&sample, &|n, b| (n != "wsj_0150.mrg").then_some(b), &[]),
        )
        .unwrap();
        // A damaged archive: bytes flipped inside a compressed member.
        let mut damaged = treebank_zip(&sample, &unchanged, &[]);
        let n = damaged.len();
        for b in &mut damaged[n / 2..n / 2 + 16] {
            *b ^= 0xff;
        }
        std::fs::write(served.join("damaged.zip"), damaged).unwrap();
        let (url, _) = serve(served.to_path_buf());
        let dest_dir = tmpdir("ptb-corrupt");
        let dest = dest_dir.join("ptb-sample");

        let err = fetch_ptb_sample(&TreebankSource::Url(format!("{url}treebank.zip")), &dest, &mut ()).unwrap_err();
        assert!(matches!(err, Error::Checksum { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("wsj_0100.mrg") && msg.contains(PTB_SAMPLE_FILES[99].1), "{msg}");
        assert!(!dest.exists(), "nothing may be written when a file is corrupt");

        let err =
            fetch_ptb_sample(&TreebankSource::Url(format!("{url}short.zip")), &dest, &mut ()).unwrap_err().to_string();
        assert!(err.contains("has no wsj_0150.mrg") && err.contains("1 of the sample's 189 files missing"), "{err}");
        assert!(!dest.exists());

        let err = fetch_ptb_sample(&TreebankSource::Url(format!("{url}damaged.zip")), &dest, &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("damaged.zip") && err.contains("fetch it again"), "{err}");
        assert!(!dest.exists());

        let err = fetch_ptb_sample(&TreebankSource::Url(format!("{url}missing.zip")), &dest, &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("404") && err.contains("--from-nltk-data DIR"), "{err}");
    }

    #[test]
    fn shared_nltk_data_directories_and_local_mirrors() {
        let Some(sample) = sample() else { return };
        // NLTK's search order: $NLTK_DATA's entries, ~/nltk_data, then the system directories.
        let dirs = nltk_data_dirs(Some("/a:/b".as_ref()), Some(Path::new("/home/u")));
        assert_eq!(&dirs[..3], [Path::new("/a"), Path::new("/b"), Path::new("/home/u/nltk_data")]);
        assert_eq!(dirs[3], Path::new("/usr/share/nltk_data"));
        assert_eq!(nltk_data_dirs(None, None)[0], Path::new("/usr/share/nltk_data"));

        // A zip as NLTK's downloader leaves it, in the second directory searched.
        let root = tmpdir("ptb-nltk");
        let (empty, zipped, unpacked) = (root.join("empty"), root.join("zipped"), root.join("unpacked"));
        std::fs::create_dir_all(empty.join("corpora")).unwrap();
        std::fs::create_dir_all(zipped.join("corpora")).unwrap();
        std::fs::write(zipped.join("corpora/treebank.zip"), treebank_zip(&sample, &unchanged, EXTRA)).unwrap();
        let (found, source) = find_nltk_treebank(&[empty.clone(), zipped.clone()]).unwrap();
        assert_eq!((found, &source), (zipped.clone(), &TreebankSource::Zip(zipped.join("corpora/treebank.zip"))));
        let dest = root.join("from-zip");
        let got = fetch_ptb_sample(&source, &dest, &mut ()).unwrap();
        assert_eq!((got.verified, got.unverified.len()), (189, 1));
        assert_eq!(files_in(&dest).len(), 191);

        // Unpacked (corpora/treebank/combined), which is preferred to the zip.
        let combined = unpacked.join("corpora/treebank/combined");
        std::fs::create_dir_all(&combined).unwrap();
        for (name, _) in PTB_SAMPLE_FILES {
            std::fs::copy(sample.join(name), combined.join(name)).unwrap();
        }
        let source = TreebankSource::from_nltk_data(&unpacked).unwrap();
        assert_eq!(source, TreebankSource::Dir(combined));
        let dest = root.join("from-dir");
        let mut heard = Heard::default();
        let got = fetch_ptb_sample(&source, &dest, &mut heard).unwrap();
        let lines = heard.lines;
        assert!(got.unverified.is_empty());
        // That directory has no README: the terms are written in its place.
        assert!(lines.iter().any(|l| l.contains("has no README")), "{lines:?}");
        let readme = std::fs::read_to_string(dest.join("README")).unwrap();
        assert!(readme.contains("non-commercial use only") && readme.contains("University of Pennsylvania"));

        let err = TreebankSource::from_nltk_data(&empty).unwrap_err().to_string();
        assert!(err.contains("python -m nltk.downloader") && err.contains("empty"), "{err}");

        // A local mirror: the verified copy itself (its README is README.orig).
        let dest = root.join("from-mirror");
        let got = fetch_ptb_sample(&TreebankSource::local(&sample), &dest, &mut ()).unwrap();
        assert_eq!((got.verified, got.cached), (189, false));
        assert_eq!(std::fs::read(dest.join("README")).unwrap(), std::fs::read(sample.join("README.orig")).unwrap());
        // A mirror that is a zip file.
        assert_eq!(
            TreebankSource::local(&zipped.join("corpora/treebank.zip")),
            TreebankSource::Zip(zipped.join("corpora/treebank.zip"))
        );
    }
}
