//! Command-line flags (each with an environment-variable fallback).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};

/// Which [`crate::dataplane::Dataplane`] to program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    /// `--metrics-addr` / `WATCHER_METRICS_ADDR`: where `/metrics` and `/healthz` are served.
    pub metrics_addr: SocketAddr,
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

/// The usage text.
pub const USAGE: &str = "\
watcher-example: reference netendpoint downstream agent

  --node NAME              node served (env NODE_NAME; required)
  --finalizer NAME         finalizer acknowledged (env WATCHER_FINALIZER;
                           default watcher-example.netendpoint.dev/<node>)
  --no-finalizer           hold no finalizer (releases are not gated)
  --lazy-finalizer         add the finalizer to endpoints lacking it
  --kubeconfig PATH        default: in-cluster config or KUBECONFIG
  --metrics-addr ADDR      default 127.0.0.1:9464 (env WATCHER_METRICS_ADDR)
  --dataplane linux|memory default linux (env WATCHER_DATAPLANE)
  --netns NAME             default watcher-example (env WATCHER_NETNS)
  --device NAME            dummy device in the netns, default nep0
  --state-file PATH        table persistence (env WATCHER_STATE_FILE)
  --teardown-delay D|A..B  e.g. 20ms or 0ms..30ms (env WATCHER_TEARDOWN_DELAY)
  --event-log PATH         JSON lines of table changes (env WATCHER_EVENT_LOG)
  --naive-ip-keyed         tear down by IP without checking the UID
";

impl Config {
    /// Parses `args` (without the program name), falling back to `env`.
    pub fn parse(args: impl IntoIterator<Item = String>, env: &HashMap<String, String>) -> Result<Self> {
        let mut flags: HashMap<String, String> = HashMap::new();
        let mut switches: Vec<String> = Vec::new();
        let mut it = args.into_iter();
        while let Some(arg) = it.next() {
            let Some(name) = arg.strip_prefix("--") else {
                return Err(bad(&arg, "unexpected argument"));
            };
            if let Some((k, v)) = name.split_once('=') {
                flags.insert(k.to_string(), v.to_string());
                continue;
            }
            match name {
                "no-finalizer" | "lazy-finalizer" | "naive-ip-keyed" => switches.push(name.to_string()),
                "help" => return Err(bad("--help", USAGE)),
                _ => {
                    let v = it.next().ok_or_else(|| bad(&arg, "needs a value"))?;
                    flags.insert(name.to_string(), v);
                }
            }
        }
        let get = |flag: &str, var: &str| flags.get(flag).cloned().or_else(|| env.get(var).cloned());
        let node = get("node", "NODE_NAME").filter(|n| !n.is_empty()).ok_or_else(|| bad("--node", "required"))?;
        let finalizer = if switches.iter().any(|s| s == "no-finalizer") {
            None
        } else {
            let f = get("finalizer", "WATCHER_FINALIZER")
                .unwrap_or_else(|| format!("watcher-example.netendpoint.dev/{node}"));
            if !f.contains('/') {
                return Err(bad("--finalizer", "must be qualified, like example.com/agent"));
            }
            Some(f)
        };
        let metrics_addr = get("metrics-addr", "WATCHER_METRICS_ADDR")
            .unwrap_or_else(|| "127.0.0.1:9464".into())
            .parse()
            .map_err(|e| bad("--metrics-addr", &format!("{e}")))?;
        let dataplane = match get("dataplane", "WATCHER_DATAPLANE").as_deref() {
            None | Some("linux") => DataplaneKind::Linux,
            Some("memory") => DataplaneKind::Memory,
            Some(other) => return Err(bad("--dataplane", &format!("{other:?} is not linux or memory"))),
        };
        let teardown_delay = match get("teardown-delay", "WATCHER_TEARDOWN_DELAY") {
            None => DelayRange::default(),
            Some(s) => parse_delay(&s).map_err(|r| bad("--teardown-delay", &r))?,
        };
        Ok(Self {
            node,
            lazy_finalizer: switches.iter().any(|s| s == "lazy-finalizer") && finalizer.is_some(),
            finalizer,
            kubeconfig: flags.get("kubeconfig").map(PathBuf::from),
            metrics_addr,
            dataplane,
            netns: get("netns", "WATCHER_NETNS").unwrap_or_else(|| "watcher-example".into()),
            device: flags.get("device").cloned().unwrap_or_else(|| "nep0".into()),
            state_file: get("state-file", "WATCHER_STATE_FILE").map(PathBuf::from),
            teardown_delay,
            event_log: get("event-log", "WATCHER_EVENT_LOG").map(PathBuf::from),
            naive_ip_keyed: switches.iter().any(|s| s == "naive-ip-keyed"),
        })
    }
}

fn bad(flag: &str, reason: &str) -> Error {
    Error::Config { flag: flag.to_string(), reason: reason.to_string() }
}

/// Parses `250ms`, `2s`, `1m`, `0`, or a range `A..B` of those.
pub fn parse_delay(s: &str) -> Result<DelayRange, String> {
    match s.split_once("..") {
        Some((a, b)) => {
            let (min, max) = (parse_duration(a)?, parse_duration(b)?);
            if max < min {
                return Err(format!("{s:?}: the range is reversed"));
            }
            Ok(DelayRange { min, max })
        }
        None => parse_duration(s).map(|d| DelayRange { min: d, max: d }),
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a duration like 30ms"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        "" if n == 0 => Ok(Duration::ZERO),
        _ => Err(format!("{s:?}: unit must be ms, s or m")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Config> {
        Config::parse(args.iter().map(|s| s.to_string()), &HashMap::new())
    }

    #[test]
    fn defaults_and_flags() {
        let c = parse(&["--node", "node-a"]).unwrap();
        assert_eq!(c.finalizer.as_deref(), Some("watcher-example.netendpoint.dev/node-a"));
        assert_eq!(c.dataplane, DataplaneKind::Linux);
        let c =
            parse(&["--node=n", "--no-finalizer", "--dataplane", "memory", "--teardown-delay", "5ms..30ms"]).unwrap();
        assert_eq!(c.finalizer, None);
        assert_eq!(c.dataplane, DataplaneKind::Memory);
        assert_eq!(c.teardown_delay, DelayRange { min: Duration::from_millis(5), max: Duration::from_millis(30) });
    }

    #[test]
    fn bad_flags_name_the_flag() {
        for (args, flag) in [
            (&["--finalizer", "x"][..], "--node"),
            (&["--node", "n", "--finalizer", "noslash"][..], "--finalizer"),
            (&["--node", "n", "--dataplane", "vpp"][..], "--dataplane"),
            (&["--node", "n", "--teardown-delay", "30..10ms"][..], "--teardown-delay"),
        ] {
            match parse(args) {
                Err(Error::Config { flag: f, .. }) => assert_eq!(f, flag, "{args:?}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_delay_sample_stays_in_range() {
        let r = parse_delay("10ms..20ms").unwrap();
        for _ in 0..100 {
            let d = r.sample();
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(20));
        }
    }
}
