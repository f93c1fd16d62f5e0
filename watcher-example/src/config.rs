//! Command-line flags, each with an environment variable (clap). An unknown
//! flag or a bad value is an error that names the flag, never a silent default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::NonEmptyStringValueParser;
use clap::{ArgAction, Parser, ValueEnum};

/// Which [`crate::dataplane::Dataplane`] to program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DataplaneKind {
    /// Host routes in a network namespace (the default).
    Linux,
    /// The in-memory table (optionally persisted with `--state-file`).
    Memory,
}

/// A teardown delay drawn uniformly from `min..=max` (to simulate slow agents).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DelayRange {
    /// Shortest delay.
    pub min: Duration,
    /// Longest delay.
    pub max: Duration,
}

impl DelayRange {
    /// A random delay in the range.
    pub fn sample(&self) -> Duration {
        if self.max <= self.min {
            return self.min;
        }
        let span = (self.max - self.min).as_micros() as u64;
        self.min + Duration::from_micros(fastrand::u64(0..=span))
    }
}

/// The flags as given. A boolean flag alone means true; `--flag=true` and
/// `--flag=false` also work, anything else is an error.
#[derive(Debug, Parser)]
#[command(name = "watcher-example", version, about = "watcher-example: reference netendpoint downstream agent")]
struct Flags {
    /// Node served; only its endpoints are watched
    #[arg(long, env = "NODE_NAME", value_name = "NAME", value_parser = NonEmptyStringValueParser::new())]
    node: String,
    /// Finalizer acknowledged, the same on every node [default: watcher.netendpoint.dev/rules]
    #[arg(long, env = "WATCHER_FINALIZER", value_name = "NAME", value_parser = qualified_finalizer)]
    finalizer: Option<String>,
    /// Hold no finalizer (releases are not gated)
    #[arg(long, env = "WATCHER_NO_FINALIZER", value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false")]
    no_finalizer: bool,
    /// Add the finalizer to endpoints lacking it (test-and-add patch)
    #[arg(long, env = "WATCHER_LAZY_FINALIZER", value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false")]
    lazy_finalizer: bool,
    /// Kubeconfig [default: in-cluster config, then KUBECONFIG]
    #[arg(long, env = "WATCHER_KUBECONFIG", value_name = "PATH")]
    kubeconfig: Option<PathBuf>,
    /// Where /metrics, /healthz, /readyz (and /rules with --serve-rules) are served; localhost by default
    #[arg(long, env = "WATCHER_METRICS_ADDR", value_name = "ADDR", default_value = "127.0.0.1:9464")]
    metrics_addr: SocketAddr,
    /// Also serve /healthz and /readyz, and nothing else, here (for kubelet probes on the pod IP)
    #[arg(long, env = "WATCHER_PROBE_ADDR", value_name = "ADDR")]
    probe_addr: Option<SocketAddr>,
    /// Serve /rules (the dataplane table as JSON, a debugging aid) on --metrics-addr
    #[arg(long, env = "WATCHER_SERVE_RULES", value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false")]
    serve_rules: bool,
    /// The dataplane to program
    #[arg(long, env = "WATCHER_DATAPLANE", value_enum, default_value_t = DataplaneKind::Linux)]
    dataplane: DataplaneKind,
    /// Network namespace of the linux dataplane
    #[arg(long, env = "WATCHER_NETNS", value_name = "NAME", default_value = "watcher-example")]
    netns: String,
    /// Dummy device in the netns that routes point to
    #[arg(long, env = "WATCHER_DEVICE", value_name = "NAME", default_value = "nep0")]
    device: String,
    /// Table persistence (memory: the table; linux: the UID of each route)
    #[arg(long, env = "WATCHER_STATE_FILE", value_name = "PATH")]
    state_file: Option<PathBuf>,
    /// Teardown delay, e.g. 20ms, or a range 0ms..30ms (simulates a slow agent)
    #[arg(long, env = "WATCHER_TEARDOWN_DELAY", value_name = "D|A..B", value_parser = parse_delay)]
    teardown_delay: Option<DelayRange>,
    /// JSON lines of every table change, in order
    #[arg(long, env = "WATCHER_EVENT_LOG", value_name = "PATH")]
    event_log: Option<PathBuf>,
    /// Tear down by IP without checking the UID (a typical naive agent)
    #[arg(long, env = "WATCHER_NAIVE_IP_KEYED", value_name = "BOOL", action = ArgAction::Set, num_args = 0..=1,
        require_equals = true, default_missing_value = "true", default_value = "false")]
    naive_ip_keyed: bool,
}

/// The finalizer of `--finalizer`'s default. It is the same on every node: the
/// admission policy `netendpoint-agent` binds one finalizer to each agent
/// ServiceAccount, and each node's instance acknowledges its own node's
/// leases only.
pub const DEFAULT_FINALIZER: &str = "watcher.netendpoint.dev/rules";

/// The agent's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--node` / `NODE_NAME`: the node this agent serves; only its endpoints are watched.
    pub node: String,
    /// `--finalizer` / `WATCHER_FINALIZER`: the finalizer this agent acknowledges;
    /// `None` with `--no-finalizer` (the agent holds nothing, as with other IPAMs).
    pub finalizer: Option<String>,
    /// `--lazy-finalizer`: add the finalizer to endpoints that lack it (test-and-add patch).
    pub lazy_finalizer: bool,
    /// `--kubeconfig`: otherwise in-cluster config or `KUBECONFIG` is inferred.
    pub kubeconfig: Option<PathBuf>,
    /// `--metrics-addr` / `WATCHER_METRICS_ADDR`: where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// `--probe-addr` / `WATCHER_PROBE_ADDR`: where only `/healthz` and `/readyz` are served, if anywhere.
    pub probe_addr: Option<SocketAddr>,
    /// `--serve-rules` / `WATCHER_SERVE_RULES`: whether `/rules` is served on `metrics_addr`.
    pub serve_rules: bool,
    /// `--dataplane linux|memory` / `WATCHER_DATAPLANE`.
    pub dataplane: DataplaneKind,
    /// `--netns` / `WATCHER_NETNS`: the network namespace of the Linux dataplane.
    pub netns: String,
    /// `--device`: the dummy device routes point to, inside `netns`.
    pub device: String,
    /// `--state-file` / `WATCHER_STATE_FILE`: persistence of the table (memory) or of rule UIDs (linux).
    pub state_file: Option<PathBuf>,
    /// `--teardown-delay D` or `MIN..MAX` / `WATCHER_TEARDOWN_DELAY`, e.g. `0ms..30ms`.
    pub teardown_delay: DelayRange,
    /// `--event-log` / `WATCHER_EVENT_LOG`: JSON lines of each table change, in order.
    pub event_log: Option<PathBuf>,
    /// `--naive-ip-keyed`: tear down by IP without checking the UID (a typical naive agent).
    pub naive_ip_keyed: bool,
}

impl Config {
    /// Parses a command line (the program name first). Flags absent from it
    /// are read from their environment variables. On `--help` and
    /// `--version` the error is the text to print, with exit code 0
    /// ([`clap::Error::exit_code`]); any other error names the flag.
    pub fn parse<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let f = Flags::try_parse_from(args)?;
        let finalizer = (!f.no_finalizer).then(|| f.finalizer.unwrap_or_else(|| DEFAULT_FINALIZER.to_string()));
        Ok(Self {
            lazy_finalizer: f.lazy_finalizer && finalizer.is_some(),
            finalizer,
            node: f.node,
            kubeconfig: f.kubeconfig,
            metrics_addr: f.metrics_addr,
            probe_addr: f.probe_addr,
            serve_rules: f.serve_rules,
            dataplane: f.dataplane,
            netns: f.netns,
            device: f.device,
            state_file: f.state_file,
            teardown_delay: f.teardown_delay.unwrap_or_default(),
            event_log: f.event_log,
            naive_ip_keyed: f.naive_ip_keyed,
        })
    }
}

/// A finalizer name must be qualified, like `example.com/agent`.
fn qualified_finalizer(s: &str) -> Result<String, String> {
    if s.contains('/') { Ok(s.to_string()) } else { Err("must be qualified, like example.com/agent".into()) }
}

/// Parses a duration of the one grammar ([`netendpoint_crd::duration`]:
/// `250ms`, `2s`, `1m`, `0`), or a range `A..B` of those.
pub fn parse_delay(s: &str) -> Result<DelayRange, String> {
    let one = |d: &str| {
        netendpoint_crd::duration::parse(d.trim())
            .ok_or_else(|| format!("{:?} is not a duration like 30ms, 2s or 1m", d.trim()))
    };
    match s.split_once("..") {
        Some((a, b)) => {
            let (min, max) = (one(a)?, one(b)?);
            if max < min {
                return Err(format!("{s:?}: the range is reversed"));
            }
            Ok(DelayRange { min, max })
        }
        None => one(s).map(|d| DelayRange { min: d, max: d }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    /// Parses `args` after the program name. Flags the test does not give may
    /// come from the environment (`NODE_NAME`, `WATCHER_*`), so every test
    /// passes the flags it asserts on.
    fn parse(args: &[&str]) -> Result<Config, clap::Error> {
        Config::parse(std::iter::once("watcher-example").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_and_flags() {
        let c = parse(&["--node", "node-a"]).unwrap();
        assert_eq!(c.finalizer.as_deref(), Some("watcher.netendpoint.dev/rules"), "one name on every node");
        assert_eq!(c.dataplane, DataplaneKind::Linux);
        let c =
            parse(&["--node=n", "--no-finalizer", "--dataplane", "memory", "--teardown-delay", "5ms..30ms"]).unwrap();
        assert_eq!(c.finalizer, None);
        assert_eq!(c.dataplane, DataplaneKind::Memory);
        assert_eq!(c.teardown_delay, DelayRange { min: Duration::from_millis(5), max: Duration::from_millis(30) });
        let c = parse(&["--node=n", "--lazy-finalizer", "--naive-ip-keyed", "--metrics-addr=0.0.0.0:1"]).unwrap();
        assert!(c.lazy_finalizer && c.naive_ip_keyed);
        assert_eq!(c.metrics_addr, "0.0.0.0:1".parse().unwrap());
    }

    #[test]
    fn bad_flags_name_the_flag() {
        for (args, flag) in [
            (&["--node", "n", "--finalizer", "noslash"][..], "--finalizer"),
            (&["--node", "n", "--dataplane", "vpp"][..], "--dataplane"),
            (&["--node", "n", "--teardown-delay", "30..10ms"][..], "--teardown-delay"),
            (&["--node", "n", "--teardown-delay", "5 minutes"][..], "--teardown-delay"),
            (&["--node", "n", "--metrics-addr", "localhost"][..], "--metrics-addr"),
            (&["--node", ""][..], "--node"),
        ] {
            let e = parse(args).unwrap_err();
            assert!(e.to_string().contains(flag), "{args:?}: {e}");
            assert_eq!(e.exit_code(), 2, "{args:?}");
        }
        if std::env::var_os("NODE_NAME").is_none() {
            let e = parse(&["--finalizer", "a.example/x"]).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
            assert!(e.to_string().contains("--node"), "{e}");
        }
    }

    #[test]
    fn an_unknown_flag_is_an_error() {
        // Before clap, this bound the default address and ignored the typo.
        let e = parse(&["--node", "n", "--metrics-adr", "0.0.0.0:1"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--metrics-adr"), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(parse(&["--node", "n", "stray"]).unwrap_err().kind(), ErrorKind::UnknownArgument);
    }

    #[test]
    fn help_exits_zero_with_the_usage() {
        let e = parse(&["--help"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DisplayHelp);
        assert_eq!(e.exit_code(), 0);
        let text = e.render().to_string();
        for flag in
            ["Usage: watcher-example", "--node", "--no-finalizer", "--metrics-addr", "[env: WATCHER_METRICS_ADDR"]
        {
            assert!(text.contains(flag), "{flag} missing from:\n{text}");
        }
    }

    #[test]
    fn booleans_behave() {
        let finalizer = |args: &[&str]| parse(&[&["--node", "n"], args].concat()).unwrap().finalizer;
        // Before clap, `--no-finalizer=true` kept the finalizer.
        assert_eq!(finalizer(&["--no-finalizer=true"]), None);
        assert_eq!(finalizer(&["--no-finalizer"]), None);
        assert_eq!(finalizer(&["--no-finalizer=false"]).as_deref(), Some(DEFAULT_FINALIZER));
        assert_eq!(finalizer(&["--no-finalizer", "--finalizer", "a.example/x"]), None, "--no-finalizer wins");
        assert!(parse(&["--node", "n", "--no-finalizer=yes"]).is_err());
        // A boolean never takes the next argument as its value.
        let c = parse(&["--naive-ip-keyed", "--node", "n"]).unwrap();
        assert!(c.naive_ip_keyed && c.node == "n");
        // Without a finalizer there is nothing to add lazily.
        assert!(!parse(&["--node", "n", "--no-finalizer", "--lazy-finalizer"]).unwrap().lazy_finalizer);
    }

    #[test]
    fn a_delay_sample_stays_in_range() {
        let r = parse_delay("10ms..20ms").unwrap();
        for _ in 0..100 {
            let d = r.sample();
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(20));
        }
        assert_eq!(parse_delay("0").unwrap(), DelayRange::default());
        assert_eq!(parse_delay("1.5s").unwrap().max, Duration::from_millis(1500));
    }
}
