//! Command-line arguments (clap derive). Each `*Args` converts into a validated `*Config`; nothing
//! past `into_config` sees clap types.

use crate::profile::ProfileKind;
use crate::source::Recordings;
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
    /// Compare the samples of two recordings: a differential flame graph, or collapsed stacks with both counts.
    #[command(after_long_help = DIFF_EXAMPLES, after_help = DIFF_EXAMPLES)]
    Diff(DiffArgs),
    /// Run a program with the recorder preloaded (no change to the program), pass its exit status through, and show the result.
    #[command(after_long_help = RECORD_EXAMPLES, after_help = RECORD_EXAMPLES)]
    Record(RecordArgs),
    /// Record a built-in multi-threaded workload for a few seconds and show the result.
    #[command(after_long_help = DEMO_EXAMPLES, after_help = DEMO_EXAMPLES)]
    Demo(DemoArgs),
    /// Post finished chunks to Grafana Pyroscope, once each and in order (`--follow`: as they finish).
    #[command(after_long_help = PUSH_EXAMPLES, after_help = PUSH_EXAMPLES)]
    Push(PushArgs),
    /// Write one self-contained HTML page: a lane per thread with its samples (CPU, wall clock with thread states, allocated or live bytes), spans and events over time, the flame graph and function table of a selected time range, and an events table.
    #[command(after_long_help = VIEW_EXAMPLES, after_help = VIEW_EXAMPLES)]
    View(ViewArgs),
}

const VIEW_EXAMPLES: &str = "\
EXAMPLES:
    recorder view app.jfr -o report.html
    recorder view /tmp/recorder-1000/2026_11_29_16_36_53_10829/ -o report.html

The page needs no network: its script, style and data are in the file. Open report.html#range=100,300
to show the flame graph of 100 ms to 300 ms after the recording's start; drag over a lane to select a range.
report.html#kind=wall (or alloc, live) shows that kind of samples.";

#[derive(Debug, Args)]
pub struct ViewArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Write the page to this file instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

const PUSH_EXAMPLES: &str = "\
EXAMPLES:
    recorder push --pyroscope http://pyroscope:4040 --app checkout --label region=eu-1 /tmp/recorder-1000/2026_11_29_16_36_53_10829/
    recorder push --pyroscope http://pyroscope:4040 --app checkout --follow /tmp/recorder-1000/
    recorder push --pyroscope https://profiles-prod-001.grafana.net --basic-auth-user 123456 --app checkout app.jfr

Each finished chunk is one request (POST /ingest?format=jfr&name=APP{LABELS}&from=&until=&sampleRate=&spyName=recorder)
with the chunk gzipped in a multipart `jfr` part; sampleRate is the chunk's own CPU sampling rate. Chunks above the
server's default limits (4 MiB, 16 000 distinct samples) are cut into several valid JFR files. What was posted is
remembered in a hidden `.recorder-push-*` file next to the chunks, so running the command again (or after a
recording process pushed itself) posts only what is new. Server errors and timeouts are retried with backoff
(--max-attempts per upload, unlimited with --follow); a 4xx answer rejects that upload (reported, not retried);
401/403/404 stop the command. The password for --basic-auth-user is read from RECORDER_PUSH_PASSWORD.
With --follow, a recording directory is followed until its recording ends; a base directory until interrupted.";

#[derive(Debug, Args)]
pub struct PushArgs {
    /// The Pyroscope server (http://HOST:PORT or https://…; `/ingest` is added).
    #[arg(long, value_name = "URL")]
    pub pyroscope: String,
    /// The application name (Pyroscope's service_name).
    #[arg(long, value_name = "NAME")]
    pub app: String,
    /// A label of every profile (repeat for more), e.g. host=web-7, version=1.4.2.
    #[arg(long = "label", value_name = "K=V", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// A .jfr file, a recording directory, or a base directory of recordings.
    #[arg(value_name = "PATH", required_unless_present = "follow", conflicts_with = "follow")]
    pub path: Option<PathBuf>,
    /// Follow DIR and post every chunk as it finishes.
    #[arg(long, value_name = "DIR")]
    pub follow: Option<PathBuf>,
    /// The tenant (X-Scope-OrgID) of a multi-tenant server.
    #[arg(long, value_name = "ID")]
    pub tenant: Option<String>,
    /// HTTP basic authentication user; the password comes from RECORDER_PUSH_PASSWORD.
    #[arg(long, value_name = "USER")]
    pub basic_auth_user: Option<String>,
    /// Post only samples (and the settings and constants they need), not the application's other
    /// events, which Pyroscope ignores; chunks are then cut even when they fit the server's limits.
    #[arg(long)]
    pub samples_only: bool,
    /// Attempts per upload before giving up (default 5; with --follow, unlimited).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u64>,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.trim().to_owned())),
        _ => Err(format!("`{text}` is not a label: give NAME=VALUE, e.g. region=eu-1")),
    }
}

const REPAIR_EXAMPLES: &str = "\
EXAMPLES:
    recorder repair /tmp/recorder-1000/2026_11_29_16_36_53_10829/
    recorder repair /tmp/recorder-1000/                # every recording below it; live ones are left alone
    recorder repair /tmp/recorder-1000/2026_11_29_16_36_53_10829/ && jfr summary /tmp/recorder-1000/2026_11_29_16_36_53_10829/2026_11_29_16_36_53.jfr

A chunk whose writer was killed may hold bytes past its last published flush; the JDK's jfr then
refuses the file. Repair cuts each such chunk to its published size, marks it finished, puts the
final flag on the newest chunk and removes half-written temporary files. A recording whose process
still runs is left alone. (Starting a new recording in the same base directory repairs dead
recordings too.)";

#[derive(Debug, Args)]
pub struct RepairArgs {
    /// A recording's chunk directory (`<yyyy_MM_dd_HH_mm_ss>_<pid>`), or a base directory: every
    /// recording directory in it is repaired.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

const RECORD_EXAMPLES: &str = "\
EXAMPLES:
    recorder record -- ./myprogram --its-args
    recorder record --period 1ms -o app.jfr --flamegraph app.svg -- ./app
    recorder record --duration 30s --repository /tmp/rec -- ./server     # records the first 30 s
    recorder record --follow-children -- make -j2                        # one recording per process

CMD runs with librecorder_preload.so preloaded (found next to this binary, or set RECORDER_PRELOAD).
The recording streams while CMD runs (recorder top DIR, recorder dump --pid PID, the JDK's
EventStream); when CMD ends, -o is written and the summary printed, and CMD's exit status becomes
ours. Children that CMD executes are not recorded unless --follow-children is given (each then
records into its own directory of the same base). SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
recorder go on to CMD. Static and setuid programs cannot be preloaded into: they are refused
(exit status 2). By hand: LD_PRELOAD=/path/librecorder_preload.so RECORDER_OPTIONS=period=1ms,output=app.jfr ./app";

#[derive(Debug, Args)]
pub struct RecordArgs {
    /// CPU sampling period of each thread, e.g. 10ms, 1ms (100us ..= 1s).
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration)]
    pub period: std::time::Duration,
    /// Wall-clock sampling period, e.g. 50ms (1ms ..= 60s; off by default): profiler.WallClockSample
    /// events, `dump --type wall` (RECORDER_OPTIONS key `wall=`).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wall: Option<std::time::Duration>,
    /// Sample allocations (malloc, calloc, realloc, the aligned ones; C++ new goes through
    /// malloc): one sample per SIZE bytes allocated on average, e.g. 512KiB (B, KiB, MiB, GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub alloc: Option<u64>,
    /// Follow the sampled allocations until they are freed: `recorder dump --live` then shows
    /// what was still allocated at the end (leaks). Turns --alloc on at 512KiB if not given.
    #[arg(long)]
    pub alloc_live: bool,
    /// Stop recording (not the program) after this long; -o and the summary are written then.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<std::time::Duration>,
    /// How stacks are walked: auto (frame pointers through code built with them, the binaries'
    /// .eh_frame unwind tables elsewhere), fp (frame pointers only) or dwarf (the tables wherever
    /// they exist).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["auto", "fp", "dwarf"])]
    pub unwinder: String,
    /// Where separate debug files are looked for, by build ID (DIR/.build-id/ab/cdef.debug), as
    /// gdb's debug-file-directory; repeat for several. Default /usr/lib/debug (give it again to
    /// keep it with others).
    #[arg(long = "debug-dir", value_name = "DIR")]
    pub debug_dirs: Vec<PathBuf>,
    /// What the symbolizer may hold in CMD (its heap and the debug files it maps), e.g. 64MiB;
    /// default 16 MiB. A module whose debug info does not fit is named from its symbol table
    /// (no lines), and named in the summary's recorder memory (RECORDER_OPTIONS key
    /// `symbol_memory=`).
    #[arg(long = "symbol-memory", value_name = "SIZE", value_parser = parse_size)]
    pub symbol_memory: Option<u64>,
    /// Record the programs CMD executes too, each into its own recording of the same base directory.
    #[arg(long)]
    pub follow_children: bool,
    /// Base directory of the repository (default: a per-user directory under the temp dir).
    #[arg(long, value_name = "DIR")]
    pub repository: Option<PathBuf>,
    /// The recording as one .jfr file, written when the recording ends.
    #[arg(short = 'o', long = "output", value_name = "FILE", default_value = "recording.jfr")]
    pub output: PathBuf,
    /// Also write a flame graph SVG of the CPU samples.
    #[arg(long, value_name = "FILE")]
    pub flamegraph: Option<PathBuf>,
    /// Hottest functions shown.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<std::ffi::OsString>,
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

pub use recorder::units::{parse_duration, parse_size};

const TOP_EXAMPLES: &str = "\
EXAMPLES:
    recorder summary app.jfr
    recorder print --json app.jfr | head
    recorder dump app.jfr -o samples.jfr --events jdk.ExecutionSample
    recorder dump app.jfr --format flamegraph --by-thread -o cpu.svg
    recorder diff before.jfr after.jfr -o diff.svg
    recorder demo -o demo.jfr

PATH may be a .jfr file, a recording's directory, or a base directory holding recordings: the
newest is read (the others are named on stderr), --all merges them.

Exit codes: 0 ok, 1 problems found, 2 error (missing, unreadable or damaged input; what was
readable before the damage is still printed).";

const SUMMARY_EXAMPLES: &str = "\
EXAMPLES:
    recorder summary app.jfr
    recorder summary --json app.jfr | jq '.events[\"jdk.ExecutionSample\"].count'
    recorder summary --json app.jfr | jq '.threads[] | select(.cpu_samples > 0)'
    recorder summary /tmp/2026_11_29_16_36_53_10829/
    recorder summary --all /tmp/recorder-1000/          # every recording of the base, merged

After the event types: the threads with their CPU samples and other events (the busiest 30;
--json lists all), and the share of CPU samples whose stack is truncated (cut at the depth
limit) or leaf-only (one frame: code built without frame pointers).";

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
    recorder dump /tmp/2026_11_29_16_36_53_10829/ -o whole.jfr --compress     # writes whole.jfr.zst
    recorder dump app.jfr --format json --thread worker-1 | jq .type
    recorder dump app.jfr --format collapsed --since 30s > app.folded
    recorder dump /tmp/2026_11_29_16_36_53_10829/ --format flamegraph -o cpu.svg
    recorder dump app.jfr --format flamegraph --by-thread -o threads.svg
    recorder dump app.jfr --format collapsed --by-span > spans.folded     # span:outer;span:inner;frames...
    recorder dump app.jfr --format flamegraph --weight self-time -o scopes.svg
    recorder dump jvm.jfr --format flamegraph --type alloc -o alloc.svg
    recorder dump app.jfr --format collapsed --live | sort -k2 -n -r | head   # what is still allocated
    recorder dump app.jfr --format pprof -o cpu.pb.gz && go tool pprof -top cpu.pb.gz
    recorder dump app.jfr --format firefox -o profile.json     # profiler.firefox.com: Load a profile from file
    recorder dump app.jfr --format otlp --service-name checkout -o profiles.pb
    recorder dump --pid 4242 --format flamegraph --since 1m -o last-minute.svg

Output goes to -o FILE, or to stdout when -o is not given (jfr, pprof and --compress output is
binary and is not written to a terminal). collapsed: one `outer;...;inner weight` line per
distinct stack; flamegraph: an interactive SVG of the same stacks (inferno); pprof: a gzipped
profile.proto, each sample labelled with its thread. They fold the samples of --type: cpu
(jdk.ExecutionSample, default), alloc (jdk.ObjectAllocationSample, weighed by its bytes), wall
(profiler.WallClockSample, weighed by the periods each stands for), or the --events types that
have stack traces; --live folds the sampled allocations still allocated at the end (the last
recorder.LiveObject snapshot, weighed by estimated bytes). Frames are named
class.method (JVM classes with dots); the runtime's thread-start frames (std's spawn and
catch_unwind frames, start_thread, clone3, _start) are folded away unless
--keep-runtime-frames.";

const TOP_CMD_EXAMPLES: &str = "\
EXAMPLES:
    recorder top /tmp/2026_11_29_16_36_53_10829/            # live, refreshed every second
    recorder top --window 30s --interval 2s -n 20 /tmp/2026_11_29_16_36_53_10829/
    recorder top --once app.jfr
    recorder top /tmp/recorder-1000/                       # the newest recording of the base

A file is a finished recording: one table of its last --window is printed. A directory is a
repository, followed live until its recording ends (its final chunk is written), Ctrl-C, or once
with --once. When stdout is not a terminal, one
table is printed per refresh, without clearing the screen.";

/// A recording: a `.jfr` file, or a directory of chunk files.
#[derive(Debug, Args)]
pub struct SourceArgs {
    /// A .jfr file (one or more chunks), a recording's directory of chunk files, or a base
    /// directory holding recordings (the newest is read).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// In a base directory holding several recordings, read them all (merged in time order)
    /// instead of the newest.
    #[arg(long)]
    pub all: bool,
}

impl SourceArgs {
    fn recordings(&self) -> Recordings {
        if self.all {
            Recordings::All
        } else {
            Recordings::Newest
        }
    }
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
    /// A gzipped pprof profile.proto of the samples (`go tool pprof`, Pyroscope, Speedscope).
    Pprof,
    /// One self-contained HTML page of the samples: lanes over time, flame graph (as `recorder view`).
    Html,
    /// The Firefox Profiler's processed profile (JSON): threads, CPU samples with stacks and times,
    /// events as markers (profiler.firefox.com opens it from a file).
    Firefox,
    /// An OpenTelemetry ExportProfilesServiceRequest (binary protobuf): one profile per kind of
    /// sample (cpu, wall, alloc, live), each sample with its time, thread and span.
    Otlp,
    /// The same request as OTLP/JSON.
    OtlpJson,
}

impl DumpFormat {
    /// Formats that fold stacks of samples (`--type`, `--by-thread`, `--keep-runtime-frames`).
    pub fn is_profile(self) -> bool {
        matches!(self, DumpFormat::Collapsed | DumpFormat::Flamegraph | DumpFormat::Pprof)
    }

    /// Formats whose output is binary (not written to a terminal).
    fn is_binary(self) -> bool {
        matches!(self, DumpFormat::Jfr | DumpFormat::Pprof | DumpFormat::Otlp)
    }
}

#[derive(Debug, Args)]
pub struct DumpArgs {
    /// A .jfr (or .jfr.zst) file, a recording's directory of chunk files, or a base directory
    /// holding recordings (the newest is read; --all for every one).
    #[arg(value_name = "SOURCE", required_unless_present = "pid", conflicts_with = "pid")]
    pub path: Option<PathBuf>,
    /// In a base directory holding several recordings, read them all (merged in time order).
    #[arg(long)]
    pub all: bool,
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
    /// `-o FILE` becomes `FILE.zst` unless it ends in `.zst` already.
    #[arg(long)]
    pub compress: bool,
    /// collapsed, flamegraph, pprof: which samples: cpu (jdk.ExecutionSample), alloc
    /// (jdk.ObjectAllocationSample, weighed by its bytes), wall (profiler.WallClockSample).
    #[arg(long = "type", value_enum, default_value_t = ProfileKind::Cpu, value_name = "KIND")]
    pub kind: ProfileKind,
    /// collapsed, flamegraph: the sampled allocations still allocated at the end of the recording
    /// (the recorder.LiveObject events of its last live-set snapshot), weighed by the bytes they
    /// stand for: leaks and what holds memory. Needs a recording made with the live set
    /// tracked (`allocation_live_set(true)`).
    #[arg(long, conflicts_with_all = ["kind", "events", "exclude_events"])]
    pub live: bool,
    /// collapsed, flamegraph: one root per thread (the thread's name, in brackets).
    #[arg(long)]
    pub by_thread: bool,
    /// collapsed, flamegraph: each CPU sample under the path of the tracing span it was taken in
    /// (`span:outer;span:inner;frames...`; from jdk.ExecutionSample.spanId and recorder.Span).
    #[arg(long)]
    pub by_span: bool,
    /// collapsed, flamegraph: what a stack weighs: samples (the default), or self-time: the
    /// instrumented scope tree (recorder.ScopeTiming) in nanoseconds of self time.
    #[arg(long, value_enum, default_value_t = DumpWeight::Samples, value_name = "WEIGHT")]
    pub weight: DumpWeight,
    /// collapsed, flamegraph, pprof: keep the thread-start frames of the runtime (std's thread
    /// spawn and panic-catching frames, start_thread, clone3, _start) that are folded away by
    /// default.
    #[arg(long)]
    pub keep_runtime_frames: bool,
    /// Keep only these event types (comma-separated full names).
    #[arg(long, value_name = "T1,T2", value_delimiter = ',', conflicts_with = "exclude_events")]
    pub events: Option<Vec<String>>,
    /// Keep every event type except these (comma-separated full names).
    #[arg(long, value_name = "T1,T2", value_delimiter = ',')]
    pub exclude_events: Option<Vec<String>>,
    /// otlp, otlp-json: the resource's `service.name`.
    #[arg(long, value_name = "NAME", default_value = "unknown_service")]
    pub service_name: String,
}

/// What `dump --format collapsed|flamegraph` weighs a stack by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DumpWeight {
    /// The samples of the `--type` (or the `--events`).
    Samples,
    /// Self time of the instrumented scopes (recorder.ScopeTiming), in nanoseconds.
    SelfTime,
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
    pub recordings: Recordings,
    pub json: bool,
}

#[derive(Debug)]
pub struct PrintConfig {
    pub path: PathBuf,
    pub recordings: Recordings,
    pub filter: TypeFilter,
    pub json: bool,
}

#[derive(Debug)]
pub struct DumpConfig {
    /// The source; with `pid`, where the process's dump is written first.
    pub path: PathBuf,
    pub recordings: Recordings,
    /// Dump the live recording of this process.
    pub pid: Option<u32>,
    /// `None`: stdout.
    pub output: Option<PathBuf>,
    pub format: DumpFormat,
    pub filter: TypeFilter,
    pub since: Option<std::time::Duration>,
    pub thread: Option<String>,
    pub compress: bool,
    /// `--compress` added `.zst` to the output name asked for.
    pub zst_added: bool,
    /// `--type` was given.
    pub kind: Option<ProfileKind>,
    /// `--live`: the last live-set snapshot.
    pub live: bool,
    pub fold: crate::fold::FoldOptions,
    /// What collapsed and flamegraph weigh.
    pub weight: DumpWeight,
    /// otlp, otlp-json: the resource's `service.name`.
    pub service_name: String,
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
    /// List the hottest tracing spans (by the CPU samples taken inside them: self = innermost
    /// span, total = anywhere in the span path) instead of functions.
    #[arg(long)]
    pub by_span: bool,
}

#[derive(Debug)]
pub struct TopConfig {
    pub path: PathBuf,
    pub recordings: Recordings,
    pub interval: std::time::Duration,
    pub window: std::time::Duration,
    pub n: usize,
    pub once: bool,
    pub by_span: bool,
}

impl TopArgs {
    pub fn into_config(self) -> anyhow::Result<TopConfig> {
        if self.interval.is_zero() {
            anyhow::bail!("--interval must be more than 0");
        }
        Ok(TopConfig {
            recordings: self.source.recordings(),
            path: self.source.path,
            interval: self.interval,
            window: self.window,
            n: self.n.max(1),
            once: self.once,
            by_span: self.by_span,
        })
    }
}

impl SummaryArgs {
    pub fn into_config(self) -> SummaryConfig {
        SummaryConfig { recordings: self.source.recordings(), path: self.source.path, json: self.json }
    }
}

impl PrintArgs {
    pub fn into_config(self) -> PrintConfig {
        PrintConfig {
            recordings: self.source.recordings(),
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
    pub fn into_config(self, matches: &clap::ArgMatches) -> anyhow::Result<DumpConfig> {
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
        let explicit = |id: &str| {
            matches
                .subcommand_matches("dump")
                .and_then(|m| m.value_source(id))
                .is_some_and(|s| s == clap::parser::ValueSource::CommandLine)
        };
        if !self.format.is_profile() {
            for (id, flag) in [
                ("kind", "--type"),
                ("by_thread", "--by-thread"),
                ("by_span", "--by-span"),
                ("keep_runtime_frames", "--keep-runtime-frames"),
                ("weight", "--weight"),
            ] {
                if explicit(id) {
                    anyhow::bail!("{flag} applies to --format collapsed, flamegraph and pprof");
                }
            }
        }
        let otlp = matches!(self.format, DumpFormat::Otlp | DumpFormat::OtlpJson);
        if otlp && (explicit("events") || explicit("exclude_events")) {
            anyhow::bail!(
                "--events and --exclude-events do not apply to --format otlp: it writes every kind of sample"
            );
        }
        if !otlp && explicit("service_name") {
            anyhow::bail!("--service-name applies to --format otlp and otlp-json");
        }
        if self.live && !matches!(self.format, DumpFormat::Collapsed | DumpFormat::Flamegraph) {
            anyhow::bail!("--live applies to --format collapsed and flamegraph");
        }
        if self.format.is_profile() && explicit("kind") && matches!(filter, TypeFilter::Only(_)) {
            anyhow::bail!("give --type or --events, not both: --type picks the sampled events, --events names them");
        }
        if self.format == DumpFormat::Pprof && matches!(filter, TypeFilter::Only(_)) {
            anyhow::bail!("--format pprof writes the samples of a --type (cpu, alloc or wall), not --events");
        }
        if self.format == DumpFormat::Pprof && (self.by_span || explicit("weight")) {
            anyhow::bail!("--by-span and --weight are for collapsed and flamegraph");
        }
        if self.weight == DumpWeight::SelfTime {
            for (id, flag) in
                [("kind", "--type"), ("by_thread", "--by-thread"), ("by_span", "--by-span"), ("events", "--events")]
            {
                if explicit(id) {
                    anyhow::bail!(
                        "--weight self-time draws the scope tree (recorder.ScopeTiming); {flag} applies to samples"
                    );
                }
            }
        }
        if self.format == DumpFormat::Pprof && self.by_thread {
            anyhow::bail!("--by-thread is for collapsed and flamegraph; a pprof profile labels each sample with its thread (go tool pprof -tagroot thread)");
        }
        let asked = self.output.clone();
        let output = match self.output {
            // zstd output under a name that says so: the JDK's tools refuse a compressed `.jfr`.
            Some(o) if self.compress && !o.to_string_lossy().ends_with(".zst") && !is_special_file(&o) => {
                let mut name = o.into_os_string();
                name.push(".zst");
                Some(PathBuf::from(name))
            }
            o => o,
        };
        if let Some(output) = &output {
            let same_file = *output == path
                || matches!(
                    (output.canonicalize(), path.canonicalize()),
                    (Ok(a), Ok(b)) if a == b
                );
            if same_file {
                anyhow::bail!("{}: the output would overwrite the input", output.display());
            }
        } else if (self.format.is_binary() || self.compress) && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            anyhow::bail!("binary output is not written to a terminal: give -o FILE or redirect stdout");
        }
        let zst_added = output != asked;
        Ok(DumpConfig {
            zst_added,
            path,
            recordings: if self.all { Recordings::All } else { Recordings::Newest },
            pid: self.pid,
            output,
            format: self.format,
            filter,
            since: self.since,
            thread: self.thread,
            compress: self.compress,
            kind: explicit("kind").then_some(self.kind),
            live: self.live,
            fold: crate::fold::FoldOptions {
                by_thread: self.by_thread,
                keep_runtime_frames: self.keep_runtime_frames,
                by_span: self.by_span,
            },
            weight: self.weight,
            service_name: self.service_name,
        })
    }
}

/// A device, pipe or socket (`-o /dev/null`): written as it is, never renamed.
pub fn is_special_file(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

/// What `diff` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DiffFormat {
    /// A differential flame graph SVG: the frames of AFTER, colored by the change from BEFORE
    /// (red: more, blue: less).
    Flamegraph,
    /// `outer;...;inner before after` lines (the input of flamegraph tools' differential mode).
    Collapsed,
}

const DIFF_EXAMPLES: &str = "\
EXAMPLES:
    recorder diff before.jfr after.jfr -o diff.svg
    recorder diff before.jfr after.jfr --format collapsed > diff.folded
    recorder diff --type alloc old/ new/ -o alloc-diff.svg

The flame graph has the shape of AFTER; a frame is red where AFTER has more samples than BEFORE,
blue where it has fewer. BEFORE's counts are scaled to AFTER's total first (--no-normalize keeps
the raw counts), so recordings of different lengths compare.";

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline recording (file, recording directory or base directory).
    #[arg(value_name = "BEFORE")]
    pub before: PathBuf,
    /// The recording compared with it.
    #[arg(value_name = "AFTER")]
    pub after: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = DiffFormat::Flamegraph)]
    pub format: DiffFormat,
    /// Output file (default: stdout).
    #[arg(short, long, value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Which samples: cpu, alloc or wall (as for dump).
    #[arg(long = "type", value_enum, default_value_t = ProfileKind::Cpu, value_name = "KIND")]
    pub kind: ProfileKind,
    /// Keep the runtime's thread-start frames (folded away by default).
    #[arg(long)]
    pub keep_runtime_frames: bool,
    /// One root per thread (threads are matched by name).
    #[arg(long)]
    pub by_thread: bool,
    /// Compare raw counts instead of scaling BEFORE to AFTER's total.
    #[arg(long)]
    pub no_normalize: bool,
    /// In base directories holding several recordings, read them all instead of the newest.
    #[arg(long)]
    pub all: bool,
}
