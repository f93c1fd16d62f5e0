//! Writing one file on the host: atomically, durably, and only when its
//! content or mode changed.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use atomic_file::Options;

use crate::error::{Result, io_err};

/// What a sync did to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The file was (re)written.
    Written,
    /// It already held the content, with the mode.
    Unchanged,
}

/// Writes `data` to `dest` (atomically, durably, `mode`) unless `dest` already
/// holds exactly `data` with that mode.
pub fn install_bytes(dest: &Path, data: &[u8], mode: u32) -> Result<Change> {
    let same = fs::read(dest).is_ok_and(|cur| cur == data) && has_mode(dest, mode);
    if same {
        return Ok(Change::Unchanged);
    }
    atomic_file::write(dest, Options::durable(mode), |f| f.write_all(data)).map_err(io_err("write", dest))?;
    Ok(Change::Written)
}

/// Copies file `src` to `dest` (atomically, durably, `mode`) unless `dest`
/// already has the same content and mode. Streams: a binary is never held in
/// memory whole.
pub fn install_file(src: &Path, dest: &Path, mode: u32) -> Result<Change> {
    if has_mode(dest, mode) && files_equal(src, dest).map_err(io_err("compare", dest))? {
        return Ok(Change::Unchanged);
    }
    let mut input = File::open(src).map_err(io_err("open", src))?;
    atomic_file::write(dest, Options::durable(mode), |f| io::copy(&mut input, f).map(drop))
        .map_err(io_err("write", dest))?;
    Ok(Change::Written)
}

fn has_mode(path: &Path, mode: u32) -> bool {
    fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode)
}

/// Whether both files exist and have the same bytes.
fn files_equal(a: &Path, b: &Path) -> io::Result<bool> {
    let (Ok(fa), Ok(fb)) = (File::open(a), File::open(b)) else { return Ok(false) };
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ra, mut rb) = (io::BufReader::new(fa), io::BufReader::new(fb));
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = ra.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        rb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Reads `path` whole, naming `what` on failure.
pub fn read(path: &Path, what: &'static str) -> Result<Vec<u8>> {
    fs::read(path).map_err(io_err(what, path))
}

/// `b` without leading and trailing ASCII whitespace.
pub fn trim_ascii(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| !c.is_ascii_whitespace()).unwrap_or(b.len());
    let end = b.iter().rposition(|c| !c.is_ascii_whitespace()).map_or(start, |e| e + 1);
    &b[start..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_content_and_sets_mode() {
        let dir = std::env::temp_dir().join(format!("ne-install-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dest = dir.join("f");
        assert_eq!(install_bytes(&dest, b"one", 0o600).unwrap(), Change::Written);
        assert_eq!(install_bytes(&dest, b"one", 0o600).unwrap(), Change::Unchanged);
        assert_eq!(install_bytes(&dest, b"one", 0o644).unwrap(), Change::Written);
        assert_eq!(install_bytes(&dest, b"two", 0o644).unwrap(), Change::Written);
        assert_eq!(fs::read(&dest).unwrap(), b"two");
        assert_eq!(fs::metadata(&dest).unwrap().permissions().mode() & 0o777, 0o644);
        let src = dir.join("src");
        fs::write(&src, b"binary").unwrap();
        let copy = dir.join("copy");
        assert_eq!(install_file(&src, &copy, 0o755).unwrap(), Change::Written);
        assert_eq!(install_file(&src, &copy, 0o755).unwrap(), Change::Unchanged);
        assert_eq!(fs::read(&copy).unwrap(), b"binary");
        let mut leftovers: Vec<_> = fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
        leftovers.sort();
        assert_eq!(leftovers, ["copy", "f", "src"], "temp files left: {leftovers:?}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn token_trimming() {
        assert_eq!(trim_ascii(b"  abc\n"), b"abc");
        assert_eq!(trim_ascii(b" \n"), b"");
    }
}
