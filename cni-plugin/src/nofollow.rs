//! Opening the paths the network config names (`ipam.kubeconfig`,
//! `ipam.log.file`, `ipam.dataDir`) without following a symbolic link
//! planted in their last component. Whoever can write the directory that
//! holds one of them could otherwise point the plugin, which runs as root,
//! at a file of their choosing: a log appended to `/etc/shadow`, or a
//! kubeconfig of theirs. Links in earlier components are the host's layout
//! and are followed.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Reads `path` whole, refusing a symlink as its last component (`ELOOP`).
pub fn read_to_string(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path)?.read_to_string(&mut text)?;
    Ok(text)
}

/// Opens `path` for appending, creating it (mode 0600) if absent, refusing a
/// symlink as its last component.
pub fn open_append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(path)
}

/// Whether the last component of `path` is a symbolic link.
pub fn is_symlink(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_link_is_refused_and_a_plain_file_is_not() {
        let dir = std::env::temp_dir().join(format!("netendpoint-nofollow-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, "secret").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();

        assert_eq!(read_to_string(&link).unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(open_append(&link).unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "secret", "nothing appended through the link");
        assert!(is_symlink(&link) && !is_symlink(&target));

        assert_eq!(read_to_string(&target).unwrap(), "secret");
        let log = dir.join("plugin.log");
        open_append(&log).unwrap();
        assert!(log.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
