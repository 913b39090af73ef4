//! `recorder summary`: chunks, start, duration, and count and bytes per event type (the
//! `jdk.Metadata` and `jdk.CheckPoint` rows included, as `jfr summary` shows them).

use crate::args::SummaryConfig;
use crate::source::{self, Damage};
use crate::{json, time, Outcome};
use std::collections::HashMap;
use std::io::Write;

#[derive(Debug, Default, Clone, Copy)]
struct Stat {
    count: u64,
    bytes: u64,
}

pub fn run(cfg: &SummaryConfig) -> anyhow::Result<Outcome> {
    let mut source = source::load(&cfg.path)?;
    let mut stats: HashMap<String, Stat> = HashMap::new();
    for name in ["jdk.Metadata", "jdk.CheckPoint"] {
        stats.insert(name.to_owned(), Stat::default());
    }
    for name in source::known_event_types(&source.chunks) {
        stats.entry(name).or_default();
    }
    let mut record_damage = Vec::new();
    for sc in &source.chunks {
        let types = sc.chunk.types();
        let mut by_id: HashMap<u64, Stat> = HashMap::new();
        for record in sc.chunk.records() {
            match record {
                Ok(r) => {
                    let s = by_id.entry(r.type_id).or_default();
                    s.count += 1;
                    s.bytes += r.bytes.len() as u64;
                }
                Err(e) => {
                    record_damage.push(Damage::in_chunk(&sc.file, e));
                    break;
                }
            }
        }
        for (id, s) in by_id {
            let name = match id {
                0 => "jdk.Metadata",
                1 => "jdk.CheckPoint",
                _ => match types.class(id) {
                    Some(c) => c.name.as_str(),
                    // Records of undeclared types are skipped by readers; not an event type.
                    None => continue,
                },
            };
            let e = stats.entry(name.to_owned()).or_default();
            e.count += s.count;
            e.bytes += s.bytes;
        }
    }
    source.damage.splice(0..0, record_damage);

    let start = source.chunks.iter().map(|c| c.chunk.header().start_nanos).min().unwrap_or(0);
    let end = source
        .chunks
        .iter()
        .map(|c| {
            let h = c.chunk.header();
            h.start_nanos.saturating_add(h.duration_nanos)
        })
        .max()
        .unwrap_or(0);
    let duration = end.saturating_sub(start).max(0);
    let mut rows: Vec<(String, Stat)> = stats.into_iter().collect();
    rows.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(b.1.bytes.cmp(&a.1.bytes)).then(a.0.cmp(&b.0)));

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if cfg.json {
        let mut buf = Vec::with_capacity(64 * rows.len() + 128);
        buf.extend_from_slice(b"{\"chunks\": ");
        json::uint(&mut buf, source.chunks.len() as u64);
        buf.extend_from_slice(b", \"start_ns\": ");
        json::int(&mut buf, start);
        buf.extend_from_slice(b", \"duration_ns\": ");
        json::int(&mut buf, duration);
        buf.extend_from_slice(b", \"events\": {");
        for (i, (name, s)) in rows.iter().enumerate() {
            if i > 0 {
                buf.extend_from_slice(b", ");
            }
            json::string(&mut buf, name);
            buf.extend_from_slice(b": {\"count\": ");
            json::uint(&mut buf, s.count);
            buf.extend_from_slice(b", \"bytes\": ");
            json::uint(&mut buf, s.bytes);
            buf.push(b'}');
        }
        buf.extend_from_slice(b"}}\n");
        out.write_all(&buf)?;
    } else {
        let version = source
            .chunks
            .first()
            .map(|c| format!("{}.{}", c.chunk.header().major, c.chunk.header().minor))
            .unwrap_or_else(|| "-".to_owned());
        writeln!(out)?;
        writeln!(out, " Version: {version}")?;
        writeln!(out, " Chunks: {}", source.chunks.len())?;
        if !source.chunks.is_empty() {
            writeln!(out, " Start: {} (UTC)", time::date_time_seconds(start))?;
            writeln!(out, " Duration: {}", time::human_span(duration))?;
        }
        writeln!(out)?;
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(10).max(40);
        writeln!(out, " {:<width$} {:>11} {:>13}", "Event Type", "Count", "Size (bytes)")?;
        writeln!(out, "{}", "=".repeat(width + 27))?;
        for (name, s) in &rows {
            writeln!(out, " {:<width$} {:>11} {:>13}", name, s.count, s.bytes)?;
        }
    }
    out.flush()?;
    drop(out);
    source.report_damage();
    Ok(if source.damage.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}
