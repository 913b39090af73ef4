//! `recorder diff BEFORE AFTER`: the samples of two recordings compared, as a differential flame
//! graph (inferno draws AFTER's stacks colored by the change from BEFORE) or as collapsed lines
//! `stack before after`. BEFORE's weights are scaled to AFTER's total unless `--no-normalize`
//! (as flamegraph tools' `difffolded -n`), so recordings of different lengths compare.

use crate::args::{DiffArgs, DiffFormat};
use crate::fold::{FoldOptions, Folded};
use crate::profile::count_name;
use crate::selection::Selection;
use crate::source::{self, Recordings};
use crate::Outcome;
use anyhow::Context;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

pub fn run(args: &DiffArgs) -> anyhow::Result<Outcome> {
    let which = if args.all { Recordings::All } else { Recordings::Newest };
    let options =
        FoldOptions { by_thread: args.by_thread, keep_runtime_frames: args.keep_runtime_frames, by_span: false };
    let weighing = args.kind.weighing();
    let mut damaged = false;
    let mut fold = |path: &Path| -> anyhow::Result<Folded> {
        let source = source::load(path, which)?;
        let selection = Selection::default();
        let mut folded = Folded::default();
        for sc in &source.chunks {
            if let Err(e) = folded.add_chunk(&sc.chunk, &weighing, &selection, options) {
                eprintln!("error: {}", source::Damage::in_chunk(&sc.file, e));
                damaged = true;
                break;
            }
        }
        source.report_damage();
        damaged |= !source.damage.is_empty();
        if folded.counts.is_empty() {
            anyhow::bail!("{}: no {} to compare", path.display(), weighing.what);
        }
        Ok(folded)
    };
    let before = fold(&args.before)?;
    let after = fold(&args.after)?;
    let lines = differential_lines(&before, &after, !args.no_normalize);

    let mut out: Box<dyn Write> = match &args.output {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("{}", path.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let name = args.output.as_ref().map_or_else(|| "stdout".to_owned(), |p| p.display().to_string());
    match args.format {
        DiffFormat::Collapsed => {
            for l in &lines {
                writeln!(out, "{l}").with_context(|| name.clone())?;
            }
        }
        DiffFormat::Flamegraph => {
            let mut opts = inferno::flamegraph::Options::default();
            opts.title =
                format!("recorder diff: {} → {} ({})", args.before.display(), args.after.display(), weighing.what);
            opts.subtitle = Some("red: more in AFTER, blue: less (widths are AFTER's)".to_owned());
            opts.count_name = count_name(weighing.unit).to_owned();
            inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out)
                .context("drawing the flame graph")?;
        }
    }
    out.flush().with_context(|| name.clone())?;
    Ok(if damaged { Outcome::Damaged } else { Outcome::Clean })
}

/// `stack before after` for every stack of either side, sorted by stack; with `normalize`,
/// BEFORE's weights are scaled so that its total is AFTER's.
pub fn differential_lines(before: &Folded, after: &Folded, normalize: bool) -> Vec<String> {
    let (total_before, total_after) = (before.total(), after.total());
    let scale = |w: u64| -> u64 {
        if normalize && total_before > 0 {
            ((w as u128 * total_after as u128 + total_before as u128 / 2) / total_before as u128) as u64
        } else {
            w
        }
    };
    let mut both: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (stack, &w) in &before.counts {
        both.entry(stack).or_default().0 = scale(w);
    }
    for (stack, &w) in &after.counts {
        both.entry(stack).or_default().1 = w;
    }
    both.into_iter().map(|(stack, (b, a))| format!("{stack} {b} {a}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(lines: &[(&str, u64)]) -> Folded {
        let mut f = Folded::default();
        for (s, n) in lines {
            f.counts.insert((*s).to_owned(), *n);
        }
        f
    }

    #[test]
    fn differential_lines_have_both_counts_and_normalize_to_after() {
        let before = folded(&[("main;a", 10), ("main;b", 10)]);
        let after = folded(&[("main;a", 30), ("main;c", 10)]);
        assert_eq!(differential_lines(&before, &after, false), ["main;a 10 30", "main;b 10 0", "main;c 0 10"]);
        // Totals 20 and 40: BEFORE doubles.
        assert_eq!(differential_lines(&before, &after, true), ["main;a 20 30", "main;b 20 0", "main;c 0 10"]);
    }
}
