//! Pure rendering: kubectl-style ages, aligned tables, and JSON/YAML of any
//! serializable report.

use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};

/// The output format chosen with `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// An aligned table (or, for `why`, a description).
    #[default]
    Table,
    /// The table with more columns.
    Wide,
    /// JSON, for scripts.
    Json,
    /// YAML, for people who prefer it.
    Yaml,
}

/// A duration as kubectl prints ages: `45s`, `5m10s`, `95m`, `5h3m`, `30h`, `12d`.
pub fn age(d: Duration) -> String {
    let s = d.as_secs();
    let (m, h, days) = (s / 60, s / 3600, s / 86_400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ => format!("{days}d"),
    }
}

/// Rows under a header, columns padded to their widest cell, three spaces apart
/// as kubectl prints them.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                out.push_str(cell);
            } else {
                let pad = widths.get(i).copied().unwrap_or(0).saturating_sub(cell.chars().count());
                out.push_str(cell);
                out.push_str(&" ".repeat(pad + 3));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// `value` as pretty JSON (a trailing newline) or YAML.
pub fn structured<T: Serialize>(value: &T, format: Format) -> Result<String> {
    match format {
        Format::Yaml => serde_saphyr::to_string(value).map_err(|e| Error::Output(e.to_string())),
        _ => serde_json::to_string_pretty(value).map(|s| s + "\n").map_err(|e| Error::Output(e.to_string())),
    }
}

/// `-` for an unknown figure, as kubectl shows an empty cell.
pub fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [(0, "0s"), (119, "119s"), (120, "2m0s"), (599, "9m59s"), (600, "10m"), (10_799, "179m")];
        for (secs, want) in cases {
            assert_eq!(age(Duration::from_secs(secs)), want, "{secs}");
        }
        assert_eq!(age(Duration::from_secs(3 * 3600 + 120)), "3h2m");
        assert_eq!(age(Duration::from_secs(30 * 3600)), "30h");
        assert_eq!(age(Duration::from_secs(5 * 86_400)), "5d");
    }

    #[test]
    fn tables_align_on_the_widest_cell() {
        let t = table(&["POOL", "USED"], &[vec!["a".into(), "1".into()], vec!["longer".into(), "20".into()]]);
        assert_eq!(t, "POOL     USED\na        1\nlonger   20\n");
    }

    #[test]
    fn yaml_and_json_come_from_the_same_value() {
        #[derive(Serialize)]
        struct R {
            pool: &'static str,
            capacity: Option<u128>,
        }
        let r = R { pool: "p", capacity: Some(u128::from(u64::MAX) + 1) };
        let json = structured(&r, Format::Json).unwrap();
        assert!(json.contains("\"capacity\": 18446744073709551616"), "{json}");
        let yaml = structured(&r, Format::Yaml).unwrap();
        assert!(yaml.contains("pool: p") && yaml.contains("capacity: 18446744073709551616"), "{yaml}");
    }
}
