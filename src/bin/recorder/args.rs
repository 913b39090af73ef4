//! Command-line arguments (clap derive). Each `*Args` converts into a validated `*Config`; nothing
//! past `into_config` sees clap types.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// A flight recorder for native processes: inspect, filter and produce JFR recordings.
#[derive(Debug, Parser)]
#[command(
    name = "recorder",
    version,
    about = "A flight recorder for native processes: inspect, filter and produce JFR recordings (files of chunks or chunk repositories)",
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
    /// Record a built-in multi-threaded workload for a few seconds and show the result.
    #[command(after_long_help = DEMO_EXAMPLES, after_help = DEMO_EXAMPLES)]
    Demo(DemoArgs),
}

const DEMO_EXAMPLES: &str = "\
EXAMPLES:
    recorder demo
    recorder demo --seconds 10 --period 1ms -o demo.jfr
    recorder demo --repository /tmp/rec --stack-depth 64 --stack-depth-outer 16";

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How long the workload runs, in seconds.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub seconds: u64,
    /// Base directory of the repository (default: a per-user directory under the temp dir).
    #[arg(long, value_name = "DIR")]
    pub repository: Option<PathBuf>,
    /// Also write everything recorded into this single .jfr file at the end.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// CPU sampling period, e.g. 10ms, 1ms, 500us (100us ..= 1s).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration)]
    pub period: std::time::Duration,
    /// Worker threads.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub threads: usize,
    /// Innermost stack frames kept per sample and event.
    #[arg(long, value_name = "N")]
    pub stack_depth: Option<usize>,
    /// Outermost stack frames kept per sample and event.
    #[arg(long, value_name = "M")]
    pub stack_depth_outer: Option<usize>,
    /// Hottest functions shown.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
}

/// Parses `10ms`, `500us`, `1s`, `2m`, `100ns` (a bare number is milliseconds).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("`{text}` is not a duration such as 10ms"))?;
    let nanos_per = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "" | "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        other => return Err(format!("unknown duration unit `{other}` (use ns, us, ms, s or m)")),
    };
    if !value.is_finite() || value < 0.0 {
        return Err(format!("`{text}` is not a duration such as 10ms"));
    }
    Ok(std::time::Duration::from_nanos((value * nanos_per) as u64))
}

const TOP_EXAMPLES: &str = "\
EXAMPLES:
    recorder summary app.jfr
    recorder print --json app.jfr | head
    recorder dump app.jfr -o samples.jfr --events jdk.ExecutionSample
    recorder demo -o demo.jfr

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
    #[arg(long, value_name = "T1,T2", value_delimiter = ',', conflicts_with = "exclude_events")]
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
    names.into_iter().map(|n| n.trim().to_owned()).filter(|n| !n.is_empty()).collect()
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
        SummaryConfig { path: self.source.path, json: self.json }
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
            anyhow::bail!("{}: the output would overwrite the input", self.output.display());
        }
        Ok(DumpConfig { path: self.source.path, output: self.output, filter })
    }
}
