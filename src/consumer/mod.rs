//! Streaming consumer: follows a repository (live or finished, written by this process or another)
//! or reads a single `.jfr` file, and delivers events in order with their thread and stack trace
//! resolved.
//!
//! ```no_run
//! use recorder::consumer::{EventStream, StartAt};
//! let mut stream = EventStream::open_repository("/tmp/recorder-1000")?;
//! stream.start_at(StartAt::Beginning);
//! stream.on_event("app.Request", |ev| println!("{} {:?}", ev.start_nanos(), ev.field("path")));
//! stream.on_close(|| println!("recording ended"));
//! stream.run();
//! # Ok::<(), recorder::consumer::ConsumerError>(())
//! ```
//!
//! # How a live repository is followed
//! (docs/jfr-format.md, "Publishing a live chunk" and "Repository layout")
//! - The chunk directory: a path holding recording subdirectories (`yyyy_MM_dd_HH_mm_ss_<pid>[_<n>]`,
//!   `repository::layout::recording_dir_pid`) means the most recently modified one (re-chosen at
//!   every scan until a chunk was found there, then fixed, as the JDK does); otherwise the path
//!   itself. With [`EventStream::all_recordings`], the path's own chunk files and those of every
//!   recording subdirectory, at every scan.
//! - Chunks are the `*.jfr` files of at least 68 bytes whose header parses, and the compressed
//!   finished ones (`*.jfr.zst`, read whole), ordered by the header's `startNanos`. After a
//!   finished chunk the next is the one with the smallest `startNanos ≥ start + max(duration, 1)`.
//!   A finished chunk with the final flag ends the stream (with every recording: when no chunk
//!   follows it). With every recording, a live chunk that does not grow while a later chunk of
//!   another recording is there is left (its writer is gone), and reading goes on with that one.
//! - The live chunk: at the end of its published data the header is re-read every poll interval
//!   (10 ms by default, against the JDK's 1 s). The header is read twice and accepted only when both
//!   reads agree and the guard byte (255) is not set, so a header being rewritten is never taken
//!   half-written. Only when the published size or state changed is the file read again, and only its
//!   new tail: published bytes of a chunk never change. Reading resumes at `Items::position()`.
//! - Errors never panic: a corrupt chunk is reported (callback `on_error`, or `Err` from the
//!   iterator) and reading goes on with the next chunk (the smallest `startNanos` greater than the
//!   corrupt one's).

mod follower;

use crate::repository::layout;
use bytes::Bytes;
use follower::Follower;
use jfr_format::header::{ChunkHeader, HEADER_SIZE, STATE_GUARD, STATE_OFFSET};
use jfr_format::read::TypeTable;
use jfr_format::{Chunk, Item, StackTraceInfo, ThreadInfo, Value};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirEntryExt, FileExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Default interval between two looks at a live chunk's header or at the directory.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Wait after finding a header with the guard byte set (the JDK's `pollWait`).
const LOCKED_RETRY: Duration = Duration::from_millis(1);
/// Attempts to open a chunk that is not ready before a non-following stream skips it.
const NOT_READY_LIMIT: u32 = 1000;

/// Where a stream starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StartAt {
    /// From the oldest chunk in the repository (every event still on disk).
    #[default]
    Beginning,
    /// Only events published after the stream opened: reading starts at the newest chunk's
    /// published end.
    Now,
}

/// A problem found while consuming. None of them ends a live stream by itself.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConsumerError {
    /// A file or directory could not be read.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A chunk is malformed; the rest of it is skipped.
    Format {
        /// The chunk file.
        path: PathBuf,
        /// What is wrong, and where.
        source: jfr_format::Error,
    },
}

impl fmt::Display for ConsumerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConsumerError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ConsumerError::Format { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for ConsumerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConsumerError::Io { source, .. } => Some(source),
            ConsumerError::Format { source, .. } => Some(source),
        }
    }
}

fn io_err(path: &Path, source: io::Error) -> ConsumerError {
    ConsumerError::Io { path: path.to_owned(), source }
}

fn format_err(path: &Path, source: jfr_format::Error) -> ConsumerError {
    ConsumerError::Format { path: path.to_owned(), source }
}

/// One event, decoded and resolved.
#[derive(Debug, Clone)]
pub struct ConsumedEvent {
    type_info: Arc<TypeInfo>,
    values: Vec<Value>,
    start_nanos: i64,
    duration_nanos: i64,
    thread: Option<Arc<ThreadInfo>>,
    stack_trace: Option<Arc<StackTraceInfo>>,
    chunk_start_nanos: i64,
    offset: u64,
}

impl ConsumedEvent {
    /// The event type's name, e.g. `jdk.ExecutionSample`.
    pub fn type_name(&self) -> &str {
        &self.type_info.name
    }

    /// The event type's id in its chunk.
    pub fn type_id(&self) -> u64 {
        self.type_info.id
    }

    /// Start time, ns since the Unix epoch.
    pub fn start_nanos(&self) -> i64 {
        self.start_nanos
    }

    /// Duration in ns (0 for instant events and types without a duration).
    pub fn duration_nanos(&self) -> i64 {
        self.duration_nanos
    }

    /// End time, ns since the Unix epoch.
    pub fn end_nanos(&self) -> i64 {
        self.start_nanos.saturating_add(self.duration_nanos)
    }

    /// The value of field `name`. Constant-pool references are resolved (strings, threads,
    /// classes…), except the `stackTrace` field, which stays a reference: use
    /// [`Self::stack_trace`]. `startTime` and `duration` are in ticks as written.
    pub fn field(&self, name: &str) -> Option<&Value> {
        let index = self.type_info.fields.iter().position(|f| &**f == name)?;
        self.values.get(index)
    }

    /// Field `name` as an integer.
    pub fn field_i64(&self, name: &str) -> Option<i64> {
        self.field(name).and_then(Value::as_i64)
    }

    /// Field `name` as a string.
    pub fn field_str(&self, name: &str) -> Option<&str> {
        self.field(name).and_then(Value::as_str)
    }

    /// Every field with its name, in declared order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &Value)> + '_ {
        self.type_info.fields.iter().map(|n| &**n).zip(self.values.iter())
    }

    /// The event's thread (`eventThread`, or `sampledThread` for samples).
    pub fn thread(&self) -> Option<&ThreadInfo> {
        self.thread.as_deref()
    }

    /// The event's stack trace, innermost frame first. Shared with every event of the chunk that
    /// has the same stack.
    pub fn stack_trace(&self) -> Option<&StackTraceInfo> {
        self.stack_trace.as_deref()
    }

    /// The stack trace as a shared pointer.
    pub fn stack_trace_arc(&self) -> Option<Arc<StackTraceInfo>> {
        self.stack_trace.clone()
    }

    /// Start of the chunk the event was read from, ns since the epoch.
    pub fn chunk_start_nanos(&self) -> i64 {
        self.chunk_start_nanos
    }

    /// Absolute offset of the event's record in its file.
    pub fn offset(&self) -> u64 {
        self.offset
    }
}

#[derive(Debug)]
struct TypeInfo {
    id: u64,
    name: Arc<str>,
    fields: Vec<Arc<str>>,
    thread: Option<usize>,
    stack: Option<usize>,
}

impl TypeInfo {
    fn new(types: &TypeTable, type_id: u64) -> Option<TypeInfo> {
        let class = types.class(type_id)?;
        let index = |n: &str| class.field_index(n);
        Some(TypeInfo {
            id: type_id,
            name: Arc::from(class.name.as_str()),
            fields: class.fields.iter().map(|f| Arc::from(f.name.as_str())).collect(),
            thread: index("eventThread").or_else(|| index("sampledThread")),
            stack: index("stackTrace"),
        })
    }
}

type EventFn = Box<dyn FnMut(&ConsumedEvent) + Send>;
type PlainFn = Box<dyn FnMut() + Send>;
type ErrorFn = Box<dyn FnMut(&ConsumerError) + Send>;

#[derive(Default)]
struct Handlers {
    by_type: HashMap<String, Vec<EventFn>>,
    any: Vec<EventFn>,
    flush: Vec<PlainFn>,
    error: Vec<ErrorFn>,
    close: Vec<PlainFn>,
}

#[derive(Debug, Clone, Copy)]
struct Config {
    poll: Duration,
    start: StartAt,
    follow: bool,
    /// Every recording of a base directory, not only the most recently modified one.
    all: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Repository,
    File,
}

/// A stream of events from a repository or a file. Configure it, register callbacks, then consume
/// it with [`run`](Self::run), [`start`](Self::start) or [`iter`](Self::iter).
pub struct EventStream {
    path: PathBuf,
    mode: Mode,
    config: Config,
    handlers: Handlers,
    closed: Arc<AtomicBool>,
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("path", &self.path)
            .field("mode", &self.mode)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Opens the repository directory of a recording (e.g. `Recorder::repository_dir()` of the running
/// recording, from inside the process) from its beginning.
pub fn open_recording(dir: impl AsRef<Path>) -> Result<EventStream, ConsumerError> {
    EventStream::open_repository(dir.as_ref())
}

impl EventStream {
    /// Follows a repository: a base directory holding `DDDD_DD_DD_DD_DD_DD_<pid>` recording
    /// directories (the most recently modified is used), or a recording's chunk directory itself.
    pub fn open_repository(path: impl Into<PathBuf>) -> Result<EventStream, ConsumerError> {
        let path = path.into();
        let meta = std::fs::metadata(&path).map_err(|e| io_err(&path, e))?;
        if !meta.is_dir() {
            return Err(io_err(&path, io::Error::new(io::ErrorKind::InvalidInput, "not a directory")));
        }
        Ok(EventStream::new(path, Mode::Repository))
    }

    /// Reads a `.jfr` file (one or more chunks back to back). The stream ends at the end of the file.
    pub fn open_file(path: impl Into<PathBuf>) -> Result<EventStream, ConsumerError> {
        let path = path.into();
        let meta = std::fs::metadata(&path).map_err(|e| io_err(&path, e))?;
        if !meta.is_file() {
            return Err(io_err(&path, io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")));
        }
        Ok(EventStream::new(path, Mode::File))
    }

    /// A directory is opened as a repository, anything else as a file.
    pub fn open(path: impl Into<PathBuf>) -> Result<EventStream, ConsumerError> {
        let path = path.into();
        if path.is_dir() {
            EventStream::open_repository(path)
        } else {
            EventStream::open_file(path)
        }
    }

    fn new(path: PathBuf, mode: Mode) -> EventStream {
        EventStream {
            path,
            mode,
            config: Config { poll: DEFAULT_POLL_INTERVAL, start: StartAt::Beginning, follow: true, all: false },
            handlers: Handlers::default(),
            closed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// How often a live chunk's header and the directory are looked at (default 10 ms, at least
    /// 1 ms).
    pub fn poll_interval(&mut self, interval: Duration) -> &mut Self {
        self.config.poll = interval.max(Duration::from_millis(1));
        self
    }

    /// `true` (the default): wait for new data and chunks until the recording ends (a chunk with
    /// the final flag). `false`: read what is on disk now and end, e.g. for a repository whose
    /// process died without finishing its last chunk.
    pub fn follow(&mut self, follow: bool) -> &mut Self {
        self.config.follow = follow;
        self
    }

    /// `true`: the chunks of every recording of a base directory (its own chunk files and those of
    /// each recording subdirectory, found again at every scan), in start order, instead of the
    /// most recently modified recording's (default `false`). Ignored for files.
    pub fn all_recordings(&mut self, all: bool) -> &mut Self {
        self.config.all = all;
        self
    }

    /// Where to start (default [`StartAt::Beginning`]). Ignored for files.
    pub fn start_at(&mut self, start: StartAt) -> &mut Self {
        self.config.start = start;
        self
    }

    /// Calls `f` for every event of type `type_name`.
    pub fn on_event(&mut self, type_name: &str, f: impl FnMut(&ConsumedEvent) + Send + 'static) -> &mut Self {
        self.handlers.by_type.entry(type_name.to_owned()).or_default().push(Box::new(f));
        self
    }

    /// Calls `f` for every event.
    pub fn on_any_event(&mut self, f: impl FnMut(&ConsumedEvent) + Send + 'static) -> &mut Self {
        self.handlers.any.push(Box::new(f));
        self
    }

    /// Calls `f` at the end of every flush segment (a checkpoint with the FLUSH bit).
    pub fn on_flush(&mut self, f: impl FnMut() + Send + 'static) -> &mut Self {
        self.handlers.flush.push(Box::new(f));
        self
    }

    /// Calls `f` for every problem (unreadable files, corrupt chunks). Without one, problems are
    /// skipped silently.
    pub fn on_error(&mut self, f: impl FnMut(&ConsumerError) + Send + 'static) -> &mut Self {
        self.handlers.error.push(Box::new(f));
        self
    }

    /// Calls `f` once when the stream ends: final chunk read, end of file, or closed.
    pub fn on_close(&mut self, f: impl FnMut() + Send + 'static) -> &mut Self {
        self.handlers.close.push(Box::new(f));
        self
    }

    /// A handle that closes this stream from another thread (also works while [`run`](Self::run)
    /// blocks or an [`iter`](Self::iter) waits).
    pub fn closer(&self) -> Closer {
        Closer(Arc::clone(&self.closed))
    }

    /// Reads and dispatches until the stream ends (final chunk, end of file) or is closed; blocks
    /// while the recording is live. Then calls the `on_close` callbacks.
    pub fn run(self) {
        let EventStream { path, mode, config, mut handlers, closed } = self;
        let mut follower = Follower::new(path, mode, config, closed);
        let wants_all = !handlers.any.is_empty();
        let typed: HashSet<String> = handlers.by_type.keys().cloned().collect();
        let want = |name: &str| wants_all || typed.contains(name);
        while let Some(step) = follower.next_step(&want, true) {
            match step {
                Step::Event(ev) => {
                    if let Some(fs) = handlers.by_type.get_mut(ev.type_name()) {
                        for f in fs {
                            f(&ev);
                        }
                    }
                    for f in &mut handlers.any {
                        f(&ev);
                    }
                }
                Step::Flush => {
                    for f in &mut handlers.flush {
                        f();
                    }
                }
                Step::Error(e) => {
                    for f in &mut handlers.error {
                        f(&e);
                    }
                }
                Step::Idle => {}
            }
        }
        for f in &mut handlers.close {
            f();
        }
    }

    /// Runs the stream on a background thread.
    pub fn start(self) -> io::Result<StreamHandle> {
        let closer = self.closer();
        let thread = crate::own_thread::spawn("recorder-consumer", move || self.run())?;
        Ok(StreamHandle { closer, thread: Some(thread) })
    }

    /// The events as an iterator, blocking while the recording is live. Problems come as `Err`
    /// items and reading goes on; callbacks registered on the stream are not called.
    pub fn iter(self) -> EventIter {
        EventIter { closer: self.closer(), follower: Follower::new(self.path, self.mode, self.config, self.closed) }
    }
}

/// Closes a stream from another thread.
#[derive(Debug, Clone)]
pub struct Closer(Arc<AtomicBool>);

impl Closer {
    /// Asks the stream to end; it stops within about one poll interval.
    pub fn close(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// The stream was asked to close.
    pub fn is_closed(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// A stream running on its own thread; see [`EventStream::start`]. Dropping the handle leaves the
/// stream running until it ends by itself.
#[derive(Debug)]
pub struct StreamHandle {
    closer: Closer,
    thread: Option<JoinHandle<()>>,
}

impl StreamHandle {
    /// Closes the stream and waits for its thread (the `on_close` callbacks have run on return).
    pub fn close(mut self) {
        self.closer.close();
        self.join_inner();
    }

    /// Waits until the stream ends by itself (final chunk or end of file).
    pub fn join(mut self) {
        self.join_inner();
    }

    /// The stream's thread has ended.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// A handle to close the stream without consuming this one.
    pub fn closer(&self) -> Closer {
        self.closer.clone()
    }

    fn join_inner(&mut self) {
        if let Some(t) = self.thread.take() {
            // A panicking callback ends the stream's thread; the panic stays there.
            let _ = t.join();
        }
    }
}

/// Blocking iterator over a stream's events; see [`EventStream::iter`].
pub struct EventIter {
    closer: Closer,
    follower: Follower,
}

impl fmt::Debug for EventIter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventIter").field("path", &self.follower.root).finish_non_exhaustive()
    }
}

impl EventIter {
    /// A handle to end the iteration from another thread.
    pub fn closer(&self) -> Closer {
        self.closer.clone()
    }

    /// The next event of a type `want` accepts (others are skipped without being decoded), or
    /// problem, without waiting for the writer: [`Polled::Idle`] once everything published so far
    /// was read (call again later), [`Polled::Ended`] when the stream has ended.
    pub fn poll_next(&mut self, want: &dyn Fn(&str) -> bool) -> Polled {
        loop {
            match self.follower.next_step(want, false) {
                None => return Polled::Ended,
                Some(Step::Event(e)) => return Polled::Event(e),
                Some(Step::Flush) => continue,
                Some(Step::Error(e)) => return Polled::Error(e),
                Some(Step::Idle) => return Polled::Idle,
            }
        }
    }

    /// How far the chunks read so far reach: the latest `startNanos + durationNanos` of their
    /// headers as last read (a live chunk's grows with each publish); 0 before any.
    pub fn published_end_nanos(&self) -> i64 {
        self.follower.published_end_nanos
    }
}

/// What [`EventIter::poll_next`] found.
#[derive(Debug)]
pub enum Polled {
    /// An event.
    Event(ConsumedEvent),
    /// A problem; reading goes on.
    Error(ConsumerError),
    /// Everything published so far was read.
    Idle,
    /// The stream has ended (final chunk, end of file, or closed).
    Ended,
}

impl Iterator for EventIter {
    type Item = Result<ConsumedEvent, ConsumerError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.follower.next_step(&|_| true, true)? {
                Step::Event(e) => return Some(Ok(e)),
                Step::Flush | Step::Idle => continue,
                Step::Error(e) => return Some(Err(e)),
            }
        }
    }
}

enum Step {
    Event(ConsumedEvent),
    Flush,
    Error(ConsumerError),
    /// Everything published was read (only when the caller does not wait).
    Idle,
}

/// What decides the next chunk.
#[derive(Debug, Clone, Copy)]
enum After {
    /// Nothing read yet.
    Nothing,
    /// A chunk finished: next is the smallest start ≥ this.
    End(i64),
    /// A chunk was abandoned (corrupt): next is the smallest start > this.
    Skip(i64),
}

/// The chunk being read.
struct Current {
    path: PathBuf,
    file: Option<File>,
    chunk: Chunk,
    pos: u64,
    cache: Resolver,
}

/// Per-chunk caches: type descriptions, threads, stack traces and constants by key.
struct Resolver {
    types: Arc<TypeTable>,
    type_info: HashMap<u64, Option<Arc<TypeInfo>>>,
    threads: HashMap<u64, Arc<ThreadInfo>>,
    stacks: HashMap<u64, Arc<StackTraceInfo>>,
    constants: HashMap<(u64, u64), Value>,
}

/// Deepest constant-to-constant chain resolved in field values (thread → thread group → name…).
const RESOLVE_DEPTH: usize = 4;

impl Resolver {
    fn new(chunk: &Chunk) -> Resolver {
        Resolver {
            types: Arc::clone(chunk.types()),
            type_info: HashMap::new(),
            threads: HashMap::new(),
            stacks: HashMap::new(),
            constants: HashMap::new(),
        }
    }

    fn type_info(&mut self, chunk: &Chunk, type_id: u64) -> Option<Arc<TypeInfo>> {
        if !Arc::ptr_eq(&self.types, chunk.types()) {
            // New metadata: type descriptions may differ; constants and stacks stay valid (keys are
            // immutable within a chunk).
            self.types = Arc::clone(chunk.types());
            self.type_info.clear();
        }
        self.type_info.entry(type_id).or_insert_with(|| TypeInfo::new(chunk.types(), type_id).map(Arc::new)).clone()
    }

    fn value(&mut self, chunk: &Chunk, value: &Value, depth: usize) -> jfr_format::Result<Value> {
        Ok(match value {
            Value::Ref { type_id, key } => {
                if let Some(v) = self.constants.get(&(*type_id, *key)) {
                    return Ok(v.clone());
                }
                let resolved = detach(chunk.resolve_deep(value, depth)?);
                // A key missing from the pools resolves to Null; it is not cached, a later
                // segment may define it.
                if resolved != Value::Null {
                    self.constants.insert((*type_id, *key), resolved.clone());
                }
                resolved
            }
            Value::Array(items) if depth > 0 => {
                Value::Array(items.iter().map(|v| self.value(chunk, v, depth - 1)).collect::<jfr_format::Result<_>>()?)
            }
            Value::Object(o) if depth > 0 => Value::Object(jfr_format::Object {
                type_id: o.type_id,
                fields: o.fields.iter().map(|v| self.value(chunk, v, depth - 1)).collect::<jfr_format::Result<_>>()?,
            }),
            other => detach(other.clone()),
        })
    }

    fn thread(&mut self, chunk: &Chunk, value: &Value) -> jfr_format::Result<Option<Arc<ThreadInfo>>> {
        let key = match value {
            Value::Ref { key, .. } => Some(*key),
            _ => None,
        };
        if let Some(t) = key.and_then(|k| self.threads.get(&k)) {
            return Ok(Some(Arc::clone(t)));
        }
        let info = chunk.thread_info(value)?.map(Arc::new);
        if let (Some(k), Some(t)) = (key, &info) {
            self.threads.insert(k, Arc::clone(t));
        }
        Ok(info)
    }

    fn stack(&mut self, chunk: &Chunk, value: &Value) -> jfr_format::Result<Option<Arc<StackTraceInfo>>> {
        let key = match value {
            Value::Ref { key, .. } => Some(*key),
            _ => None,
        };
        if let Some(s) = key.and_then(|k| self.stacks.get(&k)) {
            return Ok(Some(Arc::clone(s)));
        }
        let info = chunk.stack_trace_info(value)?.map(Arc::new);
        if let (Some(k), Some(s)) = (key, &info) {
            self.stacks.insert(k, Arc::clone(s));
        }
        Ok(info)
    }

    fn event(
        &mut self,
        chunk: &Chunk,
        info: Arc<TypeInfo>,
        event: jfr_format::Event,
    ) -> jfr_format::Result<ConsumedEvent> {
        let header = chunk.header();
        let start_nanos = header.ticks_to_epoch_nanos(event.start_ticks());
        let duration_nanos = chunk.event_duration_ticks(&event).map(|t| header.ticks_to_nanos(t)).unwrap_or(0);
        let mut thread = None;
        let mut stack_trace = None;
        let mut values = Vec::with_capacity(event.values.len());
        for (i, v) in event.values.into_iter().enumerate() {
            if Some(i) == info.stack {
                stack_trace = self.stack(chunk, &v)?;
                values.push(v);
                continue;
            }
            if Some(i) == info.thread {
                thread = self.thread(chunk, &v)?;
            }
            values.push(match v {
                Value::Ref { .. } | Value::Array(_) | Value::Object(_) => self.value(chunk, &v, RESOLVE_DEPTH)?,
                other => detach(other),
            });
        }
        Ok(ConsumedEvent {
            type_info: info,
            values,
            start_nanos,
            duration_nanos,
            thread,
            stack_trace,
            chunk_start_nanos: header.start_nanos,
            offset: event.offset,
        })
    }
}

/// Copies strings out of the chunk buffer. Strings decoded from a chunk share its bytes, and a live
/// chunk gets a new buffer at every refresh: an event kept by the user (or a cached constant) would
/// otherwise pin a whole copy of the chunk per refresh.
fn detach(value: Value) -> Value {
    match value {
        Value::String(t) => Value::String(jfr_format::Text::from(t.as_str())),
        Value::Array(items) => Value::Array(items.into_iter().map(detach).collect()),
        Value::Object(o) => {
            Value::Object(jfr_format::Object { type_id: o.type_id, fields: o.fields.into_iter().map(detach).collect() })
        }
        other => other,
    }
}
