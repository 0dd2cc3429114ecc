//! Downloading corpora with SHA-256 verification: Multi30k task 1 (Elliott et al., 2016), raw text,
//! from the dataset's GitHub repository or from a local mirror. A file is kept in the cache only
//! once its checksum matches; a cached file is checked again before it is reused.

use crate::error::{Error, Result};
use crate::events::Events;
use crate::io::{io_err, write_atomically};
use sha2::{Digest, Sha256};
#[cfg(feature = "download")]
use std::io::Read;
use std::path::{Path, PathBuf};
#[cfg(feature = "download")]
use std::time::Duration;

/// Where Multi30k task 1 raw files are published.
pub const MULTI30K_URL: &str = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/";

/// Environment variable naming a local mirror directory to use instead of the network.
pub const MIRROR_ENV: &str = "TRANSFORMER_MULTI30K_MIRROR";

/// Every Multi30k task 1 raw file with its SHA-256.
pub const MULTI30K_FILES: [(&str, &str); 12] = [
    ("train.en.gz", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"),
    ("train.de.gz", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"),
    ("train.fr.gz", "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c"),
    ("train.cs.gz", "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077"),
    ("val.en.gz", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
    ("val.de.gz", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
    ("val.fr.gz", "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9"),
    ("val.cs.gz", "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc"),
    ("test_2016_flickr.en.gz", "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"),
    ("test_2016_flickr.de.gz", "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"),
    ("test_2016_flickr.fr.gz", "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90"),
    ("test_2016_flickr.cs.gz", "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1"),
];

/// Where files come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A base URL; the file name is appended.
    Url(String),
    /// A local directory holding the files.
    Dir(PathBuf),
    /// The copies built into this library ([`EMBEDDED_MULTI30K`]: English and German of train, val
    /// and test_2016_flickr).
    Embedded,
}

/// Multi30k task 1 English–German (train, val, test_2016_flickr), raw and gzip-compressed as
/// published, carried in the repository (`data/multi30k/`, with provenance and checksums) and
/// built into the library so that `quickstart` needs no network and no mirror.
pub const EMBEDDED_MULTI30K: [(&str, &[u8]); 6] = [
    ("train.en.gz", include_bytes!("../../../../data/multi30k/train.en.gz")),
    ("train.de.gz", include_bytes!("../../../../data/multi30k/train.de.gz")),
    ("val.en.gz", include_bytes!("../../../../data/multi30k/val.en.gz")),
    ("val.de.gz", include_bytes!("../../../../data/multi30k/val.de.gz")),
    ("test_2016_flickr.en.gz", include_bytes!("../../../../data/multi30k/test_2016_flickr.en.gz")),
    ("test_2016_flickr.de.gz", include_bytes!("../../../../data/multi30k/test_2016_flickr.de.gz")),
];

/// The Multi30k files of one language pair and the three standard splits, with their checksums:
/// `[train.src, train.tgt, val.src, val.tgt, test_2016_flickr.src, test_2016_flickr.tgt]`. An
/// error names the languages that exist.
pub fn multi30k_pair(src: &str, tgt: &str) -> Result<Vec<(&'static str, &'static str)>> {
    const LANGS: [&str; 4] = ["en", "de", "fr", "cs"];
    for l in [src, tgt] {
        if !LANGS.contains(&l) {
            return Err(Error::Config(format!("Multi30k task 1 has no language {l:?}; it has en, de, fr and cs")));
        }
    }
    if src == tgt {
        return Err(Error::Config(format!("source and target are both {src:?}: give two different languages")));
    }
    let mut out = Vec::with_capacity(6);
    for split in ["train", "val", "test_2016_flickr"] {
        for l in [src, tgt] {
            let name = format!("{split}.{l}.gz");
            let entry = MULTI30K_FILES.iter().find(|(n, _)| *n == name).expect("every split and language is listed");
            out.push(*entry);
        }
    }
    Ok(out)
}

/// SHA-256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

fn fetch(source: &Source, name: &str) -> Result<Vec<u8>> {
    match source {
        Source::Embedded => match EMBEDDED_MULTI30K.iter().find(|(n, _)| *n == name) {
            Some((_, bytes)) => Ok(bytes.to_vec()),
            None => Err(Error::Config(format!(
                "{name} is not built in (only English and German are); download it first: transformer data multi30k"
            ))),
        },
        Source::Dir(dir) => {
            let p = dir.join(name);
            std::fs::read(&p).map_err(io_err(&p))
        }
        Source::Url(base) => {
            let url = format!("{}{name}", if base.ends_with('/') { base.clone() } else { format!("{base}/") });
            fetch_url(url)
        }
    }
}

fn fetch_url(url: String) -> Result<Vec<u8>> {
    fetch_url_with(&url, &format!("--from DIR or ${MIRROR_ENV}"), &mut |_, _| {})
}

/// Fetches `url` whole (at most 1 GiB), telling `progress` the bytes read so far and the length the
/// server announced, if it did. Errors say how to do without the network: `mirror_hint` (e.g.
/// `--from DIR or $TRANSFORMER_MULTI30K_MIRROR`).
#[cfg(feature = "download")]
pub(crate) fn fetch_url_with(
    url: &str,
    mirror_hint: &str,
    progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Vec<u8>> {
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(20))
        .timeout_read(Duration::from_secs(60))
        .build();
    let resp = agent.get(url).call().map_err(|e| Error::Download {
        url: url.to_string(),
        reason: match e {
            ureq::Error::Status(code, _) => {
                format!("HTTP status {code}; check the URL or use a local mirror ({mirror_hint})")
            }
            other => format!("{other}; check the network or use a local mirror ({mirror_hint})"),
        },
    })?;
    // The announced length, for the progress bar only (a compressed transfer announces the
    // compressed length; a truncated body is caught by the checksums).
    let total = match resp.header("Content-Encoding") {
        Some(_) => None,
        None => resp.header("Content-Length").and_then(|v| v.trim().parse::<u64>().ok()),
    };
    let mut reader = resp.into_reader().take(1 << 30);
    let mut bytes = Vec::with_capacity(total.unwrap_or(0).min(1 << 26) as usize);
    let mut buf = vec![0u8; 1 << 16];
    progress(0, total);
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Download { url: url.to_string(), reason: e.to_string() }),
        };
        bytes.extend_from_slice(&buf[..n]);
        progress(bytes.len() as u64, total);
    }
    Ok(bytes)
}

#[cfg(not(feature = "download"))]
pub(crate) fn fetch_url_with(
    url: &str,
    mirror_hint: &str,
    _progress: &mut dyn FnMut(u64, Option<u64>),
) -> Result<Vec<u8>> {
    Err(Error::Download {
        url: url.to_string(),
        reason: format!(
            "this binary was built without downloads (the `download` feature is off); use a local mirror ({mirror_hint}) or rebuild with default features"
        ),
    })
}

/// Makes every file of `files` present and verified in `cache`, fetching what is missing or
/// corrupt from `source`. Returns the cached paths. `log` hears one line per file.
pub fn fetch_verified(
    source: &Source,
    files: &[(&str, &str)],
    cache: &Path,
    events: &mut dyn Events,
) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(cache).map_err(io_err(cache))?;
    let mut out = Vec::with_capacity(files.len());
    for &(name, sha) in files {
        let dest = cache.join(name);
        if let Ok(bytes) = std::fs::read(&dest) {
            if sha256_hex(&bytes) == sha {
                events.log(&format!("{name}: cached, checksum ok"));
                out.push(dest);
                continue;
            }
            events.log(&format!("{name}: cached copy is corrupt, fetching again"));
        }
        let bytes = fetch(source, name)?;
        let found = sha256_hex(&bytes);
        if found != sha {
            return Err(Error::Checksum { file: name.to_string(), expected: sha.to_string(), found });
        }
        write_atomically(&dest, &bytes)?;
        events.log(&format!("{name}: {} bytes, checksum ok", bytes.len()));
        out.push(dest);
    }
    Ok(out)
}

#[cfg(all(test, not(feature = "download")))]
mod tests {
    use super::*;

    #[test]
    fn without_the_feature_urls_are_a_clear_error_and_mirrors_work() {
        // A cache directory that does not exist yet, inside one removed when the test ends.
        let tmp = tempfile::Builder::new().prefix("transformer-dl-nofeature-").tempdir().unwrap();
        let cache = tmp.path().join("cache");
        let err = fetch_verified(&Source::Url("http://127.0.0.1:9/".into()), &MULTI30K_FILES[..1], &cache, &mut ())
            .unwrap_err()
            .to_string();
        assert!(err.contains("built without downloads") && err.contains("--from DIR"), "{err}");
        let mirror = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/multi30k");
        let paths = fetch_verified(&Source::Dir(mirror), &MULTI30K_FILES[4..5], &cache, &mut ()).unwrap();
        assert_eq!(paths, [cache.join("val.en.gz")]);
    }
}
