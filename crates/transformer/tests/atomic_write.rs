//! A writer killed in the middle of `write_atomically` (SIGKILL, a child process) leaves the old
//! file whole: the new bytes only ever appear under the file's name complete.

mod common;

use common::TestDir;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const TARGET_ENV: &str = "TRANSFORMER_ATOMIC_WRITE_TARGET";
/// Big enough that writing it takes a while, so the parent can kill the child in the middle.
const NEW_LEN: usize = 256 << 20;

/// The child: rewrites the target with NEW_LEN bytes of 0xAB, again and again, until killed. Run
/// only by the parent test below (ignored otherwise).
#[test]
#[ignore = "the child process of a_writer_killed_mid_write_leaves_the_old_file_intact"]
fn atomic_write_child() {
    let target = PathBuf::from(std::env::var(TARGET_ENV).expect("run by the parent test"));
    let data = vec![0xABu8; NEW_LEN];
    loop {
        transformer::io::write_atomically(&target, &data).unwrap();
    }
}

#[test]
fn a_writer_killed_mid_write_leaves_the_old_file_intact() {
    let dir = TestDir::new("transformer-atomic-kill");
    let target = dir.join("file.bin");
    let old = b"the old contents, complete".to_vec();
    let mut caught_mid_write = 0;
    for attempt in 0..20 {
        std::fs::write(&target, &old).unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "atomic_write_child", "--test-threads", "1"])
            .env(TARGET_ENV, &target)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Kill as soon as one of the child's temporary files (`.file.bin.tmp.PID.N`) holds bytes.
        let prefix = format!(".file.bin.tmp.{}.", child.id());
        let child_tmp = || {
            std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).find(|p| {
                p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
                    && std::fs::metadata(p).is_ok_and(|m| m.len() > 0)
            })
        };
        let start = Instant::now();
        let mut tmp = None;
        while tmp.is_none() && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_micros(200));
            tmp = child_tmp();
        }
        let tmp = tmp.unwrap_or_default();
        child.kill().unwrap();
        child.wait().unwrap();
        let now = std::fs::read(&target).unwrap();
        // Whatever happened, the file is whole: the old contents or a complete new version.
        assert!(
            now == old || (now.len() == NEW_LEN && now.iter().all(|&b| b == 0xAB)),
            "attempt {attempt}: the file holds {} bytes that are neither the old nor a complete new version",
            now.len()
        );
        let partial = std::fs::metadata(&tmp).map(|m| m.len() as usize).unwrap_or(0);
        if now == old && partial > 0 && partial < NEW_LEN {
            caught_mid_write += 1;
            if caught_mid_write >= 3 {
                break;
            }
        }
        let _ = std::fs::remove_file(&tmp);
    }
    assert!(caught_mid_write >= 3, "the child was never killed in the middle of a write ({caught_mid_write} times)");
}
