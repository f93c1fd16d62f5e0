//! One sync: the plugin binary, the credentials and kubeconfig, the node
//! name and the network config, in an order that never lets a runtime see a
//! network config whose plugin or credentials are missing.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tracing::{info, warn};

use crate::error::{Error, Result, io_err};
use crate::files::{Change, install_bytes, install_file, read, trim_ascii};
use crate::mint::Minter;
use crate::options::Options;

/// File names inside the kubeconfig directory.
const KUBECONFIG_FILE: &str = "kubeconfig";
const TOKEN_FILE: &str = "token";
const CA_FILE: &str = "ca.crt";
/// This node's name, for the plugin (which is given none by the runtime).
const NODE_NAME_FILE: &str = "nodename";

/// The kubeconfig the plugin reads. Paths are relative: kube-rs and client-go
/// resolve them against the kubeconfig's directory, so the file is valid both
/// at the host path and at the container's mount path. `tokenFile` (not an
/// inline token) makes each plugin run read the current token.
fn render_kubeconfig(server: &str) -> String {
    format!(
        "# Written by netendpoint-install; rewritten when it changes. Do not edit.\n\
         apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: netendpoint\n  \
           cluster:\n    \
             server: {server}\n    \
             certificate-authority: {CA_FILE}\n\
         users:\n\
         - name: netendpoint\n  \
           user:\n    \
             tokenFile: {TOKEN_FILE}\n\
         contexts:\n\
         - name: netendpoint\n  \
           context:\n    \
             cluster: netendpoint\n    \
             user: netendpoint\n\
         current-context: netendpoint\n",
        server = serde_json::Value::String(server.to_string()),
    )
}

/// The installer's state across syncs.
pub struct Installer {
    /// The configuration.
    pub opts: Options,
    /// (length, mtime) of the plugin binary we installed last, to notice a replaced or removed one cheaply.
    plugin_installed: Option<(u64, std::time::SystemTime)>,
    /// Whether we already warned that the optional network config is absent.
    warned_no_net_conf: bool,
    /// With `--mint-for`: mints the plugin's node-bound token.
    minter: Option<Minter>,
}

impl Installer {
    /// An installer that has installed nothing yet.
    pub fn new(opts: Options) -> Self {
        Self { opts, plugin_installed: None, warned_no_net_conf: false, minter: None }
    }

    /// One pass over everything; stops at the first failure so later steps
    /// (the network config) never get ahead of earlier ones (plugin,
    /// credentials, node name).
    pub async fn sync(&mut self) -> Result<()> {
        self.sync_plugin()?;
        self.sync_credentials().await?;
        self.sync_node_name()?;
        self.sync_net_conf()
    }

    fn sync_plugin(&mut self) -> Result<()> {
        let dest = self.opts.cni_bin_dir.join(&self.opts.plugin_name);
        let stamp = |p: &Path| fs::metadata(p).ok().and_then(|m| Some((m.len(), m.modified().ok()?)));
        if self.plugin_installed.is_some() && self.plugin_installed == stamp(&dest) {
            return Ok(());
        }
        let src = &self.opts.plugin_src;
        let src_len = fs::metadata(src).map_err(io_err("stat plugin binary", src))?.len();
        if src_len == 0 {
            return Err(Error::BadContent { path: src.display().to_string(), reason: "plugin binary is empty".into() });
        }
        fs::create_dir_all(&self.opts.cni_bin_dir).map_err(io_err("create", &self.opts.cni_bin_dir))?;
        match install_file(src, &dest, 0o755)? {
            Change::Written => {
                info!(src = %src.display(), dest = %dest.display(), bytes = src_len, "installed plugin binary")
            }
            Change::Unchanged => info!(dest = %dest.display(), "plugin binary already up to date"),
        }
        self.plugin_installed = stamp(&dest);
        Ok(())
    }

    /// The plugin's token: minted (`--mint-for`) or the projected one.
    async fn plugin_token(&mut self) -> Result<Vec<u8>> {
        if let Some(target) = &self.opts.mint_for {
            if self.minter.is_none() {
                let node = self.opts.node_name.clone().ok_or(Error::NoNodeName)?;
                if !netendpoint_crd::is_dns1123_subdomain(&node) {
                    return Err(Error::BadNodeName(node));
                }
                let o = &self.opts;
                self.minter =
                    Some(Minter::new(&o.server, &o.ca_src, &o.token_src, target.clone(), node, o.token_ttl).await?);
            }
            if let Some(minter) = self.minter.as_mut() {
                return Ok(minter.token(std::time::SystemTime::now()).await?.to_vec());
            }
        }
        let token = read(&self.opts.token_src, "read token")?;
        let token = trim_ascii(&token);
        if token.is_empty() || token.iter().any(|b| b.is_ascii_whitespace() || !b.is_ascii_graphic()) {
            // Never echo the content: it may be a (damaged) token.
            return Err(Error::BadContent {
                path: self.opts.token_src.display().to_string(),
                reason: "is not a bearer token (empty or not a single printable word)".into(),
            });
        }
        Ok(token.to_vec())
    }

    async fn sync_credentials(&mut self) -> Result<()> {
        let dir = &self.opts.kubeconfig_dir.clone();
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        // Only root (the plugin runs as root) may read the credentials.
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).map_err(io_err("chmod", dir))?;

        let ca = read(&self.opts.ca_src, "read CA")?;
        if !String::from_utf8_lossy(&ca).contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::BadContent {
                path: self.opts.ca_src.display().to_string(),
                reason: "is not a PEM certificate bundle".into(),
            });
        }
        if install_bytes(&dir.join(CA_FILE), &ca, 0o644)? == Change::Written {
            info!(dest = %dir.join(CA_FILE).display(), "installed cluster CA");
        }

        let token = self.plugin_token().await?;
        if install_bytes(&dir.join(TOKEN_FILE), &token, 0o600)? == Change::Written {
            let source = if self.opts.mint_for.is_some() { "TokenRequest" } else { "projected" };
            info!(dest = %dir.join(TOKEN_FILE).display(), source, "installed ServiceAccount token for the plugin (new, rotated or first install)");
        }

        let kubeconfig = render_kubeconfig(&self.opts.server);
        if install_bytes(&dir.join(KUBECONFIG_FILE), kubeconfig.as_bytes(), 0o600)? == Change::Written {
            info!(dest = %dir.join(KUBECONFIG_FILE).display(), server = %self.opts.server, "wrote plugin kubeconfig");
        }
        Ok(())
    }

    /// Writes `<kubeconfig-dir>/nodename` (no trailing newline) when it changed.
    /// Runs after [`Self::sync_credentials`], which creates the directory.
    fn sync_node_name(&mut self) -> Result<()> {
        let name = self.opts.node_name.as_deref().ok_or(Error::NoNodeName)?;
        if !netendpoint_crd::is_dns1123_subdomain(name) {
            return Err(Error::BadNodeName(name.to_string()));
        }
        let dest = self.opts.kubeconfig_dir.join(NODE_NAME_FILE);
        if install_bytes(&dest, name.as_bytes(), 0o644)? == Change::Written {
            info!(dest = %dest.display(), node = %name, "wrote node name");
        }
        Ok(())
    }

    fn sync_net_conf(&mut self) -> Result<()> {
        let Some(src) = &self.opts.net_conf else { return Ok(()) };
        let data = match fs::read(src) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.opts.net_conf_optional => {
                if !self.warned_no_net_conf {
                    match crate::check::net_conf_present(src) {
                        Ok(()) => info!(src = %src.display(), "no network config to install (optional source absent)"),
                        Err(e) => warn!(error = %e, "nothing installed"),
                    }
                    self.warned_no_net_conf = true;
                }
                return Ok(());
            }
            Err(e) => return Err(io_err("read network config", src)(e)),
        };
        self.warned_no_net_conf = false;
        // A broken file in net.d can break every pod on the node: refuse it, keep the old one.
        let conf: serde_json::Value = serde_json::from_slice(&data).map_err(|e| Error::BadContent {
            path: src.display().to_string(),
            reason: format!("is not valid JSON ({e}); the installed network config is left as it was"),
        })?;
        if conf.get("name").and_then(|n| n.as_str()).is_none_or(str::is_empty) {
            return Err(Error::BadContent {
                path: src.display().to_string(),
                reason: "has no \"name\"; the installed network config is left as it was".into(),
            });
        }
        let name = match &self.opts.net_conf_name {
            Some(n) => n.clone(),
            None => src.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        let dir = &self.opts.net_conf_dir;
        fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        let dest = dir.join(name);
        if install_bytes(&dest, &data, 0o644)? == Change::Written {
            info!(src = %src.display(), dest = %dest.display(), network = %conf["name"].as_str().unwrap_or_default(), "installed network config");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::tests::parse;

    #[test]
    fn node_name_file_is_written_when_changed_and_checked() {
        let dir = std::env::temp_dir().join(format!("ne-install-node-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dir_flag = format!("--kubeconfig-dir={}", dir.display());
        let installer = |node: Option<&str>| {
            let mut opts = parse(&[&dir_flag]).unwrap();
            // Set here, not with the flag: without it, clap reads NODE_NAME from this process.
            opts.node_name = node.map(str::to_string);
            Installer::new(opts)
        };
        let file = dir.join(NODE_NAME_FILE);

        installer(Some("node-a.example")).sync_node_name().unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "node-a.example");
        let mtime = fs::metadata(&file).unwrap().modified().unwrap();
        installer(Some("node-a.example")).sync_node_name().unwrap();
        assert_eq!(fs::metadata(&file).unwrap().modified().unwrap(), mtime, "unchanged name is not rewritten");
        installer(Some("node-b")).sync_node_name().unwrap();
        assert_eq!(fs::read_to_string(&file).unwrap(), "node-b");

        let missing = installer(None).sync_node_name().unwrap_err();
        assert!(matches!(missing, Error::NoNodeName));
        assert!(missing.to_string().contains("--node-name") && missing.to_string().contains("NODE_NAME"));
        for bad in ["Node-A", "node_a", "-node", "node/a", "", &"a".repeat(254)] {
            let err = installer(Some(bad)).sync_node_name().unwrap_err();
            assert!(matches!(err, Error::BadNodeName(_)), "{bad}: {err}");
        }
        assert_eq!(fs::read_to_string(&file).unwrap(), "node-b", "a bad name leaves the file as it was");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn kubeconfig_references_the_token_file_and_parses() {
        let text = render_kubeconfig("https://[fd00::1]:443");
        let kc = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://[fd00::1]:443"));
        assert_eq!(cluster.certificate_authority.as_deref(), Some(CA_FILE));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.token_file.as_deref(), Some(TOKEN_FILE));
        assert!(user.token.is_none());
        assert_eq!(kc.current_context.as_deref(), Some("netendpoint"));
    }
}
