//! The CNI protocol: environment and stdin parsing, result and error encoding.
//!
//! Everything here works on values passed in (an environment map, stdin
//! bytes), never on process globals, so it is unit-testable as is. Supported
//! spec versions are 0.3.0, 0.3.1, 0.4.0, 1.0.0 and 1.1.0.

use std::collections::HashMap;
use std::net::IpAddr;

use ipnet::IpNet;
use netendpoint_netconf::Route;
use serde_json::{Map, Value};

use crate::error::Error;

/// The newest spec version this plugin implements.
pub const CURRENT_VERSION: &str = "1.1.0";
/// Every spec version this plugin accepts, oldest first.
pub const SUPPORTED_VERSIONS: [&str; 5] = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// A spec version this plugin supports. Ordered oldest to newest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CniVersion {
    /// 0.3.0
    V0_3_0,
    /// 0.3.1
    V0_3_1,
    /// 0.4.0: adds CHECK.
    V0_4_0,
    /// 1.0.0: drops `ips[].version`.
    V1_0_0,
    /// 1.1.0: adds STATUS and GC.
    V1_1_0,
}

impl CniVersion {
    /// Parses a `cniVersion` string; anything unsupported is a code 1 error.
    pub fn parse(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "0.3.0" => Self::V0_3_0,
            "0.3.1" => Self::V0_3_1,
            "0.4.0" => Self::V0_4_0,
            "1.0.0" => Self::V1_0_0,
            "1.1.0" => Self::V1_1_0,
            other => {
                return Err(Error::IncompatibleVersion { version: other.to_string() });
            }
        })
    }

    /// The version as written on the wire.
    pub fn as_str(self) -> &'static str {
        SUPPORTED_VERSIONS[self as usize]
    }
}

/// The CNI operation requested in `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Allocate.
    Add,
    /// Release.
    Del,
    /// Verify a previous ADD.
    Check,
    /// Report supported versions.
    Version,
    /// Report readiness (1.1.0).
    Status,
    /// Garbage-collect stale attachments (1.1.0).
    Gc,
}

impl Command {
    /// Parses `CNI_COMMAND`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "ADD" => Self::Add,
            "DEL" => Self::Del,
            "CHECK" => Self::Check,
            "VERSION" => Self::Version,
            "STATUS" => Self::Status,
            "GC" => Self::Gc,
            other => {
                return Err(Error::InvalidEnv { var: "CNI_COMMAND", reason: format!("unknown command {other:?}") });
            }
        })
    }

    /// The command as written in `CNI_COMMAND`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Del => "DEL",
            Self::Check => "CHECK",
            Self::Version => "VERSION",
            Self::Status => "STATUS",
            Self::Gc => "GC",
        }
    }

    /// The spec version that introduced the command.
    pub fn since(self) -> CniVersion {
        match self {
            Self::Add | Self::Del | Self::Version => CniVersion::V0_3_0,
            Self::Check => CniVersion::V0_4_0,
            Self::Status | Self::Gc => CniVersion::V1_1_0,
        }
    }
}

/// The Pod a sandbox belongs to, from `K8S_POD_*` in CNI_ARGS or `args.cni`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodIdentity {
    /// K8S_POD_NAMESPACE
    pub namespace: String,
    /// K8S_POD_NAME
    pub name: String,
    /// K8S_POD_UID (may be empty: older runtimes do not pass it)
    pub uid: String,
}

/// The longest `CNI_CONTAINERID` accepted, in characters. The spec sets no
/// bound; 253 (a DNS subdomain's length) comfortably holds every runtime's
/// 64-hex-digit IDs and keeps the value fit for the lease's `spec.containerID`
/// and a local file name.
pub const MAX_CONTAINER_ID_LEN: usize = 253;
/// The longest `CNI_IFNAME` accepted, in bytes: Linux's `IFNAMSIZ - 1`.
pub const MAX_IF_NAME_LEN: usize = 15;
/// How much of a rejected value an error message quotes, in characters.
const QUOTE_LEN: usize = 64;

/// The parsed CNI environment of one invocation.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// CNI_COMMAND
    pub command: Command,
    /// CNI_CONTAINERID (empty for VERSION, STATUS and GC)
    pub container_id: String,
    /// CNI_IFNAME (empty for VERSION, STATUS and GC)
    pub if_name: String,
    /// CNI_NETNS (unused by an IPAM plugin, kept for logs)
    pub netns: String,
    /// Key-value pairs of CNI_ARGS.
    pub args: HashMap<String, String>,
}

impl Invocation {
    /// Reads the CNI variables from `env`. Any violation is a code 4 error
    /// naming the variable.
    ///
    /// For ADD, DEL and CHECK, `CNI_CONTAINERID` and `CNI_IFNAME` are required
    /// and checked as libcni checks them: see [`validate_container_id`] and
    /// [`validate_if_name`]. VERSION, STATUS and GC ignore both (they come
    /// back empty). ADD also requires `CNI_NETNS`.
    pub fn from_env(env: &HashMap<String, String>) -> Result<Self, Error> {
        let command = Command::parse(
            env.get("CNI_COMMAND").ok_or(Error::InvalidEnv { var: "CNI_COMMAND", reason: "not set".into() })?,
        )?;
        let needs_attachment = matches!(command, Command::Add | Command::Del | Command::Check);
        let attachment_var = |var: &'static str, validate: fn(&str) -> Result<(), String>| -> Result<String, Error> {
            if !needs_attachment {
                return Ok(String::new());
            }
            match env.get(var).map(String::as_str) {
                Some(v) if !v.is_empty() => {
                    validate(v).map_err(|reason| Error::InvalidEnv { var, reason })?;
                    Ok(v.to_string())
                }
                _ => Err(Error::InvalidEnv { var, reason: "not set".into() }),
            }
        };
        let container_id = attachment_var("CNI_CONTAINERID", validate_container_id)?;
        let if_name = attachment_var("CNI_IFNAME", validate_if_name)?;
        let netns = env.get("CNI_NETNS").cloned().unwrap_or_default();
        if command == Command::Add && netns.is_empty() {
            return Err(Error::InvalidEnv { var: "CNI_NETNS", reason: "not set".into() });
        }
        let args = parse_cni_args(env.get("CNI_ARGS").map(String::as_str).unwrap_or(""))?;
        Ok(Self { command, container_id, if_name, netns, args })
    }

    /// The addresses of host-local's `IP=` in CNI_ARGS: a comma-separated
    /// list of addresses or CIDRs (`IP=10.1.2.3,fd00::3`). Absent or empty
    /// is an empty list; anything malformed is code 4 naming the entry.
    pub fn ip_arg(&self) -> Result<Vec<IpAddr>, Error> {
        let Some(raw) = self.args.get("IP").filter(|v| !v.trim().is_empty()) else { return Ok(Vec::new()) };
        let items: Vec<&str> = raw.split(',').collect();
        if items.len() > MAX_REQUESTED_IPS {
            return Err(Error::InvalidEnv {
                var: "CNI_ARGS",
                reason: format!("IP lists {} addresses; at most {MAX_REQUESTED_IPS}", items.len()),
            });
        }
        items
            .iter()
            .map(|s| {
                parse_requested_ip(s).ok_or_else(|| Error::InvalidEnv {
                    var: "CNI_ARGS",
                    reason: format!("IP entry {} is not an IP address or CIDR", quote(s)),
                })
            })
            .collect()
    }

    /// The Pod identity: CNI_ARGS first, then the `args.cni` section of the config.
    pub fn pod(&self, conf_args: &Map<String, Value>) -> Option<PodIdentity> {
        let pick = |key: &str| -> String {
            self.args
                .get(key)
                .cloned()
                .or_else(|| conf_args.get(key).and_then(Value::as_str).map(str::to_string))
                .unwrap_or_default()
        };
        let pod =
            PodIdentity { namespace: pick("K8S_POD_NAMESPACE"), name: pick("K8S_POD_NAME"), uid: pick("K8S_POD_UID") };
        (!pod.name.is_empty()).then_some(pod)
    }
}

/// Most addresses one list of requested IPs may hold: one per range set is
/// all an ADD can use, and a longer list is refused before any API call.
pub const MAX_REQUESTED_IPS: usize = 16;

/// One requested address: a bare IP or a CIDR whose address part is taken
/// (host-local's reading). `None` when it is neither.
pub fn parse_requested_ip(s: &str) -> Option<IpAddr> {
    let s = s.trim();
    s.parse::<IpAddr>().ok().or_else(|| s.parse::<IpNet>().ok().map(|n| n.addr()))
}

/// A JSON list of requested IPs at `field` (code 7 when malformed).
fn ip_list(field: &str, value: Option<&Value>) -> Result<Vec<IpAddr>, Error> {
    let items = match value {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(Error::config(field, "must be a list of IP addresses or CIDRs")),
    };
    if items.len() > MAX_REQUESTED_IPS {
        return Err(Error::config(field, &format!("lists {} addresses; at most {MAX_REQUESTED_IPS}", items.len())));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let at = format!("{field}[{i}]");
            let s = v.as_str().ok_or_else(|| Error::config(&at, "must be a string"))?;
            parse_requested_ip(s).ok_or_else(|| {
                Error::config(&at, &format!("{} is not an IP address or CIDR (e.g. \"10.1.2.3/24\")", quote(s)))
            })
        })
        .collect()
}

/// Checks a container ID as libcni's `ValidateContainerID` does: it matches
/// `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`. It must also be non-empty and at most
/// [`MAX_CONTAINER_ID_LEN`] characters. The error says what is wrong and
/// quotes at most the first 64 characters.
pub fn validate_container_id(id: &str) -> Result<(), String> {
    let len = id.chars().count();
    if len > MAX_CONTAINER_ID_LEN {
        return Err(format!("{} is longer than {MAX_CONTAINER_ID_LEN} characters", quote(id)));
    }
    let mut chars = id.chars();
    match chars.next() {
        None => return Err("is empty".into()),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return Err(format!("{} must start with a letter or digit, not {c:?}", quote(id)));
        }
        Some(_) => {}
    }
    if let Some(c) = chars.find(|&c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))) {
        return Err(format!("{} contains {c:?}; only letters, digits, '_', '.' and '-' are allowed", quote(id)));
    }
    Ok(())
}

/// Checks an interface name as libcni's `ValidateInterfaceName` does:
/// non-empty, at most [`MAX_IF_NAME_LEN`] bytes, not `.` or `..`, and no `/`,
/// `:` or whitespace. The error says what is wrong and quotes at most the
/// first 64 characters.
pub fn validate_if_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".into());
    }
    if name.len() > MAX_IF_NAME_LEN {
        return Err(format!(
            "{} is {} bytes long; a Linux interface name has at most {MAX_IF_NAME_LEN}",
            quote(name),
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not a valid interface name"));
    }
    if let Some(c) = name.chars().find(|&c| c == '/' || c == ':' || c.is_whitespace()) {
        return Err(format!("{} contains {c:?}; '/', ':' and whitespace are not allowed", quote(name)));
    }
    Ok(())
}

/// A value for an error message: the whole of it if short, else its first
/// [`QUOTE_LEN`] characters and its length, so a huge value is never echoed.
fn quote(value: &str) -> String {
    let len = value.chars().count();
    if len <= QUOTE_LEN {
        format!("{value:?}")
    } else {
        let head: String = value.chars().take(QUOTE_LEN).collect();
        format!("{head:?}... ({len} characters)")
    }
}

/// Parses CNI_ARGS (`K1=v1;K2=v2`). Malformed pairs are a code 4 error.
pub fn parse_cni_args(raw: &str) -> Result<HashMap<String, String>, Error> {
    let mut out = HashMap::new();
    for pair in raw.split(';').filter(|p| !p.is_empty()) {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| Error::InvalidEnv { var: "CNI_ARGS", reason: format!("{pair:?} is not KEY=VALUE") })?;
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// The network configuration on stdin, split into what this plugin reads.
/// Unknown top-level keys belong to the main plugin and are ignored.
#[derive(Debug, Clone)]
pub struct NetConf {
    /// `cniVersion`
    pub version: CniVersion,
    /// `name`: the network name.
    pub name: String,
    /// The raw `ipam` object (validated by [`netendpoint_netconf::config`]).
    pub ipam: Value,
    /// `args.cni`, the conventions' way to pass per-invocation arguments.
    pub args_cni: Map<String, Value>,
    /// `prevResult` (CHECK, DEL).
    pub prev_result: Option<Value>,
    /// `cni.dev/valid-attachments` (GC).
    pub valid_attachments: Option<Vec<AttachmentKey>>,
    /// `runtimeConfig.ips` as sent (the `ips` capability); read by
    /// [`NetConf::runtime_config_ips`], on ADD only.
    pub runtime_config_ips: Option<Value>,
    /// The name of the Pod interface's `IPAMClaim` when the runtime passes
    /// it (`args.cni["ipam-claim-reference"]`, or the network config's own
    /// `ipam-claim-reference`): a claim in the Pod's namespace.
    pub claim_reference: Option<String>,
}

/// What identifies an attachment in CNI: (CNI_CONTAINERID, CNI_IFNAME). ADD
/// is idempotent per key, DEL releases only its key's leases, and GC keeps
/// the keys of `cni.dev/valid-attachments` (whose JSON names are
/// `containerID` and `ifname`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Deserialize)]
pub struct AttachmentKey {
    /// CNI_CONTAINERID: the sandbox ID.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// CNI_IFNAME: the interface name.
    #[serde(rename = "ifname")]
    pub if_name: String,
}

impl NetConf {
    /// Parses stdin. Malformed JSON is code 6; a missing or unsupported
    /// `cniVersion` is code 1; a wrong-typed known field is code 7.
    pub fn parse(stdin: &[u8]) -> Result<Self, Error> {
        let root: Value = serde_json::from_slice(stdin)
            .map_err(|e| Error::Decode { what: "network configuration on stdin", reason: e.to_string() })?;
        let obj = root
            .as_object()
            .ok_or(Error::Decode { what: "network configuration on stdin", reason: "not a JSON object".into() })?;
        let version = match obj.get("cniVersion") {
            Some(Value::String(v)) => CniVersion::parse(v)?,
            Some(_) => return Err(Error::config("cniVersion", "must be a string")),
            None => return Err(Error::config("cniVersion", "is required")),
        };
        let name = match obj.get("name") {
            Some(Value::String(n)) if !n.is_empty() => n.clone(),
            _ => return Err(Error::config("name", "is required (the network name)")),
        };
        let ipam = obj.get("ipam").cloned().ok_or_else(|| Error::config("ipam", "is required"))?;
        let args_cni = match obj.get("args").and_then(|a| a.get("cni")) {
            None => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(Error::config("args.cni", "must be an object")),
        };
        // Absent and null both mean "the runtime sent no list" (see lifecycle::gc).
        let valid_attachments = match obj.get("cni.dev/valid-attachments") {
            None | Some(Value::Null) => None,
            Some(v) => Some(
                serde_json::from_value(v.clone())
                    .map_err(|e| Error::config("cni.dev/valid-attachments", &e.to_string()))?,
            ),
        };
        let runtime_config_ips = obj.get("runtimeConfig").and_then(|r| r.get("ips")).cloned();
        Ok(Self {
            version,
            name,
            ipam,
            claim_reference: claim_reference(obj, &args_cni)?,
            args_cni,
            prev_result: obj.get("prevResult").cloned(),
            valid_attachments,
            runtime_config_ips,
        })
    }

    /// The addresses of `runtimeConfig.ips`, the `ips` capability (which
    /// Multus fills from a pod's network-selection annotation): a list of
    /// strings, each a CIDR (`"10.1.2.3/24"`, whose prefix length is
    /// ignored) or a bare address. Absent or null is an empty list; anything
    /// malformed is code 7 naming the entry.
    pub fn runtime_config_ips(&self) -> Result<Vec<IpAddr>, Error> {
        ip_list("runtimeConfig.ips", self.runtime_config_ips.as_ref())
    }

    /// The addresses of `args.cni.ips` (the conventions' `ips` argument),
    /// read as [`NetConf::runtime_config_ips`] reads its list.
    pub fn args_cni_ips(&self) -> Result<Vec<IpAddr>, Error> {
        ip_list("args.cni.ips", self.args_cni.get("ips"))
    }

    /// Reads only `cniVersion`, for VERSION and for encoding early errors;
    /// never fails (an unreadable version yields `None`).
    pub fn peek_version(stdin: &[u8]) -> Option<String> {
        let v: Value = serde_json::from_slice(stdin).ok()?;
        v.get("cniVersion")?.as_str().map(str::to_string)
    }
}

/// The claim name the runtime passes, validated as an object name (code 7).
fn claim_reference(obj: &Map<String, Value>, args_cni: &Map<String, Value>) -> Result<Option<String>, Error> {
    const KEY: &str = "ipam-claim-reference";
    let (field, v) = match (args_cni.get(KEY), obj.get(KEY)) {
        (Some(v), _) => ("args.cni.ipam-claim-reference", v),
        (None, Some(v)) => ("ipam-claim-reference", v),
        (None, None) => return Ok(None),
    };
    match v {
        Value::Null => Ok(None),
        Value::String(s) if s.is_empty() => Ok(None),
        Value::String(s) if netendpoint_crd::is_dns1123_subdomain(s) => Ok(Some(s.clone())),
        other => Err(Error::config(field, &format!("{} is not the name of an IPAMClaim", quote(&other.to_string())))),
    }
}

/// One address of an IPAM result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpConfig {
    /// Address with the prefix length of its subnet.
    pub address: IpNet,
    /// Gateway of the range, if any.
    pub gateway: Option<IpAddr>,
}

/// The IPAM result of ADD, encodable in every supported version.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpamResult {
    /// One entry per range set.
    pub ips: Vec<IpConfig>,
    /// Routes from the config.
    pub routes: Vec<Route>,
}

impl IpamResult {
    /// Encodes the result in the shape of `version`: before 1.0.0 each IP
    /// carries `"version": "4"|"6"`, from 1.0.0 on it does not.
    pub fn encode(&self, version: CniVersion) -> Value {
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|ip| {
                let mut m = Map::new();
                if version < CniVersion::V1_0_0 {
                    let family = if ip.address.addr().is_ipv4() { "4" } else { "6" };
                    m.insert("version".into(), family.into());
                }
                m.insert("address".into(), ip.address.to_string().into());
                if let Some(gw) = ip.gateway {
                    m.insert("gateway".into(), gw.to_string().into());
                }
                Value::Object(m)
            })
            .collect();
        serde_json::json!({
            "cniVersion": version.as_str(),
            "ips": ips,
            "routes": self.routes,
            "dns": {},
        })
    }

    /// The addresses of a `prevResult` in any supported version; used by CHECK.
    pub fn addresses_of(prev: &Value) -> Result<Vec<IpNet>, Error> {
        let ips =
            prev.get("ips").and_then(Value::as_array).ok_or_else(|| Error::config("prevResult.ips", "is missing"))?;
        ips.iter()
            .enumerate()
            .map(|(i, ip)| {
                let field = format!("prevResult.ips[{i}].address");
                let raw =
                    ip.get("address").and_then(Value::as_str).ok_or_else(|| Error::config(&field, "is missing"))?;
                raw.parse::<IpNet>().map_err(|_| Error::config(&field, &format!("{raw:?} is not a CIDR address")))
            })
            .collect()
    }
}

/// The VERSION answer.
pub fn version_info() -> Value {
    serde_json::json!({ "cniVersion": CURRENT_VERSION, "supportedVersions": SUPPORTED_VERSIONS })
}

/// The spec's error object; `version` is echoed from the request when known.
///
/// `msg` is the error's one-line message. `details` is written only when the
/// error has underlying causes that `msg` does not already quote (for
/// example the OS error under an unreachable API server); see [`details`].
pub fn encode_error(version: &str, err: &Error) -> Value {
    let msg = err.short();
    let mut v = serde_json::json!({
        "cniVersion": version,
        "code": err.code(),
        "msg": msg,
    });
    if let Some(details) = details(err, &msg) {
        v["details"] = details.into();
    }
    v
}

/// The underlying causes of `err` that `msg` does not already quote: per
/// failed step, its causes outermost first joined with ": ", and the steps
/// joined with "; ". `None` when every cause is already in `msg`.
fn details(err: &Error, msg: &str) -> Option<String> {
    let steps: Vec<String> = err
        .cause_chains()
        .into_iter()
        .map(|chain| chain.into_iter().filter(|cause| !msg.contains(cause.as_str())).collect::<Vec<_>>().join(": "))
        .filter(|step| !step.is_empty())
        .collect();
    (!steps.is_empty()).then(|| steps.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn add_needs_container_ifname_and_netns() {
        let full =
            [("CNI_COMMAND", "ADD"), ("CNI_CONTAINERID", "abc"), ("CNI_IFNAME", "eth0"), ("CNI_NETNS", "/run/netns/x")];
        assert!(Invocation::from_env(&env(&full)).is_ok());
        for missing in ["CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS", "CNI_COMMAND"] {
            let partial: Vec<_> = full.iter().copied().filter(|(k, _)| *k != missing).collect();
            let err = Invocation::from_env(&env(&partial)).unwrap_err();
            assert_eq!(err.code(), 4, "{missing}");
            assert!(err.to_string().contains(missing), "{err}");
        }
    }

    #[test]
    fn version_status_gc_need_no_attachment() {
        for cmd in ["VERSION", "STATUS", "GC"] {
            assert!(Invocation::from_env(&env(&[("CNI_COMMAND", cmd)])).is_ok(), "{cmd}");
        }
        let err = Invocation::from_env(&env(&[("CNI_COMMAND", "FROB")])).unwrap_err();
        assert_eq!(err.code(), 4);
    }

    /// The env of an ADD with this container ID and ifname.
    fn attach_env(command: &str, container_id: &str, if_name: &str) -> HashMap<String, String> {
        env(&[
            ("CNI_COMMAND", command),
            ("CNI_CONTAINERID", container_id),
            ("CNI_IFNAME", if_name),
            ("CNI_NETNS", "/run/netns/x"),
        ])
    }

    #[test]
    fn bad_container_ids_are_code_4() {
        let huge = "a".repeat(70_000);
        let too_long = "a".repeat(MAX_CONTAINER_ID_LEN + 1);
        let cases: &[(&str, &str)] = &[
            (&huge, "longer than 253"),
            (&too_long, "longer than 253"),
            ("-abc", "must start with a letter or digit"),
            (".abc", "must start with a letter or digit"),
            ("_abc", "must start with a letter or digit"),
            ("abc/def", "contains '/'"),
            ("abc def", "contains ' '"),
            ("abc:def", "contains ':'"),
            ("abc\ndef", "contains '\\n'"),
            ("abcé", "contains 'é'"),
            ("ébc", "must start with a letter or digit"),
        ];
        for cmd in ["ADD", "DEL", "CHECK"] {
            for (id, why) in cases {
                let err = Invocation::from_env(&attach_env(cmd, id, "eth0")).unwrap_err();
                let msg = err.to_string();
                assert_eq!(err.code(), 4, "{cmd} {msg}");
                assert!(msg.starts_with("CNI_CONTAINERID: "), "{msg}");
                assert!(msg.contains(why), "{cmd}: {msg:?} should say {why:?}");
            }
        }
    }

    #[test]
    fn bad_if_names_are_code_4() {
        let huge = "e".repeat(70_000);
        let cases: &[(&str, &str)] = &[
            (&huge, "70000 bytes long"),
            ("abcdefghijklmnop", "16 bytes long"),
            ("éééééééé", "16 bytes long"),
            (".", "not a valid interface name"),
            ("..", "not a valid interface name"),
            ("eth0/x", "contains '/'"),
            ("eth0:1", "contains ':'"),
            ("eth 0", "contains ' '"),
            ("eth\t0", "contains '\\t'"),
            ("eth\u{a0}0", "contains '\\u{a0}'"),
        ];
        for cmd in ["ADD", "DEL", "CHECK"] {
            for (if_name, why) in cases {
                let err = Invocation::from_env(&attach_env(cmd, "abc", if_name)).unwrap_err();
                let msg = err.to_string();
                assert_eq!(err.code(), 4, "{cmd} {msg}");
                assert!(msg.starts_with("CNI_IFNAME: "), "{msg}");
                assert!(msg.contains(why), "{cmd}: {msg:?} should say {why:?}");
            }
        }
    }

    #[test]
    fn huge_values_are_quoted_short_with_their_length() {
        let huge = "x".repeat(70_000);
        for (id, if_name, len) in [(huge.as_str(), "eth0", "70000 characters"), ("abc", huge.as_str(), "70000 bytes")] {
            let msg = Invocation::from_env(&attach_env("ADD", id, if_name)).unwrap_err().to_string();
            assert!(msg.len() < 250, "{} bytes: {msg}", msg.len());
            assert!(msg.contains(&format!("\"{}\"...", "x".repeat(64))), "{msg}");
            assert!(!msg.contains(&"x".repeat(65)), "{msg}");
            assert!(msg.contains(len), "{msg}");
        }
    }

    #[test]
    fn edge_container_ids_and_if_names_are_accepted() {
        let longest_id = "a".repeat(MAX_CONTAINER_ID_LEN);
        let ids = [longest_id.as_str(), "0", "Z", "a.b_c-d", "0123456789abcdef", "k8s_POD.web-0_default-1", "a..__--"];
        let if_names = ["eth0", "net1", "abcdefghijklmno", "a", "...", "eth0.100", "veth-1_x@y", "éé"];
        for cmd in ["ADD", "DEL", "CHECK"] {
            for id in ids {
                for if_name in if_names {
                    let inv = Invocation::from_env(&attach_env(cmd, id, if_name))
                        .unwrap_or_else(|e| panic!("{cmd} {id:?} {if_name:?}: {e}"));
                    assert_eq!((inv.container_id.as_str(), inv.if_name.as_str()), (id, if_name));
                }
            }
        }
    }

    #[test]
    fn version_status_gc_ignore_container_id_and_ifname() {
        let huge = "x".repeat(70_000);
        for cmd in ["VERSION", "STATUS", "GC"] {
            for (id, if_name) in [(huge.as_str(), "eth0/x"), ("-bad", huge.as_str()), ("", "")] {
                let inv = Invocation::from_env(&attach_env(cmd, id, if_name)).unwrap();
                assert_eq!((inv.container_id.as_str(), inv.if_name.as_str()), ("", ""), "{cmd}");
            }
        }
    }

    #[test]
    fn pod_identity_from_cni_args_then_conf_args() {
        let inv = Invocation::from_env(&env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=web-0"),
        ]))
        .unwrap();
        let conf: Map<String, Value> =
            serde_json::from_str(r#"{"K8S_POD_UID":"u-1","K8S_POD_NAME":"ignored"}"#).unwrap();
        let pod = inv.pod(&conf).unwrap();
        assert_eq!(pod, PodIdentity { namespace: "ns".into(), name: "web-0".into(), uid: "u-1".into() });
        assert!(parse_cni_args("A=1;broken").is_err());
    }

    #[test]
    fn requested_ips_from_cni_args_are_a_comma_list_and_malformed_is_code_4() {
        let inv = |args: &str| {
            Invocation::from_env(&env(&[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_NETNS", "/x"),
                ("CNI_ARGS", args),
            ]))
            .unwrap()
        };
        let want: Vec<IpAddr> = vec!["10.1.2.3".parse().unwrap(), "fd00::3".parse().unwrap()];
        assert_eq!(inv("IgnoreUnknown=1;IP=10.1.2.3,fd00::3").ip_arg().unwrap(), want);
        assert_eq!(inv("IP=10.1.2.3/24, fd00::3/64").ip_arg().unwrap(), want);
        assert!(inv("K8S_POD_NAME=p").ip_arg().unwrap().is_empty());
        assert!(inv("IP=").ip_arg().unwrap().is_empty());
        for bad in ["IP=10.1.2", "IP=10.1.2.3,,fd00::3", "IP=10.1.2.3/33"] {
            let e = inv(bad).ip_arg().unwrap_err();
            assert_eq!(e.code(), 4, "{bad}: {e}");
            assert!(e.to_string().contains("CNI_ARGS") && e.to_string().contains("IP entry"), "{e}");
        }
        let many = format!("IP={}", vec!["10.0.0.1"; MAX_REQUESTED_IPS + 1].join(","));
        assert_eq!(inv(&many).ip_arg().unwrap_err().code(), 4);
    }

    #[test]
    fn requested_ips_from_runtime_config_and_args_and_malformed_is_code_7() {
        let parse = |extra: Value| {
            let mut v = serde_json::json!({"cniVersion": "1.1.0", "name": "n", "ipam": {}});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            NetConf::parse(&serde_json::to_vec(&v).unwrap()).unwrap()
        };
        let net = parse(
            serde_json::json!({"runtimeConfig": {"ips": ["10.1.2.3/24", "fd00::3"]}, "args": {"cni": {"ips": ["10.1.2.4"]}}}),
        );
        assert_eq!(
            net.runtime_config_ips().unwrap(),
            vec!["10.1.2.3".parse::<IpAddr>().unwrap(), "fd00::3".parse().unwrap()]
        );
        assert_eq!(net.args_cni_ips().unwrap(), vec!["10.1.2.4".parse::<IpAddr>().unwrap()]);
        let none = parse(serde_json::json!({"runtimeConfig": {"portMappings": []}}));
        assert!(none.runtime_config_ips().unwrap().is_empty() && none.args_cni_ips().unwrap().is_empty());
        assert!(parse(serde_json::json!({"runtimeConfig": {"ips": null}})).runtime_config_ips().unwrap().is_empty());
        for (bad, field) in [
            (serde_json::json!("10.1.2.3"), "runtimeConfig.ips "),
            (serde_json::json!(["10.1.2.3", 4]), "runtimeConfig.ips[1]"),
            (serde_json::json!(["fd00::zz"]), "runtimeConfig.ips[0]"),
        ] {
            // Parsing stdin does not read the list: only an ADD does, so a DEL never fails on it.
            let net = parse(serde_json::json!({"runtimeConfig": {"ips": bad}}));
            let e = net.runtime_config_ips().unwrap_err();
            assert_eq!(e.code(), 7, "{e}");
            assert!(e.to_string().contains(field), "{e}");
        }
    }

    #[test]
    fn result_shape_follows_the_version() {
        let r = IpamResult {
            ips: vec![IpConfig { address: "10.0.0.2/24".parse().unwrap(), gateway: Some("10.0.0.1".parse().unwrap()) }],
            routes: vec![Route { dst: "0.0.0.0/0".parse().unwrap(), gw: None }],
        };
        for v in SUPPORTED_VERSIONS {
            let ver = CniVersion::parse(v).unwrap();
            let out = r.encode(ver);
            assert_eq!(out["cniVersion"], v);
            assert_eq!(out["ips"][0]["address"], "10.0.0.2/24");
            assert_eq!(out["ips"][0]["gateway"], "10.0.0.1");
            assert_eq!(out["routes"][0]["dst"], "0.0.0.0/0");
            assert_eq!(out["ips"][0].get("version").is_some(), ver < CniVersion::V1_0_0, "{v}");
            assert_eq!(IpamResult::addresses_of(&out).unwrap(), vec![r.ips[0].address]);
        }
    }

    #[test]
    fn stdin_errors_have_spec_codes() {
        assert_eq!(NetConf::parse(b"{not json").unwrap_err().code(), 6);
        assert_eq!(NetConf::parse(b"[]").unwrap_err().code(), 6);
        assert_eq!(NetConf::parse(br#"{"cniVersion":"0.2.0","name":"n","ipam":{}}"#).unwrap_err().code(), 1);
        let e = NetConf::parse(br#"{"cniVersion":"1.0.0","ipam":{}}"#).unwrap_err();
        assert_eq!(e.code(), 7);
        assert!(e.to_string().contains("name"), "{e}");
        let ok = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"bridge","bridge":"br0","ipam":{},
                 "cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}"#,
        )
        .unwrap();
        let key = AttachmentKey { container_id: "a".into(), if_name: "eth0".into() };
        assert_eq!(ok.valid_attachments, Some(vec![key]));
    }

    #[test]
    fn error_json_has_the_spec_fields() {
        let e = Error::config("ipam.ranges[0][0].subnet", "\"10.0.0.0/33\" is not a CIDR");
        let v = encode_error("1.0.0", &e);
        assert_eq!(v["cniVersion"], "1.0.0");
        assert_eq!(v["code"], 7);
        assert!(v["msg"].as_str().unwrap().contains("ipam.ranges[0][0].subnet"));
        assert!(v.get("details").is_none(), "a config error has no cause beyond msg: {v}");
    }

    /// A cause with a cause of its own, as hyper's connect errors are.
    #[derive(Debug)]
    struct Connect(std::io::Error);
    impl std::fmt::Display for Connect {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("tcp connect error")
        }
    }
    impl std::error::Error for Connect {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    fn unreachable() -> Error {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        Error::ApiUnreachable { op: "list pool p".into(), source: kube::Error::Service(Box::new(Connect(refused))) }
    }

    #[test]
    fn details_hold_the_causes_that_msg_does_not_quote() {
        let v = encode_error("1.1.0", &unreachable());
        assert_eq!(v["code"], 101);
        assert_eq!(v["msg"], "API server unreachable while trying to list pool p: ServiceError: tcp connect error");
        assert_eq!(v["details"], "connection refused");
        let io = Error::Io { what: "node-name file", path: "/x".into(), source: std::io::Error::other("denied") };
        assert!(encode_error("1.1.0", &io).get("details").is_none(), "msg already quotes the cause");
    }

    #[test]
    fn details_of_several_failures_and_of_status() {
        let many = Error::Many(vec![Error::config("ipam.pool", "bad"), unreachable(), unreachable()]);
        assert_eq!(encode_error("1.1.0", &many)["details"], "connection refused; connection refused");
        let status = Error::NotReady(Box::new(unreachable()));
        assert_eq!(encode_error("1.1.0", &status)["details"], "connection refused");
    }
}
