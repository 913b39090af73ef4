//! The uploader: finds finished chunks, posts them in order, retries, remembers what it posted.
//!
//! It runs on a thread of its own (in a recording process) or on the CLI's main thread; the
//! application never waits for it and it never takes the chunk-writer lock L. A recording process
//! shares one [`UploaderShared`] between the uploader and the retention code (under L): retention asks
//! which chunks are still unposted and reports the ones the disk budget forced it to delete, and
//! the uploader marks what it posted. Lock order: L, then `UploaderShared::state`; the uploader never holds
//! `state` during I/O.

use super::http::{self, Answer, Client};
use super::marker::Marker;
use super::plan::{self, Upload};
use super::target::PushTarget;
use crate::repository::layout;
use bytes::Bytes;
use jfr_format::header::{ChunkHeader, HEADER_SIZE};
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What the uploader did so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushStats {
    /// Chunks the server has (every upload of the chunk answered 2xx).
    pub chunks_posted: u64,
    /// Requests answered 2xx.
    pub uploads: u64,
    /// Bytes sent in requests answered 2xx (gzipped bodies).
    pub bytes_sent: u64,
    /// JFR bytes of those requests before compression.
    pub jfr_bytes: u64,
    /// Failed attempts that were retried (no connection, timeouts, 408, 429, 5xx).
    pub retries: u64,
    /// Uploads the server refused with a 4xx (reported, not retried).
    pub rejected: u64,
    /// Finished chunks deleted (retention under the disk budget) before they were posted.
    pub chunks_lost: u64,
    /// Bytes of those chunks.
    pub bytes_lost: u64,
    /// Chunks without any event Pyroscope reads (nothing to post).
    pub chunks_without_profile: u64,
    /// Finished chunks not yet posted, at the last look.
    pub pending: u64,
    /// The last failure, if any.
    pub last_error: Option<String>,
    /// Why the uploader stopped for good (the server refuses every upload), if it did.
    pub stopped: Option<String>,
}

/// What the uploader reports as it goes (the CLI prints these; a recording process prints only
/// failures, once each).
#[derive(Debug)]
#[non_exhaustive]
pub enum PushEvent<'a> {
    /// An upload was accepted.
    Posted {
        /// Chunk key (file name without `.jfr`).
        chunk: &'a str,
        /// 1-based upload number within the chunk.
        part: usize,
        /// Uploads of the chunk.
        parts: usize,
        /// JFR bytes (uncompressed).
        jfr_bytes: usize,
        /// Bytes on the wire (the multipart body).
        body_bytes: usize,
        /// Profile events in the upload.
        samples: u64,
        /// The `sampleRate` sent.
        sample_rate: Option<u32>,
        /// HTTP status.
        status: u16,
    },
    /// The chunk has no event Pyroscope reads.
    NothingToPost {
        /// Chunk key.
        chunk: &'a str,
    },
    /// The chunk cannot be read (corrupt); it is skipped.
    Unreadable {
        /// Chunk key.
        chunk: &'a str,
        /// Why.
        error: &'a str,
    },
    /// The server refused one upload (4xx); it is not retried.
    Rejected {
        /// Chunk key.
        chunk: &'a str,
        /// 1-based upload number.
        part: usize,
        /// Uploads of the chunk.
        parts: usize,
        /// What the server said.
        error: &'a str,
    },
    /// Uploads started failing; they are retried with backoff.
    Failing {
        /// Chunk key.
        chunk: &'a str,
        /// The failure.
        error: &'a str,
    },
    /// Uploads work again after failures.
    Recovered {
        /// Failed attempts before.
        retries: u64,
    },
    /// A finished chunk disappeared (retention) before it was posted.
    Lost {
        /// Chunk key.
        chunk: &'a str,
    },
    /// The server refuses every upload (401, 403, 404, …): the uploader stops.
    Refused {
        /// What the server said.
        error: &'a str,
    },
}

/// Counters and coordination shared by the uploader thread, the recorder (retention, statistics
/// events) and `stop`.
#[derive(Debug, Default)]
pub(crate) struct UploaderShared {
    chunks_posted: AtomicU64,
    uploads: AtomicU64,
    bytes_sent: AtomicU64,
    jfr_bytes: AtomicU64,
    retries: AtomicU64,
    rejected: AtomicU64,
    chunks_lost: AtomicU64,
    bytes_lost: AtomicU64,
    chunks_without_profile: AtomicU64,
    pending: AtomicU64,
    state: Mutex<State>,
    cond: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Keys of chunks that need no upload any more (posted, rejected, nothing to post).
    done: HashSet<String>,
    /// Chunks deleted before they were posted, with their size. A chunk whose bytes the uploader
    /// already held and then posted in full leaves this set again.
    lost: HashMap<String, u64>,
    wake: bool,
    draining: bool,
    abort: bool,
    exited: bool,
    last_error: Option<String>,
    stopped: Option<String>,
}

/// The key of a chunk file: its name without `.jfr` or `.jfr.zst`.
pub(crate) fn chunk_key(path: &Path) -> Option<&str> {
    layout::chunk_stem(path.file_name()?.to_str()?)
}

impl UploaderShared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere must not stop uploads or retention.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The counters now.
    pub(crate) fn stats(&self) -> PushStats {
        // Relaxed: statistics, read together with the state below only for display.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let state = self.state();
        PushStats {
            chunks_posted: get(&self.chunks_posted),
            uploads: get(&self.uploads),
            bytes_sent: get(&self.bytes_sent),
            jfr_bytes: get(&self.jfr_bytes),
            retries: get(&self.retries),
            rejected: get(&self.rejected),
            chunks_lost: get(&self.chunks_lost),
            bytes_lost: get(&self.bytes_lost),
            chunks_without_profile: get(&self.chunks_without_profile),
            pending: get(&self.pending),
            last_error: state.last_error.clone(),
            stopped: state.stopped.clone(),
        }
    }

    /// Retention (under L): is the finished chunk `path` still to be posted (or being posted)?
    pub(crate) fn is_unposted(&self, path: &Path) -> bool {
        chunk_key(path).is_some_and(|key| !self.state().done.contains(key))
    }

    /// Retention deleted the unposted chunk `path` (`size` bytes): it is lost for the server,
    /// unless the uploader already holds its bytes and posts them all.
    pub(crate) fn note_deleted_unposted(&self, path: &Path, size: u64) {
        if let Some(key) = chunk_key(path) {
            self.lose(key, size);
        }
    }

    /// Counts `key` as lost once.
    fn lose(&self, key: &str, size: u64) -> bool {
        let mut state = self.state();
        if state.done.contains(key) || state.lost.contains_key(key) {
            return false;
        }
        state.lost.insert(key.to_owned(), size);
        drop(state);
        // Relaxed: statistics.
        self.chunks_lost.fetch_add(1, Ordering::Relaxed);
        self.bytes_lost.fetch_add(size, Ordering::Relaxed);
        true
    }

    /// Every upload of `key` was posted: if retention had deleted its file meanwhile, it is not
    /// lost after all.
    fn posted_in_full(&self, key: &str) {
        let mut state = self.state();
        state.done.insert(key.to_owned());
        if let Some(size) = state.lost.remove(key) {
            drop(state);
            // Relaxed: statistics (they go back only in this rare race).
            self.chunks_lost.fetch_sub(1, Ordering::Relaxed);
            self.bytes_lost.fetch_sub(size, Ordering::Relaxed);
        }
    }

    /// A chunk finished: look soon.
    pub(crate) fn notify(&self) {
        self.state().wake = true;
        self.cond.notify_all();
    }

    /// Sleeps up to `d` or until notified; false when the uploader must stop now.
    fn wait(&self, d: Duration, wake_on_chunk: bool) -> bool {
        let deadline = std::time::Instant::now() + d;
        let mut state = self.state();
        loop {
            if state.abort {
                return false;
            }
            if wake_on_chunk && (state.wake || state.draining) {
                state.wake = false;
                return true;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return true;
            }
            state = self.cond.wait_timeout(state, deadline - now).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn aborted(&self) -> bool {
        self.state().abort
    }

    fn mark_done(&self, key: &str) {
        self.state().done.insert(key.to_owned());
    }

    fn set_error(&self, error: Option<String>) {
        let mut state = self.state();
        if error.is_some() {
            state.last_error = error;
        }
    }
}

/// A finished chunk found on disk.
#[derive(Debug, Clone)]
struct Found {
    dir: PathBuf,
    key: String,
    path: PathBuf,
    /// Offset of the chunk in a multi-chunk file (None: the file is one chunk).
    offset: Option<u64>,
    start_nanos: i64,
    is_final: bool,
    size: u64,
}

/// What to do after a chunk.
enum Flow {
    Next,
    /// Stop uploading: aborted, the server refuses everything, or retries ran out.
    Stop,
}

/// The uploader itself.
pub(crate) struct Uploader {
    target: PushTarget,
    client: Client,
    shared: Arc<UploaderShared>,
    markers: HashMap<PathBuf, Marker>,
    on_event: Box<dyn FnMut(&PushEvent<'_>) + Send>,
    /// Failed attempts of the current failure streak.
    failing: u64,
    /// Attempts per upload at most (None: forever).
    max_attempts: Option<u64>,
    gave_up: Option<String>,
}

impl Uploader {
    pub(crate) fn new(
        target: PushTarget,
        shared: Arc<UploaderShared>,
        max_attempts: Option<u64>,
        on_event: Box<dyn FnMut(&PushEvent<'_>) + Send>,
    ) -> Uploader {
        Uploader {
            client: Client::new(&target),
            target,
            shared,
            markers: HashMap::new(),
            on_event,
            failing: 0,
            max_attempts,
            gave_up: None,
        }
    }

    fn marker(&mut self, dir: &Path) -> io::Result<&mut Marker> {
        if !self.markers.contains_key(dir) {
            let mut marker = Marker::open(dir, &self.target.marker_id())?;
            // Keep the file short: drop entries of chunks retention deleted long ago.
            let _ = marker.compact(|stem| {
                dir.join(format!("{stem}.jfr")).exists()
                    || dir.join(format!("{stem}.jfr.zst")).exists()
                    || dir.join(stem).exists()
            });
            self.markers.insert(dir.to_owned(), marker);
        }
        Ok(self.markers.get_mut(dir).expect("inserted above"))
    }

    /// Posts every unposted finished chunk of `found` in order. Returns false to stop.
    fn push_all(&mut self, found: &[Found]) -> bool {
        let mut pending = 0u64;
        for f in found {
            match self.marker(&f.dir) {
                Ok(m) if m.is_done(&f.key) => {
                    self.shared.mark_done(&f.key);
                    continue;
                }
                Ok(_) => pending += 1,
                Err(e) => {
                    let error = format!("cannot keep the pushed-chunks marker in {}: {e}", f.dir.display());
                    self.refuse(&error);
                    return false;
                }
            }
        }
        // Relaxed: statistics.
        self.shared.pending.store(pending, Ordering::Relaxed);
        for f in found {
            if self.marker(&f.dir).is_ok_and(|m| m.is_done(&f.key)) {
                continue;
            }
            if let Flow::Stop = self.push_chunk(f) {
                return false;
            }
            pending = pending.saturating_sub(1);
            self.shared.pending.store(pending, Ordering::Relaxed);
        }
        true
    }

    fn push_chunk(&mut self, f: &Found) -> Flow {
        let bytes = match load(f) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Retention took it (and counted it) before we got to it.
                if self.shared.lose(&f.key, f.size) {
                    (self.on_event)(&PushEvent::Lost { chunk: &f.key });
                }
                return Flow::Next;
            }
            Err(e) => return self.skip_unreadable(f, &e.to_string()),
        };
        let plan = match plan::plan(bytes, &self.target.limits) {
            Ok(p) => p,
            Err(e) => return self.skip_unreadable(f, &e.to_string()),
        };
        if plan.uploads.is_empty() {
            if let Err(e) = self.record(f, &f.key, "no-profile-data") {
                return self.marker_failed(f, e);
            }
            self.shared.chunks_without_profile.fetch_add(1, Ordering::Relaxed);
            self.shared.mark_done(&f.key);
            (self.on_event)(&PushEvent::NothingToPost { chunk: &f.key });
            return Flow::Next;
        }
        let parts = plan.uploads.len();
        let mut all_posted = true;
        for (i, upload) in plan.uploads.iter().enumerate() {
            let key =
                if parts == 1 && upload.whole_chunk { f.key.clone() } else { format!("{}#{}/{parts}", f.key, i + 1) };
            if self.marker(&f.dir).is_ok_and(|m| m.is_done(&key)) {
                continue;
            }
            match self.post(f, &key, upload, i + 1, parts) {
                Some(true) => {}
                Some(false) => all_posted = false,
                None => return Flow::Stop,
            }
        }
        if parts > 1 || !plan.uploads[0].whole_chunk {
            if let Err(e) = self.record(f, &f.key, if all_posted { "posted-in-parts" } else { "partly-rejected" }) {
                return self.marker_failed(f, e);
            }
        }
        if all_posted {
            self.shared.chunks_posted.fetch_add(1, Ordering::Relaxed);
            self.shared.posted_in_full(&f.key);
        }
        self.shared.mark_done(&f.key);
        Flow::Next
    }

    /// Posts one upload until the server takes or rejects it. Some(true): posted; Some(false):
    /// rejected; None: stop.
    fn post(&mut self, f: &Found, key: &str, upload: &Upload, part: usize, parts: usize) -> Option<bool> {
        let request = http::request(&self.target, upload);
        let mut wait = self.target.backoff.0;
        let mut attempts = 0u64;
        loop {
            if self.shared.aborted() {
                return None;
            }
            attempts += 1;
            match self.client.send(&request) {
                Answer::Posted(status) => {
                    if let Err(e) = self.record(f, key, "posted") {
                        self.marker_failed(f, e);
                        return None;
                    }
                    // Relaxed: statistics.
                    self.shared.uploads.fetch_add(1, Ordering::Relaxed);
                    self.shared.bytes_sent.fetch_add(request.body.len() as u64, Ordering::Relaxed);
                    self.shared.jfr_bytes.fetch_add(upload.jfr.len() as u64, Ordering::Relaxed);
                    if self.failing > 0 {
                        (self.on_event)(&PushEvent::Recovered { retries: self.failing });
                        self.failing = 0;
                    }
                    (self.on_event)(&PushEvent::Posted {
                        chunk: &f.key,
                        part,
                        parts,
                        jfr_bytes: upload.jfr.len(),
                        body_bytes: request.body.len(),
                        samples: upload.profile_events,
                        sample_rate: upload.sample_rate,
                        status,
                    });
                    return Some(true);
                }
                Answer::Rejected(status, error) => {
                    if let Err(e) = self.record(f, key, &format!("rejected-{status}")) {
                        self.marker_failed(f, e);
                        return None;
                    }
                    self.shared.rejected.fetch_add(1, Ordering::Relaxed);
                    let error = format!("{}: {error}", self.target.url);
                    self.shared.set_error(Some(error.clone()));
                    (self.on_event)(&PushEvent::Rejected { chunk: &f.key, part, parts, error: &error });
                    return Some(false);
                }
                Answer::Refused(_, error) => {
                    self.refuse(&format!("{}: {error}", self.target.url));
                    return None;
                }
                Answer::Retry(error) => {
                    self.shared.retries.fetch_add(1, Ordering::Relaxed);
                    let error = format!("{}: {error}", self.target.url);
                    self.shared.set_error(Some(error.clone()));
                    if self.failing == 0 {
                        (self.on_event)(&PushEvent::Failing { chunk: &f.key, error: &error });
                    }
                    self.failing += 1;
                    if self.max_attempts.is_some_and(|max| attempts >= max) {
                        self.gave_up = Some(format!("{error} (after {attempts} attempts)"));
                        return None;
                    }
                    if !self.shared.wait(jitter(wait), false) {
                        return None;
                    }
                    wait = (wait * 2).min(self.target.backoff.1);
                }
            }
        }
    }

    fn record(&mut self, f: &Found, key: &str, outcome: &str) -> io::Result<()> {
        self.marker(&f.dir)?.record(key, outcome)
    }

    fn marker_failed(&mut self, f: &Found, e: io::Error) -> Flow {
        self.refuse(&format!("cannot write the pushed-chunks marker in {}: {e}", f.dir.display()));
        Flow::Stop
    }

    fn skip_unreadable(&mut self, f: &Found, error: &str) -> Flow {
        if let Err(e) = self.record(f, &f.key, "unreadable") {
            return self.marker_failed(f, e);
        }
        self.shared.mark_done(&f.key);
        let error = format!("{}: {error}", f.path.display());
        self.shared.set_error(Some(error.clone()));
        (self.on_event)(&PushEvent::Unreadable { chunk: &f.key, error: &error });
        Flow::Next
    }

    fn refuse(&mut self, error: &str) {
        let mut state = self.shared.state();
        state.stopped = Some(error.to_owned());
        state.last_error = Some(error.to_owned());
        drop(state);
        (self.on_event)(&PushEvent::Refused { error });
    }

    fn stopped(&self) -> Option<String> {
        self.shared.state().stopped.clone().or_else(|| self.gave_up.clone())
    }
}

/// ±25 % so that a fleet restarted at once does not retry in lockstep.
fn jitter(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |t| t.subsec_nanos());
    let factor = 0.75 + f64::from(nanos % 1000) / 2000.0;
    d.mul_f64(factor)
}

/// The finished chunks of the recording directory `dir`, in recording order.
fn scan_recording(dir: &Path) -> io::Result<Vec<Found>> {
    let mut found: Vec<Found> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let path = entry.path();
        let Some(key) = chunk_key(&path).filter(|k| !k.starts_with('.')).map(str::to_owned) else { continue };
        let Ok(header) = layout::read_chunk_header(&path) else { continue };
        // Only finished chunks: the live one is posted once it is finished.
        if !header.is_finished() || header.metadata_offset == 0 {
            continue;
        }
        // A chunk being compressed is there twice for a moment.
        if found.iter().any(|f| f.key == key) {
            continue;
        }
        found.push(Found {
            dir: dir.to_owned(),
            key,
            path,
            offset: None,
            start_nanos: header.start_nanos,
            is_final: header.is_final(),
            size: header.chunk_size as u64,
        });
    }
    found.sort_by(|a, b| (a.start_nanos, &a.key).cmp(&(b.start_nanos, &b.key)));
    Ok(found)
}

/// The finished chunks of a `.jfr` file (chunks back to back; zstd-compressed files too).
fn scan_file(path: &Path) -> io::Result<Vec<Found>> {
    let bytes = layout::chunk_bytes(std::fs::read(path)?, path)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_owned();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("chunk").replace([' ', '#', '@'], "_");
    let mut out = Vec::new();
    let mut offset = 0usize;
    while offset + HEADER_SIZE <= bytes.len() {
        let header = ChunkHeader::parse(&bytes[offset..], offset as u64)
            .and_then(|h| h.validate((bytes.len() - offset) as u64, offset as u64).map(|()| h))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display())))?;
        if header.is_finished() {
            out.push(Found {
                dir: dir.clone(),
                key: format!("{name}@{offset}"),
                path: path.to_owned(),
                offset: Some(offset as u64),
                start_nanos: header.start_nanos,
                is_final: header.is_final(),
                size: header.chunk_size as u64,
            });
        } else {
            break;
        }
        offset += header.chunk_size as usize;
    }
    if out.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("{}: no finished chunk", path.display())));
    }
    Ok(out)
}

/// The chunk's bytes (exactly one chunk).
fn load(f: &Found) -> io::Result<Bytes> {
    let bytes = layout::read_finished_chunk(&f.path)?;
    let start = f.offset.unwrap_or(0) as usize;
    let end = start.saturating_add(f.size as usize);
    if end > bytes.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the chunk is shorter than its header says"));
    }
    Ok(Bytes::from(bytes).slice(start..end))
}

/// Is `dir` a recording directory (chunk files in it)?
fn has_chunk_files(dir: &Path) -> io::Result<bool> {
    Ok(layout::chunk_files(dir)?.iter().any(|p| chunk_key(p).is_some_and(|k| !k.starts_with('.'))))
}

/// The recording directories under `path`: itself if it holds chunk files, else its recording
/// subdirectories in name (time) order.
fn recording_dirs(path: &Path) -> io::Result<Vec<PathBuf>> {
    if has_chunk_files(path)? {
        return Ok(vec![path.to_owned()]);
    }
    Ok(layout::recording_dirs(path)?.into_iter().map(|r| r.path).collect())
}

/// How [`push_path`] runs.
#[derive(Debug, Clone, Copy, Default)]
pub struct PushOptions {
    /// Keep watching the directory and post every chunk as it finishes. A recording directory is
    /// followed until its recording's final chunk is posted; a base directory until interrupted.
    pub follow: bool,
    /// Attempts per upload before giving up (None: retry forever). Chunks not posted stay for the
    /// next run.
    pub max_attempts: Option<u64>,
}

/// Why [`push_path`] ended early.
#[derive(Debug)]
#[non_exhaustive]
pub enum PushError {
    /// The target's settings are wrong.
    InvalidTarget(String),
    /// The path cannot be read.
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Uploads stopped: the server refuses them (401, 403, 404, a redirect), the marker cannot be
    /// written, or retries ran out. What was posted before is recorded; the rest stays.
    Stopped {
        /// Why.
        reason: String,
        /// What was done before.
        stats: Box<PushStats>,
    },
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::InvalidTarget(e) => write!(f, "invalid push target: {e}"),
            PushError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            PushError::Stopped { reason, stats } => write!(
                f,
                "uploads stopped: {reason} ({} uploads posted before; unposted chunks stay and are posted by the next run)",
                stats.uploads
            ),
        }
    }
}

impl std::error::Error for PushError {}

/// Posts the finished chunks of `path` (a `.jfr` file, a recording directory, or a base directory
/// of recordings) to `target`, once each and in order, as [`crate::RecorderBuilder::push`] does
/// from inside a process; `on_event` hears about each upload. Returns what was done.
pub fn push_path(
    target: &PushTarget,
    path: &Path,
    options: PushOptions,
    on_event: impl FnMut(&PushEvent<'_>) + Send + 'static,
) -> Result<PushStats, PushError> {
    target.validate().map_err(PushError::InvalidTarget)?;
    let io_err = |source| PushError::Io { path: path.to_owned(), source };
    let meta = std::fs::metadata(path).map_err(io_err)?;
    let shared = Arc::new(UploaderShared::default());
    let mut uploader = Uploader::new(target.clone(), Arc::clone(&shared), options.max_attempts, Box::new(on_event));
    let stopped = |uploader: &Uploader| -> Result<PushStats, PushError> {
        match uploader.stopped() {
            Some(reason) => Err(PushError::Stopped { reason, stats: Box::new(shared.stats()) }),
            None => Ok(shared.stats()),
        }
    };
    if !meta.is_dir() {
        if options.follow {
            return Err(io_err(io::Error::new(io::ErrorKind::InvalidInput, "--follow needs a directory")));
        }
        let found = scan_file(path).map_err(io_err)?;
        uploader.push_all(&found);
        return stopped(&uploader);
    }
    let single = has_chunk_files(path).map_err(io_err)?;
    loop {
        let mut found = Vec::new();
        for dir in recording_dirs(path).map_err(io_err)? {
            match scan_recording(&dir) {
                Ok(f) => found.extend(f),
                // A recording directory removed meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(PushError::Io { path: dir, source: e }),
            }
        }
        found.sort_by(|a, b| (a.start_nanos, &a.key).cmp(&(b.start_nanos, &b.key)));
        if !found.is_empty() && !uploader.push_all(&found) {
            return stopped(&uploader);
        }
        if !options.follow {
            if found.is_empty() {
                return Err(io_err(io::Error::new(
                    io::ErrorKind::NotFound,
                    "no finished chunk files here (a chunk is posted once it is finished)",
                )));
            }
            return stopped(&uploader);
        }
        if single && found.iter().any(|f| f.is_final) {
            return stopped(&uploader);
        }
        shared.wait(target.poll_interval, false);
    }
}

/// The uploader thread of a recording process.
pub(crate) struct Handle {
    shared: Arc<UploaderShared>,
    thread: Option<std::thread::JoinHandle<()>>,
    grace: Duration,
    /// The process that started the thread: a forked child has no uploader thread to wait for.
    pid: u32,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("push::Handle").field("grace", &self.grace).finish_non_exhaustive()
    }
}

/// Starts the uploader thread for the recording directory `dir`. `on_start` runs first on the new
/// thread (the recorder uses it to keep its own threads out of the CPU samples).
pub(crate) fn start(
    target: PushTarget,
    dir: PathBuf,
    shared: Arc<UploaderShared>,
    on_start: Box<dyn FnOnce() + Send>,
) -> io::Result<Handle> {
    let grace = target.stop_grace;
    let poll = target.poll_interval;
    let thread_shared = Arc::clone(&shared);
    let mut reported: HashSet<&'static str> = HashSet::new();
    let url = target.url.clone();
    // A recording process reports failures on stderr, once per kind, never each retry.
    let on_event = move |e: &PushEvent<'_>| match e {
        PushEvent::Failing { error, .. } if reported.insert("failing") => {
            eprintln!("recorder: push to Pyroscope failing ({error}); retrying with backoff, chunks stay on disk");
        }
        PushEvent::Recovered { retries } => {
            reported.remove("failing");
            eprintln!("recorder: push to {url} works again after {retries} failed attempts");
        }
        PushEvent::Rejected { chunk, error, .. } => eprintln!("recorder: push: {url} rejected {chunk}: {error}"),
        PushEvent::Refused { error } => eprintln!("recorder: push stopped: {error}; chunks stay on disk"),
        PushEvent::Unreadable { chunk, error } => eprintln!("recorder: push: chunk {chunk} skipped: {error}"),
        PushEvent::Lost { chunk } if reported.insert("lost") => {
            eprintln!("recorder: push: chunk {chunk} was deleted (retention) before it was posted; counted as lost")
        }
        _ => {}
    };
    let mut uploader = Uploader::new(target, Arc::clone(&shared), None, Box::new(on_event));
    let thread = crate::own_thread::spawn("recorder-push", move || {
        on_start();
        loop {
            let draining = thread_shared.state().draining;
            let keep_going = match scan_recording(&dir) {
                Ok(found) => uploader.push_all(&found),
                Err(e) => {
                    thread_shared.set_error(Some(format!("{}: {e}", dir.display())));
                    true
                }
            };
            if !keep_going || draining || !thread_shared.wait(poll, true) {
                break;
            }
        }
        let mut state = thread_shared.state();
        state.exited = true;
        drop(state);
        thread_shared.cond.notify_all();
    })?;
    Ok(Handle { shared, thread: Some(thread), grace, pid: std::process::id() })
}

impl Handle {
    /// The uploader's counters.
    pub(crate) fn stats(&self) -> PushStats {
        self.shared.stats()
    }

    /// The recording finished its last chunk: post what is left within the grace period, then
    /// stop. Returns without waiting longer than that; an upload still running then is abandoned
    /// (its thread ends at its request timeout) and its chunk stays on disk.
    pub(crate) fn finish(&mut self) {
        if std::process::id() != self.pid {
            // A forked child's copy: the thread lives in the parent only.
            std::mem::forget(self.thread.take());
            return;
        }
        {
            let mut state = self.shared.state();
            state.draining = true;
        }
        self.shared.cond.notify_all();
        let deadline = std::time::Instant::now() + self.grace;
        let mut state = self.shared.state();
        while !state.exited {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            state = self
                .shared
                .cond
                .wait_timeout(state, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        let exited = state.exited;
        state.abort = true;
        drop(state);
        self.shared.cond.notify_all();
        if let Some(thread) = self.thread.take() {
            if exited {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.finish();
        }
    }
}
