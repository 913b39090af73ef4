//! `recorder repair DIR`: closes the chunks of a recording whose writer died, with the library's
//! `repository::repair` (the same repair a new recording runs on dead siblings at start). DIR is a
//! recording's directory, or a base directory: then every recording directory below it
//! (`yyyy_MM_dd_HH_mm_ss_<pid>`) is repaired, and live ones are left alone.

use crate::args::RepairArgs;
use crate::Outcome;
use anyhow::Context;
use recorder::repository::layout;
use std::io::Write;
use std::path::{Path, PathBuf};

pub fn run(args: &RepairArgs) -> anyhow::Result<Outcome> {
    let dir = &args.dir;
    let meta = std::fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    anyhow::ensure!(
        meta.is_dir(),
        "{}: not a directory (give a recording's chunk directory, or their base directory)",
        dir.display()
    );
    let recordings = recording_dirs(dir)?;
    if recordings.is_empty() || recordings == [dir.clone()] {
        // One recording: a live one is an error (nothing was changed).
        return repair_one(dir, false);
    }
    let mut outcome = Outcome::Clean;
    for r in &recordings {
        if repair_one(r, true)? == Outcome::Damaged {
            outcome = Outcome::Damaged;
        }
    }
    Ok(outcome)
}

/// The directories to repair: `dir` itself when it holds chunk files, and its recording
/// subdirectories.
fn recording_dirs(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let context = || format!("{}", dir.display());
    let mut own = false;
    for entry in std::fs::read_dir(dir).with_context(context)? {
        let entry = entry.with_context(context)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // The file type of the entry itself: a symlink planted in a shared base is not followed.
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        own |= is_file && (layout::is_chunk_file_name(&name) || name.ends_with(".part"));
    }
    let mut dirs: Vec<PathBuf> =
        layout::recording_dirs(dir).with_context(context)?.into_iter().map(|r| r.path).collect();
    if own {
        dirs.insert(0, dir.to_path_buf());
    }
    Ok(dirs)
}

/// Repairs one recording directory and says what was done. `in_base`: a live recording is
/// skipped with a line, not an error.
fn repair_one(dir: &Path, in_base: bool) -> anyhow::Result<Outcome> {
    let report = recorder::repository::repair(dir).with_context(|| format!("{}", dir.display()))?;
    let mut out = std::io::stdout().lock();
    if report.in_use {
        if in_base {
            writeln!(out, "live     {} (a recording is writing here; left alone)", dir.display())?;
            return Ok(Outcome::Clean);
        }
        anyhow::bail!("{}: a live recording is writing here; nothing was changed", dir.display());
    }
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
        writeln!(out, "{}: nothing to repair", dir.display())?;
    }
    Ok(if report.unreadable.is_empty() { Outcome::Clean } else { Outcome::Damaged })
}
