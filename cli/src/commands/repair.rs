//! `recorder repair DIR`: closes the chunks of a recording whose writer died, with the library's
//! `repository::repair` (the same repair a new recording runs on dead siblings at start).

use crate::args::RepairArgs;
use crate::Outcome;
use anyhow::Context;
use std::io::Write;

pub fn run(args: &RepairArgs) -> anyhow::Result<Outcome> {
    let meta = std::fs::metadata(&args.dir).with_context(|| format!("{}", args.dir.display()))?;
    anyhow::ensure!(meta.is_dir(), "{}: not a directory (give a recording's chunk directory)", args.dir.display());
    let report = recorder::repository::repair(&args.dir).with_context(|| format!("{}", args.dir.display()))?;
    if report.in_use {
        anyhow::bail!("{}: a live recording is writing here; nothing was changed", args.dir.display());
    }
    let mut out = std::io::stdout().lock();
    for p in &report.chunks_closed {
        writeln!(out, "closed   {}", p.display())?;
    }
    for p in &report.parts_removed {
        writeln!(out, "removed  {}", p.display())?;
    }
    if let Some(p) = &report.final_chunk {
        writeln!(out, "final    {}", p.display())?;
    }
    for (p, why) in &report.unreadable {
        writeln!(out, "skipped  {} ({why})", p.display())?;
    }
    if report.is_clean() {
        writeln!(out, "{}: nothing to repair", args.dir.display())?;
    }
    Ok(if report.unreadable.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}
