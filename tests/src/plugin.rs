//! The `netendpoint` plugin binary run as a runtime runs it: one process per
//! CNI command, `CNI_*` in its environment and the network config on stdin.

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::env::plugin_bin;
use crate::netns::cni_path;

/// Runs the plugin binary directly, as a runtime does: CNI_* in the
/// environment, the network config on stdin. Returns (exit ok, stdout, stderr).
pub fn invoke(command: &str, conf: &serde_json::Value, env: &[(&str, &str)]) -> (bool, serde_json::Value, String) {
    invoke_raw(command, &serde_json::to_vec(conf).unwrap(), env)
}

/// Like [`invoke`] with raw stdin bytes.
pub fn invoke_raw(command: &str, stdin: &[u8], env: &[(&str, &str)]) -> (bool, serde_json::Value, String) {
    invoke_wrapped(&[], command, stdin, env)
}

/// Like [`invoke_raw`], with the plugin started through `wrapper` (e.g.
/// `["faketime", "-f", "+1h"]` to run it with a node clock that is off).
pub fn invoke_wrapped(
    wrapper: &[&str],
    command: &str,
    stdin: &[u8],
    env: &[(&str, &str)],
) -> (bool, serde_json::Value, String) {
    use std::io::Write;
    let mut cmd = match wrapper.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(plugin_bin());
            c
        }
        None => Command::new(plugin_bin()),
    };
    cmd.env_clear().env("CNI_COMMAND", command).env("CNI_PATH", cni_path());
    if let Ok(path) = std::env::var("PATH") {
        cmd.env("PATH", path);
    }
    let defaults: HashMap<&str, &str> = [("CNI_NETNS", "/run/netns/none"), ("CNI_IFNAME", "eth0")].into();
    for (k, v) in &defaults {
        if !env.iter().any(|(ek, _)| ek == k) {
            cmd.env(k, v);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = if stdout.trim().is_empty() {
        serde_json::Value::Null
    } else {
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout:?}"))
    };
    (out.status.success(), json, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// The CNI environment of container `cid` on eth0 for Pod `default/pod` (UID `uid`).
pub fn pod_env<'a>(cid: &'a str, args: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![("CNI_CONTAINERID", cid), ("CNI_IFNAME", "eth0"), ("CNI_NETNS", "/run/netns/x"), ("CNI_ARGS", args)]
}

/// `CNI_ARGS` naming Pod `default/name` with `uid`.
pub fn pod_args(name: &str, uid: &str) -> String {
    format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={name};K8S_POD_UID={uid}")
}

/// The CNI environment of container `cid` on eth0.
pub fn attach_env(cid: &str) -> Vec<(&str, &str)> {
    vec![("CNI_CONTAINERID", cid), ("CNI_IFNAME", "eth0"), ("CNI_NETNS", "/run/netns/x")]
}

/// The first address of a CNI result.
pub fn first_ip(result: &serde_json::Value) -> std::net::IpAddr {
    result["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().parse().unwrap()
}

/// Address `i` of a CNI result; panics, showing the result, if it has none.
pub fn ip_of(result: &serde_json::Value, i: usize) -> std::net::IpAddr {
    let addr = result["ips"][i]["address"].as_str().unwrap_or_else(|| panic!("no ips[{i}] in {result}"));
    addr.split('/').next().unwrap().parse().unwrap()
}

/// The API requests of each ADD, in order, from a plugin log written at
/// level `info` or finer (the plugin's own tally, one line per ADD).
pub fn requests_per_add(log: &str) -> Vec<u32> {
    log.lines()
        .filter(|l| l.contains("API requests of this ADD"))
        .filter_map(|l| l.split("requests=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// The outcome of [`cni_add_retrying`].
#[derive(Clone, Debug)]
pub struct Added {
    /// The IP the sandbox got.
    pub ip: String,
    /// ADDs that failed (pool full with no release in progress yet) before success.
    pub retries: u32,
}

/// CNI ADD of sandbox `container` (pod `pod`) through the plugin binary. A
/// failure is retried after a pause, like kubelet retrying sandbox creation,
/// up to `max_tries`; the last failure panics with the plugin's error.
pub fn cni_add_retrying(conf: &serde_json::Value, container: &str, pod: &str, max_tries: u32) -> Added {
    let args = format!("K8S_POD_NAMESPACE=default;K8S_POD_NAME={pod};K8S_POD_UID=uid-{container}");
    let mut last = String::new();
    for attempt in 0..max_tries {
        let (ok, out, err) =
            invoke("ADD", conf, &[("CNI_CONTAINERID", container), ("CNI_IFNAME", "eth0"), ("CNI_ARGS", &args)]);
        if ok {
            let addr = out["ips"][0]["address"].as_str().unwrap();
            let ip = addr.split('/').next().unwrap().to_string();
            return Added { ip, retries: attempt };
        }
        last = format!("stdout {out} stderr {err}");
        std::thread::sleep(Duration::from_millis(20 + 10 * u64::from(attempt.min(10))));
    }
    panic!("ADD {container} failed {max_tries} times; last: {last}");
}

/// CNI DEL of sandbox `container` through the plugin binary. Panics on failure.
pub fn cni_del(conf: &serde_json::Value, container: &str) {
    let (ok, out, err) = invoke("DEL", conf, &[("CNI_CONTAINERID", container), ("CNI_IFNAME", "eth0")]);
    assert!(ok, "DEL {container}: stdout {out} stderr {err}");
}
