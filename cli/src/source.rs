//! Where chunks come from: a `.jfr` file (chunks back to back) or a directory of chunk files, the
//! JDK repository layout included (`<dir>/<yyyy_MM_dd_HH_mm_ss>_<pid>/*.jfr`).
//!
//! Files are memory-mapped and handed to `jfr_format` as `Bytes` that own the mapping, so events
//! and strings borrow the file (zero-copy). Damage does not stop loading: every chunk that could
//! be read before it is kept, and the damage is kept as a one-line message naming the file, the
//! byte offset and the problem.
//!
//! Files compressed with zstd (`.jfr.zst`, recognized by the zstd magic `28 b5 2f fd`, whatever
//! their name) are decompressed into memory first, transparently; in a directory, `*.jfr.zst`
//! chunk files are read along with `*.jfr` ones. A truncated or corrupt `.zst` keeps what could be
//! decompressed and reports the rest as damage.

use anyhow::Context;
use bytes::Bytes;
use jfr_format::header::HEADER_SIZE;
use jfr_format::Chunk;
use recorder::repository::layout;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A chunk and the file it came from.
#[derive(Debug)]
pub struct SourceChunk {
    /// The file holding the chunk.
    pub file: Arc<PathBuf>,
    /// The parsed chunk.
    pub chunk: Chunk,
}

/// A problem in the input: the file and what went wrong there (with the byte offset when the
/// problem is in the bytes).
#[derive(Debug)]
pub struct Damage {
    /// The file.
    pub file: Arc<PathBuf>,
    /// The problem.
    pub problem: anyhow::Error,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), crate::error_text(&self.problem))
    }
}

impl Damage {
    /// Damage found while decoding the chunk `chunk` of `file`.
    pub fn in_chunk(file: &Arc<PathBuf>, err: jfr_format::Error) -> Damage {
        Damage { file: Arc::clone(file), problem: anyhow::Error::new(err) }
    }
}

/// Everything readable in a path, in recording order, and the damage found.
#[derive(Debug, Default)]
pub struct Source {
    /// Chunks ordered by their header's `startNanos` (file order within a file).
    pub chunks: Vec<SourceChunk>,
    /// Problems, one per file at most, in the order found.
    pub damage: Vec<Damage>,
}

impl Source {
    /// Reports every damage on stderr (one line each).
    pub fn report_damage(&self) {
        for d in &self.damage {
            eprintln!("error: {d}");
        }
    }
}

/// Which recordings of a directory a command reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recordings {
    /// The newest recording (the others are named on stderr), as the JDK's tools and our consumer
    /// follow the newest recording of a repository.
    Newest,
    /// Every recording, merged in start-time order (`--all`).
    All,
}

/// Loads `path`: a file of chunks, or a directory of chunk files (a recording directory, or a
/// base directory holding recordings: `which` says which of them). A path that cannot be opened
/// at all is an error; damage inside files is collected in [`Source::damage`].
pub fn load(path: &Path, which: Recordings) -> anyhow::Result<Source> {
    let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
    let mut source = Source::default();
    if meta.is_dir() {
        let files = chunk_files(path, which)?;
        for file in files {
            load_file(&file, true, &mut source);
        }
        // Recording order is the chunks' start time (the JDK's RepositoryFiles does the same);
        // the sort is stable, so chunks of one file keep their order.
        source.chunks.sort_by_key(|c| c.chunk.header().start_nanos);
        // A chunk being compressed is briefly there twice (`x.jfr.zst` is complete before `x.jfr`
        // is removed): identical chunks count once.
        source.chunks.dedup_by(|b, a| {
            let (ha, hb) = (a.chunk.header(), b.chunk.header());
            ha.start_nanos == hb.start_nanos && ha.chunk_size == hb.chunk_size && a.chunk.bytes() == b.chunk.bytes()
        });
        if source.chunks.is_empty() && source.damage.is_empty() {
            anyhow::bail!(
                "{}: no readable .jfr chunk files in this directory (a live repository may not have published one yet)",
                path.display()
            );
        }
    } else {
        load_file(path, false, &mut source);
    }
    Ok(source)
}

/// The chunk files to read in `dir`: those of its newest recording, or of all of them. When the
/// directory holds several recordings and only the newest is read, a note on stderr names the
/// others and `--all`.
pub fn chunk_files(dir: &Path, which: Recordings) -> anyhow::Result<Vec<PathBuf>> {
    let mut recordings = recordings_in(dir)?;
    if which == Recordings::All || recordings.len() < 2 {
        let mut files: Vec<PathBuf> = recordings.into_iter().flat_map(|r| r.files).collect();
        files.sort();
        return Ok(files);
    }
    order_by_start(&mut recordings);
    let newest = recordings.len() - 1;
    let name = |r: &RecordingDir| {
        if r.dir == dir {
            format!("{} (its own chunk files)", dir.display())
        } else {
            r.dir.file_name().map_or_else(|| r.dir.display().to_string(), |n| n.to_string_lossy().into_owned())
        }
    };
    let others: Vec<String> = recordings[..newest].iter().rev().map(name).collect();
    eprintln!(
        "note: {} holds {} recordings; reading the newest, {}. --all reads them all. The others: {}",
        dir.display(),
        recordings.len(),
        name(&recordings[newest]),
        others.join(", ")
    );
    Ok(recordings.into_iter().nth(newest).map(|r| r.files).unwrap_or_default())
}

/// The recording directory `dir` stands for: `dir` itself, or its newest recording when it is a
/// base directory holding several (see [`chunk_files`]).
pub fn recording_dir(dir: &Path, which: Recordings) -> anyhow::Result<PathBuf> {
    let mut recordings = recordings_in(dir)?;
    if which == Recordings::All || recordings.len() < 2 {
        return Ok(dir.to_path_buf());
    }
    chunk_files(dir, which)?; // the note
    order_by_start(&mut recordings);
    Ok(recordings.last().map_or_else(|| dir.to_path_buf(), |r| r.dir.clone()))
}

/// One recording: a directory and its chunk files.
#[derive(Debug)]
struct RecordingDir {
    dir: PathBuf,
    files: Vec<PathBuf>,
    /// The earliest chunk start found in its headers (`i64::MIN` when none is readable).
    start_ns: i64,
}

/// The recordings in `dir`: the directory's own chunk files, and each JDK-named recording
/// subdirectory with chunk files.
fn recordings_in(dir: &Path) -> anyhow::Result<Vec<RecordingDir>> {
    let context = |d: &Path| format!("{}", d.display());
    let own = layout::chunk_files(dir).with_context(|| context(dir))?;
    let mut recordings = Vec::new();
    if !own.is_empty() {
        recordings.push(RecordingDir { dir: dir.to_path_buf(), files: own, start_ns: 0 });
    }
    for sub in layout::recording_dirs(dir).with_context(|| context(dir))? {
        let files = layout::chunk_files(&sub.path).with_context(|| context(&sub.path))?;
        if !files.is_empty() {
            recordings.push(RecordingDir { dir: sub.path, files, start_ns: 0 });
        }
    }
    Ok(recordings)
}

/// Oldest first: a recording's age is its first chunk's start (from the headers).
fn order_by_start(recordings: &mut [RecordingDir]) {
    for r in recordings.iter_mut() {
        r.start_ns = r.files.iter().filter_map(|f| header_start(f)).min().unwrap_or(i64::MIN);
    }
    recordings.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then_with(|| a.dir.cmp(&b.dir)));
}

/// The start time in the first chunk header of a (possibly zstd-compressed) chunk file.
fn header_start(path: &Path) -> Option<i64> {
    layout::read_chunk_header(path).ok().map(|h| h.start_nanos)
}

/// The bytes of a file, decompressed if it is zstd-compressed. The error, if any, comes with what
/// could be read before it (a truncated `.zst` still yields its first chunks).
pub fn read_file_bytes(path: &Path) -> Result<Bytes, (Bytes, anyhow::Error)> {
    let data = map_file(path).map_err(|e| (Bytes::new(), anyhow::Error::new(e)))?;
    if !layout::is_zstd(&data) {
        return Ok(data);
    }
    let mut out = Vec::with_capacity(data.len() * 4);
    let result =
        zstd::stream::read::Decoder::new(&data[..]).and_then(|mut d| std::io::Read::read_to_end(&mut d, &mut out));
    match result {
        Ok(_) => Ok(Bytes::from(out)),
        Err(e) => Err((
            Bytes::from(out),
            anyhow::anyhow!("zstd-compressed file: {e} (only the part before this could be decompressed)"),
        )),
    }
}

/// Maps a file into `Bytes` that own the mapping.
fn map_file(path: &Path) -> std::io::Result<Bytes> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(Bytes::new());
    }
    // SAFETY: the mapping is read-only and private to this process. Another process may append to
    // the file (a live repository chunk grows); we only read the bytes that existed when we
    // mapped it, up to the published chunk size in each header. A process that truncates the
    // file while we read it could make a read fault (SIGBUS); JFR writers never truncate.
    match unsafe { memmap2::Mmap::map(&file) } {
        Ok(map) => Ok(Bytes::from_owner(map)),
        // Files that cannot be mapped (pipes, some special file systems) are read instead.
        Err(_) => std::fs::read(path).map(Bytes::from),
    }
}

/// How often a chunk whose header is being rewritten (guard byte set) is read again, and the pause
/// between tries. A writer holds the guard for a few microseconds.
const LOCKED_RETRIES: u32 = 50;
const LOCKED_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

fn load_file(path: &Path, in_directory: bool, source: &mut Source) {
    for _ in 0..LOCKED_RETRIES {
        let mut attempt = Source::default();
        load_file_once(path, in_directory, &mut attempt);
        let locked = attempt.damage.iter().any(|d| {
            matches!(d.problem.downcast_ref::<jfr_format::Error>(), Some(jfr_format::Error::HeaderLocked { .. }))
        });
        if !locked {
            source.chunks.extend(attempt.chunks);
            source.damage.extend(attempt.damage);
            return;
        }
        std::thread::sleep(LOCKED_PAUSE);
    }
    load_file_once(path, in_directory, source);
}

fn load_file_once(path: &Path, in_directory: bool, source: &mut Source) {
    let file = Arc::new(path.to_path_buf());
    let (data, zstd_damage) = match read_file_bytes(path) {
        Ok(d) => (d, None),
        Err((d, e)) if !d.is_empty() => (d, Some(e)),
        Err((_, e)) => {
            source.damage.push(Damage { file, problem: e });
            return;
        }
    };
    let damage_before = source.damage.len();
    load_bytes(file, data, in_directory, source);
    if let Some(problem) = zstd_damage {
        // The decompressed part ends mid-chunk: the cause is the compressed file, said once.
        source.damage.truncate(damage_before);
        source.damage.push(Damage { file: Arc::new(path.to_path_buf()), problem });
    }
}

fn load_bytes(file: Arc<PathBuf>, data: Bytes, in_directory: bool, source: &mut Source) {
    if data.len() < HEADER_SIZE {
        // The JDK's repository reader skips files too short for a header (a chunk just created).
        if in_directory {
            return;
        }
        source.damage.push(Damage {
            file,
            problem: if data.is_empty() {
                anyhow::anyhow!("at offset 0x0: empty file, not a JFR recording")
            } else {
                anyhow::Error::new(jfr_format::Error::UnexpectedEof {
                    offset: data.len() as u64,
                    expected: "a 68-byte chunk header",
                })
            },
        });
        return;
    }
    let mut read_any = false;
    let in_progress = |offset: u64| {
        data.get(offset as usize..)
            .and_then(|rest| jfr_format::ChunkHeader::parse(rest, offset).ok())
            .is_some_and(|h| !h.is_finished())
    };
    for chunk in jfr_format::chunks(data.clone()) {
        match chunk {
            Ok(chunk) => {
                read_any = true;
                source.chunks.push(SourceChunk { file: Arc::clone(&file), chunk })
            }
            // A live repository's newest chunk publishes its header before its first metadata
            // record; the JDK's repository reader skips it until it has one, and so do we.
            Err(jfr_format::Error::NoMetadata { offset }) if in_directory && !read_any && in_progress(offset) => break,
            Err(e) => {
                source.damage.push(Damage::in_chunk(&file, e));
                break;
            }
        }
    }
}

/// The event type names declared in any chunk, sorted.
pub fn known_event_types(chunks: &[SourceChunk]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut last: Option<&Arc<jfr_format::read::TypeTable>> = None;
    for c in chunks {
        let types = c.chunk.types();
        if last.is_some_and(|l| Arc::ptr_eq(l, types)) {
            continue;
        }
        last = Some(types);
        names.extend(types.classes().iter().filter(|class| class.is_event()).map(|class| class.name.clone()));
    }
    names.sort();
    names.dedup();
    names
}

/// Checks that every name in `wanted` is an event type of the recording; the error lists the known
/// types.
pub fn check_type_names(wanted: &[String], chunks: &[SourceChunk]) -> anyhow::Result<()> {
    if wanted.is_empty() {
        return Ok(());
    }
    let known = known_event_types(chunks);
    let unknown: Vec<&str> = wanted.iter().filter(|w| known.binary_search(w).is_err()).map(String::as_str).collect();
    if unknown.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "unknown event type{} {}; known types: {}",
        if unknown.len() > 1 { "s" } else { "" },
        unknown.join(", "),
        known.join(", ")
    )
}

/// The names of the recording's threads (Java and OS names), sorted.
pub fn thread_names(chunks: &[SourceChunk]) -> Vec<String> {
    let mut names = Vec::new();
    for c in chunks {
        let chunk = &c.chunk;
        let Some(thread_type) = chunk.metadata().class_by_name("java.lang.Thread").map(|t| t.id) else {
            continue;
        };
        for key in chunk.pool_keys(thread_type) {
            let value = jfr_format::Value::Ref { type_id: thread_type, key };
            if let Ok(Some(t)) = chunk.thread_info(&value) {
                names.extend(t.java_name);
                names.extend(t.os_name);
            }
        }
    }
    names.retain(|n| !n.is_empty());
    names.sort();
    names.dedup();
    names
}

/// Checks that some thread of the recording has the name `wanted`; the error lists the names.
pub fn check_thread_name(wanted: &str, chunks: &[SourceChunk]) -> anyhow::Result<()> {
    let names = thread_names(chunks);
    if names.iter().any(|n| n == wanted) {
        return Ok(());
    }
    if names.is_empty() {
        anyhow::bail!("no thread named {wanted:?}: the recording names no threads");
    }
    anyhow::bail!("no thread named {wanted:?}; threads: {}", names.join(", "))
}
