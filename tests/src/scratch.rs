//! Names no other test, process or run uses, and temporary directories.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A name unique across tests and runs, usable as pool and netns name.
pub fn unique(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 1_000_000;
    format!("{prefix}-{}-{t}-{n}", std::process::id() % 100_000)
}

/// The `prefix` of a name made by [`unique`], and the process part.
pub(crate) fn unique_prefix(name: &str) -> Option<(&str, &str)> {
    let mut parts = name.rsplitn(4, '-');
    let (n, t, pid) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(n) && digits(t) && digits(pid)).then(|| parts.next().map(|prefix| (prefix, pid))).flatten()
}

/// A fresh, empty temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates `$TMPDIR/<unique(prefix)>`.
    pub fn new(prefix: &str) -> Self {
        let d = std::env::temp_dir().join(unique(prefix));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }

    /// `self/rel`.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
