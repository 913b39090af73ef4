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
    /// Write the recording's events as JFR (like `jfr scrub`), JSON lines, collapsed stacks or a flame graph SVG.
    #[command(after_long_help = DUMP_EXAMPLES, after_help = DUMP_EXAMPLES)]
    Dump(DumpArgs),
    /// Live view of the hottest functions (self and total share of CPU samples) over a sliding window.
    #[command(after_long_help = TOP_CMD_EXAMPLES, after_help = TOP_CMD_EXAMPLES)]
    Top(TopArgs),
    /// Close the chunks of a recording whose process died (kill -9, crash) so every JFR tool reads them.
    #[command(after_long_help = REPAIR_EXAMPLES, after_help = REPAIR_EXAMPLES)]
    Repair(RepairArgs),
    /// Record a built-in multi-threaded workload for a few seconds and show the result.
    #[command(after_long_help = DEMO_EXAMPLES, after_help = DEMO_EXAMPLES)]
    Demo(DemoArgs),
}

const REPAIR_EXAMPLES: &str = "\
EXAMPLES:
    recorder repair /tmp/recorder-1000/2026_11_29_16_36_53_10829/
    recorder repair /tmp/recorder-1000/2026_11_29_16_36_53_10829/ && jfr summary /tmp/recorder-1000/2026_11_29_16_36_53_10829/2026_11_29_16_36_53.jfr

A chunk whose writer was killed may hold bytes past its last published flush; the JDK's jfr then
refuses the file. Repair cuts each such chunk to its published size, marks it finished, puts the
final flag on the newest chunk and removes half-written temporary files. A recording whose process
still runs is left alone. (Starting a new recording in the same base directory repairs dead
recordings too.)";

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// The recording's chunk directory (`<yyyy_MM_dd_HH_mm_ss>_<pid>`).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
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

/// Parses `10ms`, `500us`, `1s`, `2m`, `1h`, `100ns` (a bare number is milliseconds).
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
        "h" => 3600e9,
        other => return Err(format!("unknown duration unit `{other}` (use ns, us, ms, s, m or h)")),
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
    recorder dump /tmp/2026_11_29_16_36_53_10829/ -o whole.jfr --compress     # whole.jfr is zstd
    recorder dump app.jfr --format json --thread worker-1 | jq .type
    recorder dump app.jfr --format collapsed --since 30s > app.folded
    recorder dump /tmp/2026_11_29_16_36_53_10829/ --format flamegraph -o cpu.svg
    recorder dump --pid 4242 --format flamegraph --since 1m -o last-minute.svg

Output goes to -o FILE, or to stdout when -o is not given (jfr and --compress output is binary
and is not written to a terminal). collapsed: one `outer;...;inner count` line per distinct stack
of jdk.ExecutionSample (or of the --events types that have stack traces), frames named
class.method. flamegraph: an interactive SVG of the same stacks (inferno).";

const TOP_CMD_EXAMPLES: &str = "\
EXAMPLES:
    recorder top /tmp/2026_11_29_16_36_53_10829/            # live, refreshed every second
    recorder top --window 30s --interval 2s -n 20 /tmp/2026_11_29_16_36_53_10829/
    recorder top --once app.jfr

A file is a finished recording: one table of its last --window is printed. A directory is a
repository, followed live until its recording ends (its final chunk is written), Ctrl-C, or once
with --once. When stdout is not a terminal, one
table is printed per refresh, without clearing the screen.";

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

/// What `dump` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DumpFormat {
    /// A JFR file with all chunks (kept events copied byte for byte).
    Jfr,
    /// One JSON object per event and line (as `print --json`).
    Json,
    /// Folded stacks `outer;...;inner count`, one line per distinct stack.
    Collapsed,
    /// An interactive flame graph SVG of the folded stacks.
    Flamegraph,
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// A .jfr (or .jfr.zst) file, or a directory of chunk files (a JDK-style repository).
    #[arg(value_name = "SOURCE", required_unless_present = "pid", conflicts_with = "pid")]
    pub path: Option<PathBuf>,
    /// Instead of SOURCE: ask the running process PID (recording with its control socket) to
    /// write what it recorded so far, and dump that.
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Output file (default: stdout; binary output is not written to a terminal).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DumpFormat::Jfr)]
    pub format: DumpFormat,
    /// Only events that started within DURATION before the end of the recording (e.g. 30s, 5m, 500ms).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<std::time::Duration>,
    /// Only events of the thread with this name (exact Java or OS thread name).
    #[arg(long, value_name = "NAME")]
    pub thread: Option<String>,
    /// Compress the output with zstd (any format; readers here decompress .zst transparently).
    #[arg(long)]
    pub compress: bool,
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
    /// The source; with `pid`, where the process's dump is written first.
    pub path: PathBuf,
    /// Dump the live recording of this process.
    pub pid: Option<u32>,
    /// `None`: stdout.
    pub output: Option<PathBuf>,
    pub format: DumpFormat,
    pub filter: TypeFilter,
    pub since: Option<std::time::Duration>,
    pub thread: Option<String>,
    pub compress: bool,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Refresh period for a live repository.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub interval: std::time::Duration,
    /// Samples of this last span are counted.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub window: std::time::Duration,
    /// Functions shown.
    #[arg(short = 'n', long = "top", default_value_t = 20, value_name = "N")]
    pub n: usize,
    /// Print one table and exit.
    #[arg(long)]
    pub once: bool,
}

#[derive(Debug)]
pub struct TopConfig {
    pub path: PathBuf,
    pub interval: std::time::Duration,
    pub window: std::time::Duration,
    pub n: usize,
    pub once: bool,
}

impl TopArgs {
    pub fn into_config(self) -> anyhow::Result<TopConfig> {
        if self.interval.is_zero() {
            anyhow::bail!("--interval must be more than 0");
        }
        Ok(TopConfig {
            path: self.source.path,
            interval: self.interval,
            window: self.window,
            n: self.n.max(1),
            once: self.once,
        })
    }
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
        let path = match (self.path, self.pid) {
            (Some(path), _) => path,
            (None, Some(pid)) => {
                std::env::temp_dir().join(format!("recorder-dump-{pid}-from-{}.jfr", std::process::id()))
            }
            (None, None) => anyhow::bail!("give a SOURCE or --pid PID"),
        };
        if let Some(output) = &self.output {
            let same_file = *output == path
                || matches!(
                    (output.canonicalize(), path.canonicalize()),
                    (Ok(a), Ok(b)) if a == b
                );
            if same_file {
                anyhow::bail!("{}: the output would overwrite the input", output.display());
            }
        } else if (self.format == DumpFormat::Jfr || self.compress)
            && std::io::IsTerminal::is_terminal(&std::io::stdout())
        {
            anyhow::bail!("binary output is not written to a terminal: give -o FILE or redirect stdout");
        }
        Ok(DumpConfig {
            path,
            pid: self.pid,
            output: self.output,
            format: self.format,
            filter,
            since: self.since,
            thread: self.thread,
            compress: self.compress,
        })
    }
}
