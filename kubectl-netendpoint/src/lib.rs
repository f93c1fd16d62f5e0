//! `kubectl netendpoint`: pool health, who holds an IP and why, and an
//! explicit forced release, for people.
//!
//! - `pools`: per pool, capacity, used, releasing, free, the finalizers that
//!   releases wait on, the age of the oldest release, and the queue: how
//!   many ADDs wait for an address and how long the first has waited
//!   ([`netendpoint_lease::queue::depths`], as the controller's metrics). The pool figures
//!   are computed by the same code as the controller's metrics
//!   ([`netendpoint_lease::pools`]); ranges come from the same ConfigMap as the
//!   controller's, or from network config files given with `--config`.
//! - `why <ip|namespace/pod>`: who holds the lease, since when, whether it is
//!   releasing and on which finalizers it waits, and the Events about it and
//!   its Pod.
//! - `release --force <ip>`: removes the finalizers of a lease that is
//!   already releasing, after confirmation, with the controller's
//!   UID/resourceVersion-checked patch, and records a `ForcedRelease` Event.
//! - `status [--wait]`: whether the install is healthy, part by part (the
//!   controller's leadership, the installers, the admission policies, the
//!   agents' registrations), with the pools' figures ([`mod@status`]); exits 1
//!   when it is not, after waiting for it with `--wait`.
//! - `agents`: each agent's finalizer, who registered it, which networks
//!   stamp it and how many leases carry it, and each one stamped but not
//!   registered, or registered but stamped nowhere ([`agents`]); exits 1
//!   when there is such a problem.
//!
//! Exit codes follow kubectl: 0 on success, 1 on any error (including an IP
//! nobody holds and a refused release); errors go to stderr.

pub mod agents;
pub mod cluster;
pub mod error;
pub mod render;
pub mod report;
pub mod status;

use std::io::{BufRead, IsTerminal, Write};
use std::net::IpAddr;
use std::path::PathBuf;

use k8s_openapi::jiff::Timestamp;
use netendpoint_crd::{NetworkEndpoint, REASON_FORCED_RELEASE};
use netendpoint_lease::age_at_least;
use netendpoint_lease::pools::pool_stats;

use crate::cluster::{Forced, Ranges, Target};
pub use crate::error::{Error, Result};
use crate::render::{Format, age, structured};
use crate::report::{LeaseReport, PoolRow, PoolsReport};

/// The command line.
#[derive(Debug, clap::Parser)]
#[command(name = "kubectl-netendpoint", bin_name = "kubectl netendpoint", version, about)]
pub struct Cli {
    /// Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then in-cluster).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Per pool: capacity, used, releasing, free, oldest release, and the finalizers releases wait on.
    Pools {
        /// Only these pools (default: every pool that has a lease or known ranges).
        pools: Vec<String>,
        /// Read the pools' ranges from these network config files (.conflist or .conf)
        /// instead of the ConfigMap.
        #[arg(long = "config", value_name = "FILE")]
        config: Vec<PathBuf>,
        /// namespace/name of the ConfigMap holding the network config(s), as the
        /// controller's --net-conf; empty for none.
        #[arg(long, default_value = "netendpoint-system/netendpoint-net-conf")]
        net_conf: String,
    },
    /// Who holds an IP (or the IPs of a Pod), since when, whether it is releasing, on what it waits, and the Events.
    Why {
        /// An IP address, or namespace/pod.
        target: String,
        /// Only this pool (default: every pool).
        #[arg(long)]
        pool: Option<String>,
    },
    /// Whether the install is healthy: the controller leads, every installer is ready, every admission policy is there, the agents' registrations agree.
    Status {
        /// The namespace netendpoint is installed in.
        #[arg(long, default_value = "netendpoint-system")]
        namespace: String,
        /// Wait until healthy, at most this long (default 5m); exit 1 if it is not by then.
        #[arg(long, value_name = "TIMEOUT", num_args = 0..=1, default_missing_value = "5m")]
        wait: Option<String>,
        /// Read the networks from these network config files instead of the
        /// namespace's ConfigMap netendpoint-net-conf.
        #[arg(long = "config", value_name = "FILE")]
        config: Vec<PathBuf>,
    },
    /// Each agent's finalizer: who registered it, which networks stamp it, how many leases carry it, and what disagrees.
    Agents {
        /// namespace/name of the agents list (the ConfigMap the admission policy netendpoint-agent reads).
        #[arg(long, default_value = "netendpoint-system/netendpoint-agents")]
        agents: String,
        /// Read the networks from these network config files (.conflist or .conf)
        /// instead of the ConfigMap.
        #[arg(long = "config", value_name = "FILE")]
        config: Vec<PathBuf>,
        /// namespace/name of the ConfigMap holding the network config(s); empty for none.
        #[arg(long, default_value = "netendpoint-system/netendpoint-net-conf")]
        net_conf: String,
    },
    /// Forces the release of an IP whose release waits on finalizers that do not answer.
    Release {
        /// The IP address.
        ip: String,
        /// Required: this removes finalizers without the agents' acknowledgement.
        #[arg(long)]
        force: bool,
        /// The pool, when several pools lease the same address.
        #[arg(long)]
        pool: Option<String>,
        /// Do not ask for confirmation (required without a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// Runs one command; output on stdout.
pub async fn run(cli: Cli) -> Result<()> {
    let client = cluster::client(cli.kubeconfig.as_deref(), cli.context.as_deref()).await?;
    let out = match cli.command {
        Command::Pools { pools, config, net_conf } => {
            let ranges = if config.is_empty() { Ranges::ConfigMap(net_conf) } else { Ranges::Files(config) };
            let (caps, sources, warnings) = cluster::capacities(&client, &ranges).await?;
            for w in warnings {
                eprintln!("warning: {w}");
            }
            let leases = cluster::all_leases(&client).await?;
            let waiters = cluster::all_waiters(&client).await?;
            let now = Timestamp::now();
            let mut rows: Vec<PoolRow> = pool_stats(&leases, &caps, now).iter().map(PoolRow::from).collect();
            report::add_queues(&mut rows, &netendpoint_lease::queue::depths(&waiters, now));
            if !pools.is_empty() {
                rows.retain(|r| pools.contains(&r.pool));
            }
            let report = PoolsReport { ranges_from: sources, pools: rows };
            match cli.output {
                Format::Table | Format::Wide => report.table(cli.output),
                f => structured(&report, f)?,
            }
        }
        Command::Why { target, pool } => {
            let t = Target::parse(&target)?;
            let found = cluster::find_leases(&client, &t, pool.as_deref()).await?;
            if found.is_empty() {
                return Err(Error::NotFound(match t {
                    Target::Ip(ip) => format!("no lease holds {ip}{}", in_pool(pool.as_deref())),
                    Target::Pod { namespace, name } => {
                        format!("pod {namespace}/{name} holds no lease{}", in_pool(pool.as_deref()))
                    }
                }));
            }
            let mut reports = Vec::new();
            for ep in &found {
                reports.push(LeaseReport::new(ep, cluster::events_of(&client, ep).await?));
            }
            match cli.output {
                Format::Table | Format::Wide => {
                    let now = Timestamp::now();
                    reports.iter().map(|r| r.describe(now, cli.output)).collect::<Vec<_>>().join("\n")
                }
                f => structured(&serde_json::json!({ "query": target, "leases": reports }), f)?,
            }
        }
        Command::Status { namespace, wait, config } => {
            return status(&client, &namespace, wait.as_deref(), config, cli.output).await;
        }
        Command::Agents { agents, config, net_conf } => {
            let ranges = if config.is_empty() { Ranges::ConfigMap(net_conf) } else { Ranges::Files(config) };
            return agents_report(&client, &agents, &ranges, cli.output).await;
        }
        Command::Release { ip, force, pool, yes } => {
            release(&client, &ip, force, pool.as_deref(), yes, cli.output).await?
        }
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()).map_err(|e| Error::Output(e.to_string()))
}

/// `status`: the report, again every 2 s while it is not healthy and
/// `--wait` has time left; fails when it is not healthy, so a script can
/// use the exit code.
async fn status(
    client: &kube::Client,
    namespace: &str,
    wait: Option<&str>,
    config: Vec<PathBuf>,
    output: Format,
) -> Result<()> {
    let timeout = match wait {
        None => None,
        Some(text) => Some(
            netendpoint_crd::duration::parse(text)
                .ok_or_else(|| Error::Refused(format!("--wait {text:?} is not a duration (e.g. 30s, 5m)")))?,
        ),
    };
    let deadline = timeout.map(|t| std::time::Instant::now() + t);
    let ranges = if config.is_empty() {
        Ranges::ConfigMap(format!("{namespace}/netendpoint-net-conf"))
    } else {
        Ranges::Files(config)
    };
    loop {
        let report = status_once(client, namespace, &ranges).await?;
        let waiting = !report.healthy && deadline.is_some_and(|d| std::time::Instant::now() < d);
        if waiting {
            eprintln!("waiting: {} problem(s), the first: {}", report.problems.len(), report.problems[0]);
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            continue;
        }
        let out = match output {
            Format::Table | Format::Wide => report.table(),
            f => structured(&report, f)?,
        };
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()).map_err(|e| Error::Output(e.to_string()))?;
        return if report.healthy {
            Ok(())
        } else {
            Err(Error::Inconsistent(format!("not healthy: {} problem(s)", report.problems.len())))
        };
    }
}

/// One look at every part.
async fn status_once(client: &kube::Client, namespace: &str, ranges: &Ranges) -> Result<status::StatusReport> {
    let controller = cluster::controller_facts(client, namespace).await?;
    let installers = cluster::installer_facts(client, namespace).await?;
    let policies = cluster::policy_facts(client, namespace).await?;
    let (registered, _, _) = cluster::registered_agents(client, &format!("{namespace}/netendpoint-agents")).await?;
    let (networks, _, _) = cluster::networks(client, ranges).await?;
    let caps = netendpoint_netconf::networks::capacities(&networks);
    let leases = cluster::all_leases(client).await?;
    let stamps: Vec<agents::Stamp> = networks
        .into_iter()
        .map(|n| agents::Stamp { network: n.network, pool: n.pool, finalizers: n.finalizers })
        .collect();
    let agent_rows = agents::rows(&registered, &stamps, &leases);
    let agent_problems =
        agents::AgentsReport { registered_from: None, networks_from: vec![], agents: agent_rows }.problems();
    let now = Timestamp::now();
    let mut pools: Vec<PoolRow> = pool_stats(&leases, &caps, now).iter().map(PoolRow::from).collect();
    report::add_queues(&mut pools, &netendpoint_lease::queue::depths(&cluster::all_waiters(client).await?, now));
    Ok(status::assess(controller, installers, policies, registered.len(), agent_problems, pools))
}

/// `agents`: prints the report, then fails when it found a problem, so a
/// script can use the exit code.
async fn agents_report(client: &kube::Client, agents: &str, ranges: &Ranges, output: Format) -> Result<()> {
    let (registered, registered_from, mut warnings) = cluster::registered_agents(client, agents).await?;
    let (networks, networks_from, more) = cluster::networks(client, ranges).await?;
    warnings.extend(more);
    for w in warnings {
        eprintln!("warning: {w}");
    }
    let stamps: Vec<agents::Stamp> = networks
        .into_iter()
        .map(|n| agents::Stamp { network: n.network, pool: n.pool, finalizers: n.finalizers })
        .collect();
    let leases = cluster::all_leases(client).await?;
    let report =
        agents::AgentsReport { registered_from, networks_from, agents: agents::rows(&registered, &stamps, &leases) };
    let out = match output {
        Format::Table | Format::Wide => report.table(),
        f => structured(&report, f)?,
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()).map_err(|e| Error::Output(e.to_string()))?;
    match report.problems().len() {
        0 => Ok(()),
        n => Err(Error::Inconsistent(format!("{n} agent registration problem(s); see above"))),
    }
}

fn in_pool(pool: Option<&str>) -> String {
    pool.map(|p| format!(" in pool {p}")).unwrap_or_default()
}

/// The one lease of `addr` found (in `pool`, when given), or why not.
fn the_one_lease<'a>(found: &'a [NetworkEndpoint], addr: IpAddr, pool: Option<&str>) -> Result<&'a NetworkEndpoint> {
    match found {
        [] => Err(Error::NotFound(format!("no lease holds {addr}{}", in_pool(pool)))),
        [one] => Ok(one),
        many => {
            let pools: Vec<&str> = many.iter().map(|e| e.spec.pool.as_str()).collect();
            Err(Error::Refused(format!("{addr} is leased in several pools ({}): pass --pool", pools.join(", "))))
        }
    }
}

/// Asks on the terminal whether to force the release of `name`.
fn confirm(name: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        return Err(Error::Refused("refusing to force a release without a terminal to confirm on: pass --yes".into()));
    }
    eprint!("Force the release of {name}? [y/N]: ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer).map_err(|e| Error::Output(e.to_string()))?;
    if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        return Err(Error::Refused("not confirmed: nothing changed".into()));
    }
    Ok(())
}

async fn release(
    client: &kube::Client,
    ip: &str,
    force: bool,
    pool: Option<&str>,
    yes: bool,
    output: Format,
) -> Result<String> {
    if !force {
        return Err(Error::Refused(
            "only a forced release exists: pass --force (a release normally completes when every agent removes its finalizer)".into(),
        ));
    }
    let Target::Ip(addr) = Target::parse(ip)? else {
        return Err(Error::BadTarget(ip.into()));
    };
    let found = cluster::find_leases(client, &Target::Ip(addr), pool).await?;
    let ep = the_one_lease(&found, addr, pool)?;
    let name = ep.metadata.name.clone().unwrap_or_default();
    let Some(since) = ep.metadata.deletion_timestamp.as_ref().map(|t| t.0) else {
        let holder =
            ep.spec.pod.as_ref().map_or_else(|| "a sandbox".to_string(), |p| format!("pod {}/{}", p.namespace, p.name));
        return Err(Error::Refused(format!(
            "{name} is in use by {holder} on {}, not releasing: only a release already requested (by CNI DEL, \
             the controller, or deleting the object) can be forced",
            ep.spec.node
        )));
    };
    let finalizers = ep.metadata.finalizers.clone().unwrap_or_default();
    if finalizers.is_empty() {
        return Err(Error::Refused(format!("{name} waits on no finalizer: its release completes without force")));
    }
    let waited = age(age_at_least(Timestamp::now(), since));
    let plan = format!(
        "{name} (pool {}, IP {addr}) has been releasing since {since} ({waited}), waiting on: {}.\n\
         Forcing removes these finalizers without their agents' acknowledgement: the IP becomes free at once\n\
         and may be handed to another pod while an agent still routes it to the old one.\n",
        ep.spec.pool,
        finalizers.join(", ")
    );
    let structured_out = matches!(output, Format::Json | Format::Yaml);
    // The plan goes to stderr when stdout carries JSON or YAML.
    if structured_out {
        eprint!("{plan}");
    } else {
        print!("{plan}");
    }
    if !yes {
        confirm(&name)?;
    }
    if cluster::force(client, ep).await? == Forced::Changed {
        return Err(Error::Refused(format!(
            "{name} changed or went away since it was read: nothing forced; run again"
        )));
    }
    let user = cluster::whoami(client).await.unwrap_or_else(|| "unknown user".into());
    let note = format!(
        "{name} released by force on the request of {user} (kubectl netendpoint release --force) after {waited}: \
         finalizers {finalizers:?} removed without acknowledgement"
    );
    cluster::record(client, ep, REASON_FORCED_RELEASE, &note, &user).await?;
    let result = serde_json::json!({
        "lease": name, "pool": ep.spec.pool, "ip": addr.to_string(), "forced": true,
        "finalizersRemoved": finalizers, "requestedBy": user, "event": REASON_FORCED_RELEASE,
    });
    Ok(if structured_out {
        structured(&result, output)?
    } else {
        format!("{name} released by force: finalizers removed; Event {REASON_FORCED_RELEASE} recorded\n")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn kubectl_flags_parse_before_or_after_the_command() {
        let cli = Cli::parse_from(["x", "--kubeconfig", "/k", "pools", "-o", "json", "--context", "c"]);
        assert_eq!(cli.output, Format::Json);
        assert_eq!(cli.context.as_deref(), Some("c"));
        assert!(matches!(cli.command, Command::Pools { .. }));
        assert!(Cli::try_parse_from(["x", "pools", "-o", "xml"]).is_err());
        let cli = Cli::parse_from(["x", "release", "--force", "10.0.0.1", "--yes"]);
        assert!(matches!(cli.command, Command::Release { force: true, yes: true, .. }));
    }

    #[test]
    fn targets_are_ips_or_namespace_slash_pod() {
        assert_eq!(Target::parse("10.0.0.1").unwrap(), Target::Ip("10.0.0.1".parse().unwrap()));
        assert_eq!(Target::parse("fd00::1").unwrap(), Target::Ip("fd00::1".parse().unwrap()));
        assert_eq!(Target::parse("ns/web-0").unwrap(), Target::Pod { namespace: "ns".into(), name: "web-0".into() });
        for bad in ["web-0", "ns/", "/web", "a/b/c", "10.0.0.300"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
