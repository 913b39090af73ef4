//! Command-line arguments (clap derive). Each `*Args` converts into a validated `*Config`; nothing
//! past `into_config` sees clap types.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Inspect and filter JFR recordings: files of one or more chunks, or chunk repositories.
#[derive(Debug, Parser)]
#[command(
    name = "recorder",
    version,
    about = "Inspect and filter JFR recordings: files of one or more chunks, or chunk repositories",
    after_help = TOP_EXAMPLES
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show chunks, start, duration and the count and size of every event type (like `jfr summary`).
    #[command(after_long_help = SUMMARY_EXAMPLES, after_help = SUMMARY_EXAMPLES)]
    Summary(SummaryArgs),
    /// Print events with their fields, thread and stack trace (like `jfr print`).
    #[command(after_long_help = PRINT_EXAMPLES, after_help = PRINT_EXAMPLES)]
    Print(PrintArgs),
    /// Write a copy of a recording that keeps only some event types (like `jfr scrub`).
    #[command(after_long_help = DUMP_EXAMPLES, after_help = DUMP_EXAMPLES)]
    Dump(DumpArgs),
}

const TOP_EXAMPLES: &str = "\
EXAMPLES:
    recorder summary app.jfr
    recorder print --json app.jfr | head
    recorder dump app.jfr -o samples.jfr --events jdk.ExecutionSample

Exit codes: 0 ok, 1 problems found, 2 error (missing, unreadable or damaged input; what was
readable before the damage is still printed).";

const SUMMARY_EXAMPLES: &str = "\
EXAMPLES:
    recorder summary app.jfr
    recorder summary --json app.jfr | jq '.events[\"jdk.ExecutionSample\"].count'
    recorder summary /tmp/2026_11_29_16_36_53_10829/";

const PRINT_EXAMPLES: &str = "\
EXAMPLES:
    recorder print app.jfr | less
    recorder print --events jdk.ExecutionSample,jdk.ThreadStart app.jfr
    recorder print --json app.jfr | jq -c 'select(.type == \"jdk.ExecutionSample\") | .stack.frames[0]'
    recorder print --json /tmp/2026_11_29_16_36_53_10829/ | head";

const DUMP_EXAMPLES: &str = "\
EXAMPLES:
    recorder dump app.jfr -o samples.jfr --events jdk.ExecutionSample
    recorder dump app.jfr -o small.jfr --exclude-events jdk.ObjectAllocationSample,jdk.ActiveSetting
    recorder dump /tmp/2026_11_29_16_36_53_10829/ -o whole.jfr";

/// A recording: a `.jfr` file, or a directory of chunk files.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// A .jfr file (one or more chunks) or a directory of chunk files (a JDK-style repository).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

#[derive(Debug, Args)]
pub struct SummaryArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print one JSON object: {"chunks", "start_ns", "duration_ns", "events": {TYPE: {"count", "bytes"}}}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PrintArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print only these event types (comma-separated full names, e.g. jdk.ExecutionSample).
    #[arg(long, value_name = "T1,T2", value_delimiter = ',')]
    pub events: Option<Vec<String>>,
    /// Print one JSON object per event and line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Output file (a single .jfr file with all chunks).
    #[arg(short, long, value_name = "OUT.jfr")]
    pub output: PathBuf,
    /// Keep only these event types (comma-separated full names).
    #[arg(
        long,
        value_name = "T1,T2",
        value_delimiter = ',',
        conflicts_with = "exclude_events"
    )]
    pub events: Option<Vec<String>>,
    /// Keep every event type except these (comma-separated full names).
    #[arg(long, value_name = "T1,T2", value_delimiter = ',')]
    pub exclude_events: Option<Vec<String>>,
}

/// Which event types a command works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeFilter {
    /// Every type.
    All,
    /// Only these names.
    Only(Vec<String>),
    /// Every type except these names.
    Except(Vec<String>),
}

impl TypeFilter {
    /// The names the filter mentions (checked against the recording's types).
    pub fn names(&self) -> &[String] {
        match self {
            TypeFilter::All => &[],
            TypeFilter::Only(n) | TypeFilter::Except(n) => n,
        }
    }

    /// Does the filter keep the event type `name`?
    pub fn keeps(&self, name: &str) -> bool {
        match self {
            TypeFilter::All => true,
            TypeFilter::Only(n) => n.iter().any(|x| x == name),
            TypeFilter::Except(n) => !n.iter().any(|x| x == name),
        }
    }
}

fn clean(names: Vec<String>) -> Vec<String> {
    names
        .into_iter()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .collect()
}

#[derive(Debug)]
pub struct SummaryConfig {
    pub path: PathBuf,
    pub json: bool,
}

#[derive(Debug)]
pub struct PrintConfig {
    pub path: PathBuf,
    pub filter: TypeFilter,
    pub json: bool,
}

#[derive(Debug)]
pub struct DumpConfig {
    pub path: PathBuf,
    pub output: PathBuf,
    pub filter: TypeFilter,
}

impl SummaryArgs {
    pub fn into_config(self) -> SummaryConfig {
        SummaryConfig {
            path: self.source.path,
            json: self.json,
        }
    }
}

impl PrintArgs {
    pub fn into_config(self) -> PrintConfig {
        PrintConfig {
            path: self.source.path,
            filter: match self.events {
                Some(n) => TypeFilter::Only(clean(n)),
                None => TypeFilter::All,
            },
            json: self.json,
        }
    }
}

impl DumpArgs {
    pub fn into_config(self) -> anyhow::Result<DumpConfig> {
        let filter = match (self.events, self.exclude_events) {
            (Some(n), _) => TypeFilter::Only(clean(n)),
            (None, Some(n)) => TypeFilter::Except(clean(n)),
            (None, None) => TypeFilter::All,
        };
        let same_file = self.output == self.source.path
            || matches!(
                (self.output.canonicalize(), self.source.path.canonicalize()),
                (Ok(a), Ok(b)) if a == b
            );
        if same_file {
            anyhow::bail!(
                "{}: the output would overwrite the input",
                self.output.display()
            );
        }
        Ok(DumpConfig {
            path: self.source.path,
            output: self.output,
            filter,
        })
    }
}
