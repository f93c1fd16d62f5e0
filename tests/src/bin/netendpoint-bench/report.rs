//! The report sections that combine cases (elapsed time, API server load and its projection) and the SVG plots.

use crate::prelude::*;

/// The per-case elapsed times and the total.
pub(crate) fn report_elapsed(ctx: &Ctx, report: &mut String, started: Instant) {
    let shared = ctx.shared.lock().unwrap();
    let _ = writeln!(
        report,
        "## Elapsed time per case
"
    );
    let _ = writeln!(report, "| case | elapsed s |");
    let _ = writeln!(report, "|---|---:|");
    for (name, s) in &shared.elapsed {
        let _ = writeln!(report, "| {name} | {s:.0} |");
    }
    let _ = writeln!(report, "\nTotal harness time: {:.0} s.", started.elapsed().as_secs_f64());
}

pub(crate) fn report_load(ctx: &Ctx, report: &mut String) {
    let shared = ctx.shared.lock().unwrap();
    if shared.load.is_empty() {
        return;
    }
    let _ = writeln!(report, "## API server load\n");
    let _ = writeln!(
        report,
        "CPU seconds (user + system, from `/proc/<pid>/stat`) of the kube-testenv process, which runs kube-apiserver and its etcd \
         in one, during runs measured above (nothing else uses this server meanwhile; the harness's two `/metrics` scrapes around \
         each run are outside the window).\n"
    );
    let _ = writeln!(report, "| measured during | operations | CPU s | CPU s per 1,000 operations |");
    let _ = writeln!(report, "|---|---:|---:|---:|");
    for l in &shared.load {
        let _ = writeln!(
            report,
            "| {} | {} {} | {:.2} | {:.1} |",
            l.during,
            l.ops,
            l.unit,
            l.cpu_s,
            l.cpu_s * 1000.0 / l.ops.max(1) as f64
        );
    }
    let per_1000 = |l: &Load| l.cpu_s * 1000.0 / l.ops.max(1) as f64;
    let churn_rate = 50.0;
    let adds = shared.load.iter().rev().find(|l| l.unit == "ADDs" && l.during.contains("at once"));
    let cycles = shared.load.iter().rev().find(|l| l.unit.starts_with("cycles"));
    let mut projection = Vec::new();
    if let Some(a) = adds {
        projection.push(format!(
            "{:.1} CPU s per 1,000 ADDs ({}) × {churn_rate:.0} ADDs/s ÷ 1,000 = {:.2} cores for the ADDs",
            per_1000(a),
            a.during,
            per_1000(a) * churn_rate / 1000.0
        ));
    }
    if let Some(c) = cycles {
        projection.push(format!(
            "{:.1} CPU s per 1,000 cycles ({}) × {churn_rate:.0}/s ÷ 1,000 = {:.2} cores for the ADDs and the DELs of the pods they replace",
            per_1000(c),
            c.during,
            per_1000(c) * churn_rate / 1000.0
        ));
    }
    if !projection.is_empty() {
        let _ = writeln!(
            report,
            "\nProjection to 5,000 nodes, 150,000 pods and a churn of {churn_rate:.0} pods/s: {}. On this machine, one process for \
             kube-apiserver and etcd, and at the pool sizes measured here, not 150,000 leases.",
            projection.join("; ")
        );
    }
    let _ = writeln!(report);
}

/// A small SVG line chart: throughput by concurrency for each IPAM.
pub(crate) fn svg(series: &Series) -> String {
    let (w, h, left, bottom) = (640.0, 360.0, 60.0, 40.0);
    let max =
        series.iter().flat_map(|(_, r)| r.iter().map(|(_, s)| s.per_sec)).filter(|v| v.is_finite()).fold(1.0, f64::max);
    let levels: Vec<usize> = series.first().map(|(_, r)| r.iter().map(|(c, _)| *c).collect()).unwrap_or_default();
    let x = |i: usize| left + (w - left - 160.0) * i as f64 / (levels.len().max(2) - 1) as f64;
    let y = |v: f64| (h - bottom) - (h - bottom - 20.0) * v / max;
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(s, "<text x=\"{}\" y=\"14\">ADDs per second by concurrency (one process per ADD)</text>", left);
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        w - 150.0,
        h - bottom
    );
    let _ = writeln!(s, "<line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>", h - bottom);
    for k in 0..=4 {
        let v = max * f64::from(k) / 4.0;
        let _ = writeln!(s, "<text x=\"4\" y=\"{:.0}\">{v:.0}</text>", y(v) + 4.0);
    }
    for (i, c) in levels.iter().enumerate() {
        let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{}\">{c}</text>", x(i) - 6.0, h - bottom + 16.0);
    }
    for (n, (name, rows)) in series.iter().enumerate() {
        let color = colors[n % colors.len()];
        let pts: Vec<String> =
            rows.iter().enumerate().map(|(i, (_, st))| format!("{:.1},{:.1}", x(i), y(st.per_sec))).collect();
        let _ =
            writeln!(s, "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>", pts.join(" "));
        let _ =
            writeln!(s, "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>", w - 145.0, 40.0 + 18.0 * n as f64);
    }
    s.push_str("</svg>\n");
    s
}

/// A small SVG chart: ADD p99 by pool size, both axes logarithmic (one x
/// tick per prefix length, y ticks at powers of ten), one line per series
/// of `points` (series, prefix, p99 ms).
pub(crate) fn svg_scale(points: &[(&'static str, u8, f64)]) -> String {
    let (w, h, left, bottom) = (640.0, 360.0, 60.0, 40.0);
    let plot_right = w - 220.0;
    let points: Vec<_> = points.iter().filter(|(_, _, p)| p.is_finite() && *p > 0.0).collect();
    let bits = |prefix: u8| f64::from(32 - prefix);
    let (lo, hi) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), (_, p, _)| (lo.min(bits(*p)), hi.max(bits(*p))));
    let (lo, hi) = if lo < hi { (lo, hi) } else { (lo - 1.0, lo + 1.0) };
    let decades = |f: fn(f64) -> f64, init: f64, pick: fn(f64, f64) -> f64| {
        f(points.iter().map(|(_, _, p)| p.log10()).fold(init, pick))
    };
    let (y_lo, y_hi) = (decades(f64::floor, 9.0, f64::min).min(1.0), decades(f64::ceil, 0.0, f64::max).max(2.0));
    let x = |prefix: u8| left + (plot_right - left) * (bits(prefix) - lo) / (hi - lo);
    let y = |v: f64| (h - bottom) - (h - bottom - 20.0) * (v.log10() - y_lo) / (y_hi - y_lo);
    let colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    let _ = writeln!(s, "<text x=\"{left}\" y=\"14\">ADD p99 in ms by pool size and fill (log scales)</text>");
    let _ = writeln!(
        s,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{plot_right}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        h - bottom
    );
    let _ = writeln!(s, "<line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>", h - bottom);
    for e in y_lo as i32..=y_hi as i32 {
        let v = 10f64.powi(e);
        let _ = writeln!(s, "<text x=\"4\" y=\"{:.0}\">{v:.0}</text>", y(v) + 4.0);
    }
    let mut prefixes: Vec<u8> = points.iter().map(|(_, p, _)| *p).collect();
    prefixes.sort_unstable();
    prefixes.dedup();
    for p in prefixes {
        let _ = writeln!(s, "<text x=\"{:.0}\" y=\"{}\">/{p}</text>", x(p) - 10.0, h - bottom + 16.0);
    }
    let mut series: Vec<&str> = Vec::new();
    for (name, _, _) in &points {
        if !series.contains(name) {
            series.push(name);
        }
    }
    for (n, name) in series.iter().enumerate() {
        let color = colors[n % colors.len()];
        let mut pts: Vec<(u8, f64)> = points.iter().filter(|(s, _, _)| s == name).map(|(_, p, v)| (*p, *v)).collect();
        pts.sort_by_key(|p| std::cmp::Reverse(p.0));
        let line: Vec<String> = pts.iter().map(|(p, v)| format!("{:.1},{:.1}", x(*p), y(*v))).collect();
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            line.join(" ")
        );
        for (p, v) in &pts {
            let _ = writeln!(s, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>", x(*p), y(*v));
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{name}</text>",
            plot_right + 10.0,
            40.0 + 18.0 * n as f64
        );
    }
    s.push_str("</svg>\n");
    s
}
