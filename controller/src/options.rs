//! The controller's flags ([`Options`], clap, each also read from an
//! environment variable) and the values they turn into: the decision
//! settings, the pool status interval, and the objects named
//! `namespace/name`. A value that does not parse is an error naming its
//! flag, never a silent default.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use netendpoint_crd::duration;

use crate::decide::Settings;
use crate::error::{Error, Result};

/// The controller's flags; each also reads an environment variable.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "netendpoint-controller", version, about)]
pub struct Options {
    /// Kubeconfig to use; in-cluster configuration when absent.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Name of the coordination.k8s.io Lease that elects the leader.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_NAME", default_value = "netendpoint-controller")]
    pub lease_name: String,
    /// Namespace of that Lease.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_NAMESPACE", default_value = "netendpoint-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (the Pod name in a Deployment).
    #[arg(long, env = "NETENDPOINT_CONTROLLER_IDENTITY")]
    pub identity: String,
    /// Seconds a leader's Lease stays valid without renewal: a dead leader
    /// is replaced within this bound.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u64,
    /// Seconds before expiry at which the leader renews (also the tolerated clock skew).
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_GRACE_SECONDS", default_value_t = 5)]
    pub lease_grace_seconds: u64,
    /// How long a lease's Node must be absent, seen twice, before its lease is released.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_VANISHED_NODE_GRACE", default_value = "5m")]
    pub vanished_node_grace: String,
    /// How long a lease's Pod UID must be absent, seen twice, before its lease
    /// is released; `off` turns this cleanup off.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_POD_GONE_GRACE", default_value = "15m")]
    pub pod_gone_grace: String,
    /// The forced-release bound of leases that carry none of their own.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_FORCE_RELEASE_AFTER", default_value = "10m")]
    pub force_release_after: String,
    /// How long a sticky claim must have had no Pod (its hold idle) before
    /// pool pressure may end its hold for a waiting ADD; a recreation of a
    /// StatefulSet Pod or a VM takes seconds, so the default is generous.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_PRESSURE_AFTER", default_value = "5m")]
    pub pressure_after: String,
    /// `namespace/name` of the ConfigMap holding the network config(s) the
    /// pools' ranges are read from; empty for none (no capacity figures, no
    /// StatefulSet claims, no pools for the admission policy).
    #[arg(long, env = "NETENDPOINT_CONTROLLER_NET_CONF", default_value = "netendpoint-system/netendpoint-net-conf")]
    pub net_conf: String,
    /// `namespace/name` of the ConfigMap the controller writes each pool's
    /// CIDRs into, for the admission policy `netendpoint-lease-range`;
    /// empty for none.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_POOLS_PARAM", default_value = "netendpoint-system/netendpoint-pools")]
    pub pools_param: String,
    /// Label selector of the leases this controller manages (and counts);
    /// empty for all. Lets one controller per set of pools run side by side.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_SELECTOR", default_value = "")]
    pub selector: String,
    /// Least time between two writes of one pool's NetworkEndpointPool
    /// figures (`kubectl get neppool`); `off` writes none.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_POOL_STATUS_INTERVAL", default_value = "5s")]
    pub pool_status_interval: String,
    /// Address of the /metrics, /healthz and /readyz server (loopback by
    /// default: put an authenticating proxy in front to scrape it).
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LISTEN", default_value = "127.0.0.1:9090")]
    pub listen: SocketAddr,
    /// Address of a second server that answers `/healthz` and `/readyz`
    /// only, for the kubelet's probes (e.g. `0.0.0.0:9091`); empty for none.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_PROBE_LISTEN", default_value = "")]
    pub probe_listen: String,
}

impl Options {
    /// The decision settings these flags describe.
    pub fn settings(&self) -> Result<Settings> {
        let dur = |flag: &'static str, v: &str| {
            duration::parse(v)
                .ok_or_else(|| Error::Flag { flag, reason: format!("{v:?} is not a duration such as 90s or 5m") })
        };
        Ok(Settings {
            vanished_node_grace: dur("vanished-node-grace", &self.vanished_node_grace)?,
            pod_gone_grace: match self.pod_gone_grace.as_str() {
                "off" => None,
                v => Some(dur("pod-gone-grace", v)?),
            },
            default_force_release_after: dur("force-release-after", &self.force_release_after)?,
            pressure_after: dur("pressure-after", &self.pressure_after)?,
        })
    }

    /// The pool status interval; `None` when `off`.
    pub fn pool_status_interval(&self) -> Result<Option<Duration>> {
        match self.pool_status_interval.as_str() {
            "off" => Ok(None),
            v => duration::parse(v).map(Some).ok_or_else(|| Error::Flag {
                flag: "pool-status-interval",
                reason: format!("{v:?} is not a duration such as 5s, or off"),
            }),
        }
    }

    /// The ConfigMap of the network configs (`--net-conf`); `None` when empty.
    pub fn net_conf(&self) -> Result<Option<(String, String)>> {
        object_ref("net-conf", &self.net_conf)
    }

    /// The ConfigMap of the pools parameter (`--pools-param`); `None` when empty.
    pub fn pools_param(&self) -> Result<Option<(String, String)>> {
        object_ref("pools-param", &self.pools_param)
    }

    /// The address of the probes-only server (`--probe-listen`); `None` when empty.
    pub fn probe_listen(&self) -> Result<Option<SocketAddr>> {
        if self.probe_listen.is_empty() {
            return Ok(None);
        }
        self.probe_listen
            .parse()
            .map(Some)
            .map_err(|e| Error::Flag { flag: "probe-listen", reason: format!("{:?}: {e}", self.probe_listen) })
    }
}

/// `namespace/name`, or `None` when empty.
fn object_ref(flag: &'static str, v: &str) -> Result<Option<(String, String)>> {
    if v.is_empty() {
        return Ok(None);
    }
    match v.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => Ok(Some((ns.to_string(), name.to_string()))),
        _ => Err(Error::Flag { flag, reason: format!("{v:?} is not namespace/name") }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn flags_turn_into_settings_and_pod_gc_can_be_off() {
        let o =
            Options::parse_from(["x", "--identity", "a", "--pod-gone-grace", "off", "--vanished-node-grace", "90s"]);
        let s = o.settings().unwrap();
        assert_eq!(s.pod_gone_grace, None);
        assert_eq!(s.vanished_node_grace, Duration::from_secs(90));
        assert_eq!(s.default_force_release_after, Duration::from_secs(600));
        assert_eq!(s.pressure_after, Duration::from_secs(300), "a recreation is never pressure");
        assert_eq!(o.listen.to_string(), "127.0.0.1:9090", "metrics on loopback by default");
        let bad = Options::parse_from(["x", "--identity", "a", "--pod-gone-grace", "soon"]);
        assert!(bad.settings().unwrap_err().to_string().contains("pod-gone-grace"));
        assert!(object_ref("net-conf", "just-a-name").is_err());
        assert_eq!(object_ref("net-conf", "").unwrap(), None);
    }

    #[test]
    fn object_and_address_flags_parse_or_name_their_flag() {
        let o = Options::parse_from(["x", "--identity", "a"]);
        let default = |ns: &str, name: &str| Some((ns.to_string(), name.to_string()));
        assert_eq!(o.net_conf().unwrap(), default("netendpoint-system", "netendpoint-net-conf"));
        assert_eq!(o.pools_param().unwrap(), default("netendpoint-system", "netendpoint-pools"));
        assert_eq!(o.probe_listen().unwrap(), None, "no probe server by default");
        assert_eq!(o.pool_status_interval().unwrap(), Some(Duration::from_secs(5)));
        let o = Options::parse_from([
            "x",
            "--identity",
            "a",
            "--pools-param",
            "",
            "--probe-listen",
            "0.0.0.0:9091",
            "--pool-status-interval",
            "off",
        ]);
        assert_eq!(o.pools_param().unwrap(), None);
        assert_eq!(o.probe_listen().unwrap().map(|a| a.port()), Some(9091));
        assert_eq!(o.pool_status_interval().unwrap(), None);
        let bad = Options::parse_from(["x", "--identity", "a", "--net-conf", "cm", "--probe-listen", "9091"]);
        assert!(bad.net_conf().unwrap_err().to_string().contains("--net-conf"));
        assert!(bad.probe_listen().unwrap_err().to_string().contains("--probe-listen"));
    }
}
