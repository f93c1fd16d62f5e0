//! The command line: every flag also reads an environment variable, and a
//! typo is an error, never a silent default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::parser::ValueSource;
use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};

use crate::error::{Error, Result, io_err};

/// Where the pod's projected ServiceAccount token is mounted (see the DaemonSet).
const DEFAULT_TOKEN_SRC: &str = "/var/run/secrets/netendpoint/token";
/// Where the cluster CA is mounted next to it.
const DEFAULT_CA_SRC: &str = "/var/run/secrets/netendpoint/ca.crt";
/// The host's `/opt/cni/bin`, as mounted in the container.
const DEFAULT_CNI_BIN_DIR: &str = "/host/opt/cni/bin";
/// The host's `/etc/cni/net.d`, as mounted in the container.
const DEFAULT_NET_CONF_DIR: &str = "/host/etc/cni/net.d";
/// The host's `/etc/cni/net.d/netendpoint.d`: the plugin's default `ipam.kubeconfig` lives here.
const DEFAULT_KUBECONFIG_DIR: &str = "/host/etc/cni/net.d/netendpoint.d";

/// The flags as given. A boolean flag alone means true; `--flag=true` and
/// `--flag=false` also work, anything else is an error.
#[derive(Debug, Parser)]
#[command(
    name = "netendpoint-install",
    version,
    about = "Installs the netendpoint CNI plugin and keeps its kubeconfig token fresh.",
    after_help = "Logging: RUST_LOG (default info), to stderr. The token is never logged."
)]
pub struct Cli {
    /// Plugin binary to install [default: `netendpoint` next to this binary]
    #[arg(long, env = "NETENDPOINT_INSTALL_PLUGIN_SRC", value_name = "PATH")]
    plugin_src: Option<PathBuf>,
    /// File name in the CNI bin dir
    #[arg(long, env = "NETENDPOINT_INSTALL_PLUGIN_NAME", value_name = "NAME", default_value = "netendpoint",
        value_parser = plain_file_name)]
    plugin_name: String,
    /// Host CNI bin dir
    #[arg(long, env = "NETENDPOINT_INSTALL_CNI_BIN_DIR", value_name = "DIR", default_value = DEFAULT_CNI_BIN_DIR)]
    cni_bin_dir: PathBuf,
    /// Where kubeconfig, token, ca.crt and nodename go
    #[arg(long, env = "NETENDPOINT_INSTALL_KUBECONFIG_DIR", value_name = "DIR", default_value = DEFAULT_KUBECONFIG_DIR)]
    kubeconfig_dir: PathBuf,
    /// This node's name, written to `<kubeconfig-dir>/nodename` for the plugin (required, from the flag or the variable)
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    node_name: Option<String>,
    /// Projected ServiceAccount token
    #[arg(long, env = "NETENDPOINT_INSTALL_TOKEN_SRC", value_name = "PATH", default_value = DEFAULT_TOKEN_SRC)]
    token_src: PathBuf,
    /// Cluster CA bundle
    #[arg(long, env = "NETENDPOINT_INSTALL_CA_SRC", value_name = "PATH", default_value = DEFAULT_CA_SRC)]
    ca_src: PathBuf,
    /// API server URL [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT]
    #[arg(long, env = "NETENDPOINT_INSTALL_SERVER", value_name = "URL")]
    server: Option<String>,
    /// Also install this network config (.conf/.conflist/.json)
    #[arg(long, env = "NETENDPOINT_INSTALL_NET_CONF", value_name = "PATH")]
    net_conf: Option<PathBuf>,
    /// Where the network config goes
    #[arg(long, env = "NETENDPOINT_INSTALL_NET_CONF_DIR", value_name = "DIR", default_value = DEFAULT_NET_CONF_DIR)]
    net_conf_dir: PathBuf,
    /// Its file name there [default: the file name of --net-conf]
    #[arg(long, env = "NETENDPOINT_INSTALL_NET_CONF_NAME", value_name = "NAME", value_parser = plain_file_name)]
    net_conf_name: Option<String>,
    /// A missing --net-conf is skipped instead of being an error
    #[arg(long, env = "NETENDPOINT_INSTALL_NET_CONF_OPTIONAL", value_name = "BOOL", action = ArgAction::Set,
        num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    net_conf_optional: bool,
    /// How often to check the token and files (e.g. 10s, 1m)
    #[arg(long, env = "NETENDPOINT_INSTALL_INTERVAL", value_name = "DURATION", default_value = "10s",
        value_parser = positive_duration)]
    interval: Duration,
    /// Install once and exit (non-zero on failure)
    #[arg(long, env = "NETENDPOINT_INSTALL_ONCE", value_name = "BOOL", action = ArgAction::Set,
        num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    once: bool,
    /// Mint the plugin's token for this ServiceAccount (`NAMESPACE/NAME`)
    /// with the TokenRequest API, bound to this node's Node object, instead
    /// of copying --token-src (which then only authenticates the installer)
    #[arg(long, env = "NETENDPOINT_INSTALL_MINT_FOR", value_name = "NAMESPACE/NAME")]
    mint_for: Option<crate::mint::Target>,
    /// Lifetime of a minted token, 10m to 24h; it is replaced after 40 to 50 % of it
    #[arg(long, env = "NETENDPOINT_INSTALL_TOKEN_TTL", value_name = "DURATION", default_value = "24h",
        value_parser = token_ttl)]
    token_ttl: Duration,
    /// Check the installed credentials (SelfSubjectReview, node, expiry) and exit: the readiness probe
    #[arg(long, env = "NETENDPOINT_INSTALL_CHECK", value_name = "BOOL", action = ArgAction::Set,
        num_args = 0..=1, require_equals = true, default_missing_value = "true", default_value = "false")]
    check: bool,
    /// --check fails when the installed token expires sooner than this
    #[arg(long, env = "NETENDPOINT_INSTALL_CHECK_MIN_VALIDITY", value_name = "DURATION", default_value = "30m",
        value_parser = positive_duration)]
    check_min_validity: Duration,
}

/// The longest token lifetime the admission policy
/// `netendpoint-installer-token` lets the installer mint
/// (`expirationSeconds <= 86400`): a longer one would make every mint fail.
const MAX_TOKEN_TTL: Duration = Duration::from_secs(86_400);

/// A token lifetime the API server accepts (10 minutes or more) and the
/// installer-token policy allows (at most [`MAX_TOKEN_TTL`], 24 hours).
fn token_ttl(s: &str) -> Result<Duration, String> {
    match netendpoint_crd::duration::parse(s) {
        Some(d) if d >= Duration::from_secs(600) && d <= MAX_TOKEN_TTL => Ok(d),
        _ => Err("expected a duration from 10m to 24h (the installer-token policy allows no longer)".into()),
    }
}

/// A file name with no directory part, not hidden.
fn plain_file_name(name: &str) -> Result<String, String> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        return Err("must be a plain file name".into());
    }
    Ok(name.to_string())
}

/// A non-zero duration in the one grammar of netendpoint ([`netendpoint_crd::duration`]).
fn positive_duration(s: &str) -> Result<Duration, String> {
    match netendpoint_crd::duration::parse(s) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err("expected a positive duration such as 500ms, 10s, 2m or 1h30m".into()),
    }
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Options {
    /// The plugin binary to install.
    pub plugin_src: PathBuf,
    /// Its file name in `cni_bin_dir`.
    pub plugin_name: String,
    /// The host's CNI bin dir.
    pub cni_bin_dir: PathBuf,
    /// Where kubeconfig, token, ca.crt and nodename go.
    pub kubeconfig_dir: PathBuf,
    /// The projected ServiceAccount token.
    pub token_src: PathBuf,
    /// The cluster CA bundle.
    pub ca_src: PathBuf,
    /// The API server URL written into the kubeconfig.
    pub server: String,
    /// `--node-name`, else a non-empty `NODE_NAME`; checked at each sync.
    pub node_name: Option<String>,
    /// The network config to install, if any.
    pub net_conf: Option<PathBuf>,
    /// Where it goes.
    pub net_conf_dir: PathBuf,
    /// Its file name there, when not that of `net_conf`.
    pub net_conf_name: Option<String>,
    /// A missing `net_conf` is skipped.
    pub net_conf_optional: bool,
    /// Time between syncs.
    pub interval: Duration,
    /// Sync once and exit.
    pub once: bool,
    /// Mint the plugin's node-bound token for this ServiceAccount instead of copying `token_src`.
    pub mint_for: Option<crate::mint::Target>,
    /// Lifetime of a minted token.
    pub token_ttl: Duration,
    /// Run the readiness check and exit.
    pub check: bool,
    /// The shortest remaining token lifetime the check accepts.
    pub check_min_validity: Duration,
}

impl Options {
    /// Parses `args` (with the program name first); `env` supplies
    /// `KUBERNETES_SERVICE_*` for the default `--server`. The flags'
    /// own variables are read by clap from the process environment.
    pub fn parse<I, T>(args: I, env: impl Fn(&str) -> Option<String>) -> Result<Self>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let matches = Cli::command().try_get_matches_from(args).map_err(Error::Cli)?;
        let cli = Cli::from_arg_matches(&matches).map_err(Error::Cli)?;
        // An empty NODE_NAME counts as unset; an empty --node-name is refused by name at the sync.
        let from_env = matches.value_source("node_name") == Some(ValueSource::EnvVariable);
        let node_name = cli.node_name.filter(|n| !(from_env && n.is_empty()));
        let plugin_src = match cli.plugin_src {
            Some(p) => p,
            None => std::env::current_exe()
                .map_err(io_err("locate", Path::new("current executable")))?
                .with_file_name("netendpoint"),
        };
        let server = match cli.server {
            Some(s) => s,
            None => service_url(env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT"))?,
        };
        Ok(Self {
            plugin_src,
            plugin_name: cli.plugin_name,
            cni_bin_dir: cli.cni_bin_dir,
            kubeconfig_dir: cli.kubeconfig_dir,
            token_src: cli.token_src,
            ca_src: cli.ca_src,
            server,
            node_name,
            net_conf: cli.net_conf,
            net_conf_dir: cli.net_conf_dir,
            net_conf_name: cli.net_conf_name,
            net_conf_optional: cli.net_conf_optional,
            interval: cli.interval,
            once: cli.once,
            mint_for: cli.mint_for,
            token_ttl: cli.token_ttl,
            check: cli.check,
            check_min_validity: cli.check_min_validity,
        })
    }
}

/// `https://HOST:PORT`, with an IPv6 host in brackets.
pub fn service_url(host: Option<String>, port: Option<String>) -> Result<String> {
    let host = host.filter(|h| !h.is_empty()).ok_or(Error::NoServer)?;
    let port = port.filter(|p| !p.is_empty()).ok_or(Error::NoServer)?;
    let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
    Ok(format!("https://{host}:{port}"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use clap::error::ErrorKind;

    /// Parses `args` as the installer's command line, with the service
    /// variables of an IPv6 cluster.
    pub(crate) fn parse(args: &[&str]) -> Result<Options> {
        Options::parse(std::iter::once("netendpoint-install").chain(args.iter().copied()), |k| match k {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".into()),
            "KUBERNETES_SERVICE_PORT" => Some("443".into()),
            _ => None,
        })
    }

    fn cli_error(args: &[&str]) -> clap::Error {
        match parse(args) {
            Err(Error::Cli(e)) => e,
            other => panic!("{args:?}: expected a command-line error, got {other:?}"),
        }
    }

    #[test]
    fn a_token_ttl_is_what_the_installer_token_policy_allows() {
        let ttl = |v: &str| parse(&["--token-ttl", v]).map(|o| o.token_ttl);
        assert_eq!(ttl("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(ttl("24h").unwrap(), Duration::from_secs(86_400));
        for refused in ["9m", "25h", "168h", "0"] {
            let e = cli_error(&["--token-ttl", refused]).to_string();
            assert!(e.contains("--token-ttl") && e.contains("24h"), "{refused}: {e}");
        }
    }

    #[test]
    fn node_name_comes_from_the_flag() {
        // NODE_NAME (the flag's variable) is covered by tests/tests/deploy_installer.rs,
        // which sets it on the real binary; a unit test does not change the process environment.
        let name = |args: &[&str]| parse(args).unwrap().node_name;
        assert_eq!(name(&["--node-name", "node-flag"]).as_deref(), Some("node-flag"));
        assert_eq!(name(&["--node-name=node-flag"]).as_deref(), Some("node-flag"));
        assert_eq!(name(&["--node-name="]).as_deref(), Some(""), "an empty flag is refused by the sync, by name");
    }

    #[test]
    fn server_defaults_to_the_service_env_with_ipv6_brackets() {
        let o = parse(&["--plugin-src", "/x"]).unwrap();
        assert_eq!(o.server, "https://[fd00::1]:443");
        assert_eq!(service_url(Some("10.96.0.1".into()), Some("443".into())).unwrap(), "https://10.96.0.1:443");
        assert!(matches!(service_url(None, Some("443".into())), Err(Error::NoServer)));
    }

    #[test]
    fn flags_take_values_inline_or_separately() {
        let o =
            parse(&["--plugin-src=/a", "--cni-bin-dir", "/b", "--interval=500ms", "--once", "--server=https://s:1"])
                .unwrap();
        assert_eq!(o.plugin_src, PathBuf::from("/a"));
        assert_eq!(o.cni_bin_dir, PathBuf::from("/b"));
        assert_eq!(o.interval, Duration::from_millis(500));
        assert!(o.once);
        assert_eq!(o.server, "https://s:1");
        assert!(!o.net_conf_optional);
        // The one duration grammar (netendpoint_crd::duration); a bare number is seconds.
        assert_eq!(parse(&["--interval=2m"]).unwrap().interval, Duration::from_secs(120));
        assert_eq!(parse(&["--interval", "7"]).unwrap().interval, Duration::from_secs(7));
        assert_eq!(parse(&["--interval", "1m30s"]).unwrap().interval, Duration::from_secs(90));
        for bad in [
            &["--bogus"][..],
            &["--once=yes"],
            &["--plugin-name", "../evil"],
            &["--net-conf-name=.hidden"],
            &["--interval", "0s"],
            &["--interval", "ten"],
            &["--token-src"],
        ] {
            cli_error(bad);
        }
    }

    #[test]
    fn booleans_take_an_optional_true_or_false() {
        assert!(parse(&["--once=true"]).unwrap().once);
        assert!(!parse(&["--once=false"]).unwrap().once);
        assert!(parse(&["--net-conf-optional", "--once"]).unwrap().net_conf_optional);
        // A boolean never swallows the next argument as its value.
        let o = parse(&["--once", "--plugin-src", "/p"]).unwrap();
        assert!(o.once && o.plugin_src == Path::new("/p"));
    }

    #[test]
    fn errors_name_the_flag() {
        for (args, flag) in [
            (&["--interval", "0s"][..], "--interval"),
            (&["--plugin-name", "a/b"], "--plugin-name"),
            (&["--once=1"], "--once"),
            (&["--metrics-adr", "x"], "--metrics-adr"),
        ] {
            let e = cli_error(args);
            assert!(e.to_string().contains(flag), "{args:?}: {e}");
            assert_eq!(e.exit_code(), 2);
        }
    }

    #[test]
    fn an_unknown_flag_is_an_error() {
        assert_eq!(cli_error(&["--net-conf-optinal"]).kind(), ErrorKind::UnknownArgument);
    }

    #[test]
    fn help_is_not_an_error_and_shows_the_usage() {
        let e = cli_error(&["--help"]);
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        assert_eq!(e.exit_code(), 0, "--help exits 0");
        let text = e.render().to_string();
        for flag in ["--plugin-src", "--kubeconfig-dir", "--node-name", "--interval", "--once", "[env: NODE_NAME"] {
            assert!(text.contains(flag), "{flag} missing from:\n{text}");
        }
    }
}
