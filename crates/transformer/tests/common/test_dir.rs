//! [`TestDir`], shared by both crates' tests (the CLI's include this file by path).

/// A test's working directory, `PREFIX-XXXXXX` in the system temp dir: removed when the test
/// ends, kept (its path printed to stderr) when the test fails, so a failure can be inspected.
/// Dereferences to its `Path`; keep it alive for as long as the path is used.
pub struct TestDir(Option<tempfile::TempDir>);

impl TestDir {
    /// A new, empty directory whose name starts with `prefix-`.
    pub fn new(prefix: &str) -> TestDir {
        let dir =
            tempfile::Builder::new().prefix(&format!("{prefix}-")).tempdir().expect("creates a temporary directory");
        TestDir(Some(dir))
    }

    pub fn path(&self) -> &std::path::Path {
        self.0.as_ref().expect("present until dropped").path()
    }
}

impl std::ops::Deref for TestDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        self.path()
    }
}

impl AsRef<std::path::Path> for TestDir {
    fn as_ref(&self) -> &std::path::Path {
        self.path()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            if std::thread::panicking() {
                eprintln!("kept {}", dir.keep().display());
            }
            // Otherwise `dir` is dropped here, removing the directory and everything in it.
        }
    }
}
