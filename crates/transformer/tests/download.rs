//! The Multi30k downloader against a local HTTP server on 127.0.0.1 serving a mirror: verified
//! downloads, the cache, a corrupted file (checksum error, nothing kept) and a missing file.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use transformer::data::download::{fetch_verified, sha256_hex, Source, MULTI30K_FILES};
use transformer::Error;

fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/multi30k")
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

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("transformer-dl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn downloads_verify_and_cache() {
    let (url, count) = serve(shared());
    let cache = tmpdir("ok");
    let paths = fetch_verified(&Source::Url(url.clone()), &MULTI30K_FILES, &cache, &mut |_| {}).unwrap();
    assert_eq!(paths.len(), 12);
    for (p, (_, sha)) in paths.iter().zip(MULTI30K_FILES) {
        assert_eq!(sha256_hex(&std::fs::read(p).unwrap()), sha);
    }
    assert_eq!(count.load(Ordering::SeqCst), 12);
    // Second call: everything comes from the verified cache.
    fetch_verified(&Source::Url(url), &MULTI30K_FILES, &cache, &mut |_| {}).unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 12, "cached files must not be fetched again");
    // A local mirror works the same way.
    let cache2 = tmpdir("mirror");
    fetch_verified(&Source::Dir(shared()), &MULTI30K_FILES[..2], &cache2, &mut |_| {}).unwrap();
    assert_eq!(files_in(&cache2), ["train.de.gz", "train.en.gz"]);
}

#[test]
fn corrupted_file_is_a_checksum_error_and_is_not_kept() {
    let mirror = tmpdir("corrupt-mirror");
    for (name, _) in &MULTI30K_FILES[4..6] {
        std::fs::copy(shared().join(name), mirror.join(name)).unwrap();
    }
    let mut bytes = std::fs::read(mirror.join("val.de.gz")).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0xff;
    std::fs::write(mirror.join("val.de.gz"), bytes).unwrap();
    let (url, _) = serve(mirror);
    let cache = tmpdir("corrupt");
    let err = fetch_verified(&Source::Url(url), &MULTI30K_FILES[4..6], &cache, &mut |_| {}).unwrap_err();
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
    std::fs::copy(shared().join("val.en.gz"), mirror.join("val.en.gz")).unwrap();
    let (url, _) = serve(mirror);
    let cache = tmpdir("missing");
    let err = fetch_verified(&Source::Url(url.clone()), &MULTI30K_FILES[4..6], &cache, &mut |_| {}).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Download { .. }), "{msg}");
    assert!(msg.contains(&format!("{url}val.de.gz")) && msg.contains("404"), "{msg}");
    // A missing local mirror file names its path.
    let err = fetch_verified(&Source::Dir(cache.join("nowhere")), &MULTI30K_FILES[..1], &cache, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("nowhere/train.en.gz"), "{err}");
}
