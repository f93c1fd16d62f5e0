//! ADDs with the controller stopped: a pool it summarised before it
//! stopped, a pool it never saw, and a full small pool that waits.

use crate::prelude::*;

/// One row: 40 ADDs at concurrency 1 into `pool` (a /20 at `net`, half of
/// it leased at random first), counted at the server and by the plugin.
fn half_full(ctx: &Ctx, report: &mut String, what: &str, pool: &str, net: u32, summarise: bool) {
    let usable = (1u32 << 12) - 3;
    let mut rng = fastrand::Rng::with_seed(u64::from(net));
    let mut hosts: Vec<u32> = (2..usable + 2).collect();
    rng.shuffle(&mut hosts);
    hosts.truncate(usable as usize / 2);
    let ips: Vec<String> = hosts.iter().map(|h| host(net + h)).collect();
    let leased = ctx.fill(pool, &ips, "other-node", 48);
    if summarise {
        ctx.start_controller();
        ctx.wait_summary(pool, leased, Duration::from_secs(120));
        ctx.stop_controller();
    }
    let log = ctx.work.join(format!("{pool}.log"));
    let conf = edit_conf(&ctx.netconf(pool, &format!("{}/20", host(net)), json!({})), |v| {
        v["ipam"]["log"] = json!({"level": "info", "file": log});
    });
    let n = if ctx.quick { 20 } else { 40 };
    let before = ctx.metrics();
    let (s, fails) = run_many(n, 1, &|i| ctx.add(&conf, &format!("{pool}-{i}")));
    let c = ServerCounts::between(&before, &ctx.metrics());
    report_failures(what, 1, &fails);
    let (requests, _) = logged_requests(&log, "ADD");
    let per = |v: f64| v / n as f64;
    let _ = writeln!(
        report,
        "| {what} | {} | {} | {:.1} | {:.1} | {requests:.2} | {:.2} | {:.0} | {:.1} |",
        s.n,
        s.failed,
        s.p50_ms,
        s.p99_ms,
        per(c.conflicts),
        c.lists,
        per(c.scanned)
    );
    ctx.delete_pool(pool);
}

/// A full set of 62 addresses, one of them releasing, held by a finalizer
/// the harness removes after 1 s: the ADD reads the names one by one, waits
/// on the release by name, and takes the address.
fn small_full_wait(ctx: &Ctx, report: &mut String) {
    let pool = "bench-stopped-small";
    let fin = "bench.example/agent";
    let ips: Vec<String> = (2..64).map(|h| host(0x0a79_0000 + h)).collect();
    ctx.fill(pool, &ips, "other-node", 48);
    let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
    let victim = endpoint_name(pool, ips[10].parse().unwrap());
    ctx.rt.block_on(async {
        use kube::api::{Patch, PatchParams};
        let hold = json!({"metadata": {"finalizers": [fin]}});
        api.patch(&victim, &PatchParams::default(), &Patch::Merge(&hold)).await.unwrap();
        api.delete(&victim, &DeleteParams::default()).await.unwrap();
    });
    let conf = ctx.netconf(pool, "10.121.0.0/26", json!({"waitForRelease": "20s"}));
    let before = ctx.metrics();
    let (result, ack_offset) = std::thread::scope(|s| {
        let started = Instant::now();
        let add = s.spawn(|| run_one(&ctx.add(&conf, "stopped-small-waiter")));
        std::thread::sleep(Duration::from_secs(1));
        let t = started.elapsed();
        ctx.rt.block_on(async {
            use kube::api::{Patch, PatchParams};
            let drop = json!({"metadata": {"finalizers": null}});
            let _ = api.patch(&victim, &PatchParams::default(), &Patch::Merge(&drop)).await;
        });
        (add.join().unwrap(), t)
    });
    let c = ServerCounts::between(&before, &ctx.metrics());
    let (ok, took, out) = result;
    let got = added_ip(&out).map(|ip| ip.to_string());
    let _ = writeln!(
        report,
        "A full set of 62 addresses, one releasing until the harness removed its finalizer after 1 s: the ADD {} ({}; {:.0} ms \
         after the release ended, {:.0} ms in all), with {:.0} NetworkEndpoint LISTs and {:.0} objects scanned.\n",
        if ok { "succeeded" } else { "failed" },
        if got.as_deref() == Some(ips[10].as_str()) { "the released address".to_string() } else { format!("{got:?}") },
        took.saturating_sub(ack_offset).as_secs_f64() * 1000.0,
        took.as_secs_f64() * 1000.0,
        c.lists,
        c.scanned
    );
    ctx.delete_pool(pool);
}

pub(crate) fn bench_controller_stopped(ctx: &Ctx, report: &mut String) {
    let _ = writeln!(report, "## ADDs with the controller stopped\n");
    let _ = writeln!(
        report,
        "The controller is stopped for this case (and started again after it). A /20 is half leased at random (direct creates), \
         then 40 ADDs run one at a time: into a pool the controller summarised before it stopped (its summary goes on serving as a \
         hint, and its stale bits cost refused creates, never a second holder), and into a pool no controller ever saw (the ADD \
         probes by create, a bounded number of times, spread over the set). The plugin's own tally gives its requests per ADD; \
         the server's counters the 409s, LISTs and scanned objects. A large pool with no summary and no free address among the \
         probes fails the ADD with an error that says the controller is missing; docs/design.md says what that means at scale.\n"
    );
    let _ = writeln!(
        report,
        "| pool | ADDs | failed | p50 ms | p99 ms | requests per ADD | 409s per ADD | LISTs | objects scanned per ADD |"
    );
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    ctx.stop_controller();
    half_full(
        ctx,
        report,
        "/20 at 50 %, summarised before the controller stopped",
        "bench-stopped-sum",
        0x0a7a_0000,
        true,
    );
    half_full(ctx, report, "/20 at 50 %, never summarised", "bench-stopped-never", 0x0a7b_0000, false);
    let _ = writeln!(report);
    small_full_wait(ctx, report);
    ctx.start_controller();
}
