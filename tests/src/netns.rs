//! Linux network namespaces, and the reference CNI plugins and cnitool that
//! attach them (libcni, as a runtime calls it).

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::env::{plugin_bin, repo_root};
use crate::scratch::unique;

/// Directory holding the reference CNI plugins and cnitool.
pub fn cni_bin_dir() -> PathBuf {
    let d = repo_root().join("tests/bin/cni");
    assert!(d.join("bridge").exists(), "reference CNI plugins missing: run scripts/tools.sh (make test does)");
    d
}

/// `CNI_PATH` with the reference plugins and the plugin under test.
pub fn cni_path() -> String {
    format!("{}:{}", cni_bin_dir().display(), plugin_bin().parent().unwrap().display())
}

/// A Linux network namespace, deleted on drop.
pub struct Netns {
    /// Its name under /run/netns.
    pub name: String,
}

impl Netns {
    /// Creates a fresh namespace.
    pub fn new(prefix: &str) -> Self {
        let name = unique(prefix);
        let out = Command::new("ip").args(["netns", "add", &name]).output().unwrap();
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        Self { name }
    }

    /// Its path, as a runtime passes it in CNI_NETNS.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// Runs `cmd` inside the namespace.
    pub fn exec(&self, cmd: &[&str]) -> String {
        let out = Command::new("ip").args(["netns", "exec", &self.name]).args(cmd).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// A network config directory for cnitool (NETCONFPATH), with one network.
pub struct NetDir {
    /// The directory.
    pub dir: PathBuf,
    /// The network name.
    pub name: String,
}

impl NetDir {
    /// Writes `conf` (a single-plugin config or a conflist) as network `conf["name"]`.
    pub fn new(conf: &serde_json::Value) -> Self {
        let name = conf["name"].as_str().unwrap().to_string();
        let dir = std::env::temp_dir().join(unique("netconf"));
        std::fs::create_dir_all(&dir).unwrap();
        let ext = if conf.get("plugins").is_some() { "conflist" } else { "conf" };
        std::fs::write(dir.join(format!("10-{name}.{ext}")), serde_json::to_vec_pretty(conf).unwrap()).unwrap();
        Self { dir, name }
    }

    /// Runs `cnitool <op> <network> <netns>` with `extra_env`.
    pub fn cnitool(&self, op: &str, netns: &Netns, extra_env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(cni_bin_dir().join("cnitool"));
        cmd.args([op, &self.name, &netns.path()])
            .env("NETCONFPATH", &self.dir)
            .env("CNI_PATH", cni_path())
            .stdin(Stdio::null());
        for (k, v) in extra_env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }
}

impl Drop for NetDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Linux bridge that the bridge plugin creates on first use, deleted on
/// drop.
pub struct Bridge {
    /// Its interface name: `tag` then a unique suffix, 15 characters at most.
    pub name: String,
}

impl Bridge {
    /// A name no other bridge has, starting with `tag` (at most 4 characters).
    pub fn new(tag: &str) -> Self {
        // Interface names are limited to 15 characters.
        let n = unique(tag);
        let short: String = n.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
        Self { name: format!("{tag}{}", &short[short.len().saturating_sub(11)..]) }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.name]).output();
    }
}
