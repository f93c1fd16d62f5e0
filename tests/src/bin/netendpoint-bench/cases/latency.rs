//! ADD latency and throughput by concurrency, beside the API-write floor, host-local and whereabouts.

use crate::prelude::*;

pub(crate) type Series = Vec<(String, Vec<(usize, Stats)>)>;

pub(crate) fn bench_latency(ctx: &Ctx, report: &mut String) -> Series {
    let levels: &[usize] = if ctx.quick { &[1, 8] } else { &[1, 8, 32, 64] };
    let per_level = |c: usize| if ctx.quick { 16 } else { (c * 10).clamp(60, 320) };
    let mut series: Series = Vec::new();

    // netendpoint
    let mut ours = Vec::new();
    for &c in levels {
        let pool = format!("bench-add-c{c}");
        let conf = ctx.netconf(&pool, "10.90.0.0/20", json!({}));
        let _ = run_one(&ctx.add(&conf, &format!("warm-c{c}")));
        let (s, fails) = run_many(per_level(c), c, &|i| ctx.add(&conf, &format!("add-c{c}-{i}")));
        report_failures("netendpoint", c, &fails);
        ours.push((c, s));
        ctx.delete_pool(&pool);
    }
    series.push(("netendpoint".into(), ours));

    // floor: one kube-rs create from a fresh process
    let mut floor = Vec::new();
    for &c in levels {
        let pool = format!("bench-floor-c{c}");
        let (s, fails) = run_many(per_level(c), c, &|i| Invocation {
            program: ctx.bin.join("bench-floor"),
            args: vec![ctx.kubeconfig.display().to_string(), pool.clone(), host(0x0a5a_0000 + 1 + i as u32)],
            env: vec![],
            stdin: vec![],
        });
        report_failures("floor", c, &fails);
        floor.push((c, s));
        ctx.delete_pool(&pool);
    }
    series.push(("floor (1 API write)".into(), floor));

    // host-local: no API at all
    let mut hl = Vec::new();
    for &c in levels {
        let data = ctx.work.join(format!("host-local-c{c}"));
        let conf = serde_json::to_vec(&json!({
            "cniVersion": "1.0.0", "name": format!("hl-c{c}"),
            "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.91.0.0/20"}]], "dataDir": data}
        }))
        .unwrap();
        let (s, fails) = run_many(per_level(c), c, &|i| Invocation {
            program: ctx.cni.join("host-local"),
            args: vec![],
            env: ctx.cni_env("ADD", &format!("hl-c{c}-{i}")),
            stdin: conf.clone(),
        });
        report_failures("host-local", c, &fails);
        hl.push((c, s));
    }
    series.push(("host-local (no API)".into(), hl));

    // whereabouts, when scripts/bench-peers.sh could build it
    let wa_bin = ctx.whereabouts.clone();
    let mut wa = Vec::new();
    if let Some(wa_bin) = &wa_bin {
        // whereabouts refuses to run without its "flat file"; an empty one is enough.
        let flat = ctx.work.join("whereabouts.conf");
        std::fs::write(&flat, "{}").unwrap();
        for (n, &c) in levels.iter().enumerate() {
            let conf = serde_json::to_vec(&json!({
                "cniVersion": "1.0.0", "name": format!("wa-c{c}"), "type": "whereabouts",
                "ipam": {"type": "whereabouts", "range": format!("10.{}.0.0/20", 92 + n),
                         "configuration_path": flat, "log_level": "error",
                         "kubernetes": {"kubeconfig": ctx.kubeconfig}}
            }))
            .unwrap();
            let _ = run_one(&Invocation {
                program: wa_bin.clone(),
                args: vec![],
                env: ctx.cni_env("ADD", &format!("wa-warm-{c}")),
                stdin: conf.clone(),
            });
            let (s, fails) = run_many(per_level(c), c, &|i| Invocation {
                program: wa_bin.clone(),
                args: vec![],
                env: ctx.cni_env("ADD", &format!("wa-c{c}-{i}")),
                stdin: conf.clone(),
            });
            report_failures("whereabouts", c, &fails);
            wa.push((c, s));
        }
        series.push(("whereabouts".into(), wa.clone()));
    }

    let _ = writeln!(report, "## ADD latency and throughput (/20 pool)\n");
    let _ = writeln!(report, "![ADDs per second by concurrency](docs/bench.svg)\n");
    let _ = writeln!(report, "| IPAM | concurrency | ADDs | failed | p50 ms | p99 ms | ADDs/s |");
    let _ = writeln!(report, "|---|---:|---:|---:|---:|---:|---:|");
    for (name, rows) in &series {
        for (c, s) in rows {
            let _ = writeln!(
                report,
                "| {name} | {c} | {} | {} | {:.1} | {:.1} | {:.1} |",
                s.n, s.failed, s.p50_ms, s.p99_ms, s.per_sec
            );
        }
    }
    let _ = writeln!(report, "\nRatios (netendpoint ÷ other):\n");
    let _ = writeln!(report, "| concurrency | p50 vs floor | ADDs/s vs floor | ADDs/s vs whereabouts |");
    let _ = writeln!(report, "|---:|---:|---:|---:|");
    for (i, (c, s)) in series[0].1.iter().enumerate() {
        let f = &series[1].1[i].1;
        let w = wa.get(i).map_or("n/a".to_string(), |(_, w)| format!("{:.1}×", s.per_sec / w.per_sec));
        let _ = writeln!(report, "| {c} | {:.2}× | {:.2}× | {w} |", s.p50_ms / f.p50_ms, s.per_sec / f.per_sec);
    }
    if wa_bin.is_none() {
        let _ = writeln!(report, "\nwhereabouts was not available in this run (see docs/bench-peers.md).");
    } else {
        let _ = writeln!(
            report,
            "\nwhereabouts v0.9.2 serialises every ADD and DEL in the cluster through one leader-election Lease (see docs/bench-peers.md)."
        );
    }
    let _ = writeln!(report);
    series
}
