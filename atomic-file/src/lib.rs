//! Replaces a file atomically: the one way netendpoint writes a file that
//! someone else may be reading (the plugin's node-local hints, the files the
//! installer puts on the host, the agent's state file).
//!
//! [`write()`] fills a temporary file in the destination's directory and renames
//! it over the destination. Readers see the old content or the new, never a
//! mix, and a binary being executed keeps its old inode. What survives a crash
//! or a power loss is the caller's explicit choice ([`Durability`]), because it
//! has a price: an fsync'd pair of writes costs the plugin 7 ms, more than half
//! of an ADD.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a completed [`write()`] guarantees after a crash of the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Atomic only: after a power loss the file may hold the old content (or,
    /// on some filesystems, be empty). For hints whose loss is harmless.
    RenameOnly,
    /// Atomic and durable: the file and the directory entry are fsync'd, so
    /// the new content survives a power loss once `write` returns.
    Fsync,
}

/// How [`write()`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// What survives a crash.
    pub durability: Durability,
    /// Permission bits of the new file, applied whatever the umask; `None`
    /// leaves them to the umask, as `File::create` does.
    pub mode: Option<u32>,
}

impl Options {
    /// Not durable, default permissions: for hints whose loss is harmless.
    pub const HINT: Self = Self { durability: Durability::RenameOnly, mode: None };

    /// Durable, with permission bits `mode`: for files others depend on.
    pub const fn durable(mode: u32) -> Self {
        Self { durability: Durability::Fsync, mode: Some(mode) }
    }
}

/// Distinguishes the temporary files of concurrent writes within one process.
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// Replaces `dest` with what `fill` writes, atomically and as durably as
/// `opts` says. The directory of `dest` must exist.
///
/// The temporary file is `.<name>.<pid>.<n>.tmp` beside `dest`: hidden, and
/// ending in `.tmp`, so neither a CNI runtime (which loads
/// `.conf`/`.conflist`/`.json`) nor a plugin lookup ever picks it up. It is
/// removed when anything fails, `fill` included; `dest` is then untouched.
pub fn write(dest: &Path, opts: Options, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    let dir = dest.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut open = OpenOptions::new();
        open.write(true).create_new(true);
        if let Some(mode) = opts.mode {
            open.mode(mode);
        }
        let mut f = match open.open(&tmp) {
            // Left over from a crash of an earlier process that had our pid.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                fs::remove_file(&tmp)?;
                open.open(&tmp)?
            }
            other => other?,
        };
        fill(&mut f)?;
        f.flush()?;
        if let Some(mode) = opts.mode {
            // The umask may have masked `mode` at creation.
            f.set_permissions(fs::Permissions::from_mode(mode))?;
        }
        if opts.durability == Durability::Fsync {
            f.sync_all()?;
        }
        drop(f);
        fs::rename(&tmp, dest)?;
        if opts.durability == Durability::Fsync {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// [`write()`] of the bytes `data`.
pub fn write_bytes(dest: &Path, opts: Options, data: &[u8]) -> io::Result<()> {
    write(dest, opts, |f| f.write_all(data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("atomic-file-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        names
    }

    #[test]
    fn replaces_content_and_sets_the_mode_whatever_the_umask() {
        let dir = scratch("mode");
        let dest = dir.join("f");
        for (opts, data, mode) in
            [(Options::durable(0o600), "one", 0o600), (Options::durable(0o644), "two", 0o644), (Options::HINT, "3", 0)]
        {
            write_bytes(&dest, opts, data.as_bytes()).unwrap();
            assert_eq!(fs::read_to_string(&dest).unwrap(), data);
            if mode != 0 {
                assert_eq!(fs::metadata(&dest).unwrap().permissions().mode() & 0o7777, mode);
            }
        }
        assert_eq!(entries(&dir), ["f"], "no temporary file is left");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_fill_leaves_the_destination_and_no_temporary_file() {
        let dir = scratch("fail");
        let dest = dir.join("f");
        write_bytes(&dest, Options::HINT, b"old").unwrap();
        let err = write(&dest, Options::durable(0o644), |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("source vanished"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "source vanished");
        assert_eq!(fs::read(&dest).unwrap(), b"old");
        assert_eq!(entries(&dir), ["f"]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error_not_a_panic() {
        let dest = scratch("nodir").join("absent/f");
        assert_eq!(write_bytes(&dest, Options::HINT, b"x").unwrap_err().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn concurrent_writers_in_one_process_never_share_a_temporary_file() {
        let dir = scratch("threads");
        let dest = dir.join("f");
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let dest = dest.clone();
                std::thread::spawn(move || {
                    for _ in 0..50 {
                        write_bytes(&dest, Options::HINT, format!("writer {i}").as_bytes()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(fs::read_to_string(&dest).unwrap().starts_with("writer "));
        assert_eq!(entries(&dir), ["f"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
