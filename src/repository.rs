//! The repository: a directory of chunk files in the JDK's layout, so that `jfr`, JMC and
//! `EventStream.openRepository` read and follow it. It creates, writes, renames and deletes the
//! chunk files; `recorder/storage.rs` drives it (and writes dump files), `compress.rs` and
//! `push/marker.rs` write files of their own.
//!
//! Layout: `<base>/<yyyy_MM_dd_HH_mm_ss>_<pid>/<yyyy_MM_dd_HH_mm_ss>[_NN].jfr`, names in local time
//! as the JVM writes them. A new chunk is written under a hidden temporary name first and renamed
//! to its `.jfr` name only once its first segment (with metadata) is published, because the JDK
//! reader spins on a chunk that has a size but no metadata (docs/jfr-format.md, "Publishing a live chunk").

use jfr_format::header::{
    publish_writes, ChunkHeader, FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, HEADER_SIZE, STATE_FINISHED,
};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

pub mod layout;

/// Local time formatted as `yyyy_MM_dd_HH_mm_ss`.
pub fn timestamp_name(epoch_nanos: i64) -> String {
    let secs = (epoch_nanos / 1_000_000_000) as libc::time_t;
    #[allow(unsafe_code)]
    // SAFETY: `tm` is a plain C struct that localtime_r fills in; both pointers are valid.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&secs, &mut tm).is_null() {
            libc::gmtime_r(&secs, &mut tm);
        }
        tm
    };
    format!(
        "{:04}_{:02}_{:02}_{:02}_{:02}_{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// The default base directory: a per-user directory under the system temporary directory.
pub fn default_base() -> PathBuf {
    #[allow(unsafe_code)]
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("recorder-{uid}"))
}

/// Creates `dir` (mode 0700) if needed and checks that it is a directory of ours we can write in.
pub fn prepare_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a directory", dir.display())));
    }
    #[allow(unsafe_code)]
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    // Root too: a directory another user owns (planted in a shared place such as /tmp) could be
    // read, replaced or filled with symlinks by that user.
    if meta.uid() != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} belongs to another user (uid {})", dir.display(), meta.uid()),
        ));
    }
    // Probe: creating a file tells about read-only file systems and permissions at once.
    let probe = dir.join(format!(".recorder-probe-{}", std::process::id()));
    File::create(&probe)?;
    std::fs::remove_file(&probe)?;
    Ok(())
}

/// The naming sequence of one recording's chunk files.
#[derive(Debug, Default, Clone)]
pub struct ChunkNames {
    base: String,
    suffix: u32,
}

impl ChunkNames {
    fn file_name(&self) -> String {
        if self.suffix == 0 {
            format!("{}.jfr", self.base)
        } else {
            format!("{}_{:02}.jfr", self.base, self.suffix)
        }
    }
}

/// One chunk file being written.
#[derive(Debug)]
pub(crate) struct ChunkFile {
    /// Held high and checked before each use (`fds/mod.rs`): reopened by its path if the host closed
    /// or replaced the number.
    file: crate::fds::HeldFile,
    temp_path: PathBuf,
    path: PathBuf,
    visible: bool,
}

impl ChunkFile {
    /// Creates the chunk file (under its temporary name) in `dir`, named after `start_nanos`.
    /// `names` keeps the names of one recording in time order: chunks that start in the same second
    /// get `_01`, `_02`, … even when retention has deleted the earlier ones.
    pub fn create(dir: &Path, start_nanos: i64, names: &mut ChunkNames) -> io::Result<ChunkFile> {
        let base = timestamp_name(start_nanos);
        if names.base == base {
            names.suffix += 1;
        } else {
            names.base = base.clone();
            names.suffix = 0;
        }
        let mut path = dir.join(names.file_name());
        while path.exists() {
            names.suffix += 1;
            path = dir.join(names.file_name());
        }
        let name = path.file_name().and_then(|s| s.to_str()).unwrap_or("chunk.jfr").to_owned();
        let temp_path = dir.join(format!(".{name}.part"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&temp_path)?;
        // Held while the chunk is live (the lock goes with the descriptor): `repair` never touches
        // a chunk another process (perhaps in another pid namespace) is still writing.
        lock(&file, false)?;
        Ok(ChunkFile { file: crate::fds::HeldFile::new(file)?, temp_path, path, visible: false })
    }

    /// The file, reopened by its path (same file, same lock) if the host closed or replaced our
    /// descriptor: the bytes written so far are in the file, so nothing is lost.
    fn file(&mut self) -> io::Result<&File> {
        if self.file.get().is_err() {
            let at = if self.visible { &self.path } else { &self.temp_path };
            let reopened =
                OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(at)?;
            if !self.file.same_file(&reopened) {
                return Err(io::Error::other(format!("{} was replaced by another file", at.display())));
            }
            lock(&reopened, false)?;
            self.file.replace(reopened)?;
        }
        self.file.get()
    }

    /// The chunk's final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `bytes` at chunk offset `offset`.
    pub fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file()?.write_all_at(bytes, offset)
    }

    /// Publishes `header` by the guard protocol, then makes the file visible under its `.jfr`
    /// name if it is not yet.
    pub fn publish(&mut self, header: &ChunkHeader) -> io::Result<()> {
        for (offset, bytes) in publish_writes(header) {
            self.file()?.write_all_at(&bytes, offset)?;
        }
        if !self.visible {
            std::fs::rename(&self.temp_path, &self.path)?;
            self.visible = true;
        }
        Ok(())
    }

    /// Cuts the file to `size` bytes (bytes of a failed write beyond the published size).
    pub fn truncate(&mut self, size: u64) -> io::Result<()> {
        self.file()?.set_len(size)
    }

    /// A second handle on the file, to read its published part without the chunk-writer lock
    /// (bytes below a published size never change; the handle keeps them readable even if the
    /// file is removed meanwhile).
    pub fn reader(&self) -> io::Result<File> {
        self.file.get()?.try_clone()
    }

    /// Deletes a chunk that never became visible.
    pub fn abandon(self) {
        if !self.visible {
            let _ = std::fs::remove_file(&self.temp_path);
        }
    }
}

/// A finished chunk file, for retention and dumps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FinishedChunk {
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its start, ns since the epoch.
    pub start_nanos: i64,
    /// Its end, ns since the epoch.
    pub end_nanos: i64,
}

/// What [`apply_retention`] deleted.
#[derive(Debug, Default)]
pub(crate) struct Retained {
    /// Paths removed.
    pub removed: Vec<PathBuf>,
    /// Chunks removed that `unposted` held back: only the size limit (the disk budget) deletes
    /// them, and only when no other chunk is left to delete.
    pub lost: Vec<FinishedChunk>,
}

/// Deletes finished chunks until the total size (including `live_size`) is at most `max_size` and
/// none ended before `oldest_end_nanos`, oldest first. Chunks for which `unposted` is true (an
/// uploader still has to post them) are kept past their age, and the size limit deletes them only
/// after every other finished chunk; those are reported in [`Retained::lost`].
///
/// The size limit never deletes the last finished chunk left (nor the live one, which is not in
/// `chunks`): when it alone, or with the live chunk, passes the limit, the repository keeps it
/// rather than the newest data being lost (late flushes make chunks grow past their rotation size;
/// the JDK's `trimToSize` keeps its last chunk too). Without uploads the last one left is the
/// newest; with them, a posted newer chunk may go before an unposted older one. The age limit deletes whatever ended before
/// it (the final chunk ends at the stop, so it never empties a stopped recording).
pub(crate) fn apply_retention(
    chunks: &mut Vec<FinishedChunk>,
    live_size: u64,
    max_size: u64,
    oldest_end_nanos: Option<i64>,
    unposted: impl Fn(&FinishedChunk) -> bool,
) -> Retained {
    let mut out = Retained::default();
    let mut total: u64 = chunks.iter().map(|c| c.size).sum::<u64>() + live_size;
    let mut i = 0;
    // Age, then size, among the chunks that may go.
    while i < chunks.len() {
        let c = &chunks[i];
        // Never the last chunk left (see above).
        let too_big = total > max_size && chunks.len() > 1;
        let too_old = oldest_end_nanos.is_some_and(|limit| c.end_nanos < limit);
        if !too_big && !too_old {
            break;
        }
        if unposted(c) {
            i += 1;
            continue;
        }
        let c = chunks.remove(i);
        total -= c.size;
        if std::fs::remove_file(&c.path).is_ok() || !c.path.exists() {
            out.removed.push(c.path);
        }
    }
    // The disk budget wins over uploads: the oldest unposted chunks go, counted as lost.
    while total > max_size && chunks.len() > 1 {
        let c = chunks.remove(0);
        total -= c.size;
        if std::fs::remove_file(&c.path).is_ok() || !c.path.exists() {
            out.removed.push(c.path.clone());
            out.lost.push(c);
        }
    }
    out
}

/// `flock` on `file`: exclusive and blocking when `try_only` is false (a fresh file nobody else
/// has), exclusive and non-blocking when true (`Ok(false)`: someone holds it).
fn lock(file: &File, try_only: bool) -> io::Result<bool> {
    let op = libc::LOCK_EX | if try_only { libc::LOCK_NB } else { 0 };
    #[allow(unsafe_code)]
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if try_only && e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        return Ok(false);
    }
    Err(e)
}

/// What [`repair`] did to a recording directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RepairReport {
    /// Files deleted: hidden `.part` files (chunks that never published their first segment),
    /// `.jfr.zst.part` files (a compression cut short) and `.jfr.zst` copies of chunks whose
    /// `.jfr` is still there (killed between the two steps of compressing a finished chunk).
    pub parts_removed: Vec<PathBuf>,
    /// Unfinished chunks cut to their published size and closed (state 0).
    pub chunks_closed: Vec<PathBuf>,
    /// The newest chunk, which now carries the final flag (if it did not already).
    pub final_chunk: Option<PathBuf>,
    /// `.jfr` files left alone because they are not a readable chunk of ours (too short, bad
    /// header, no metadata, shorter than their header says), with the reason.
    pub unreadable: Vec<(PathBuf, String)>,
    /// A chunk is locked by a live writer: nothing was changed.
    pub in_use: bool,
}

impl RepairReport {
    /// Nothing needed doing.
    pub fn is_clean(&self) -> bool {
        self.parts_removed.is_empty() && self.chunks_closed.is_empty() && self.final_chunk.is_none()
    }
}

/// Repairs the recording directory `dir` of a process that died without finishing its recording
/// (killed, crashed): makes every chunk file a complete chunk that `jfr`, JMC and a JDK
/// `EventStream` read to its end.
///
/// - Hidden `.<name>.jfr.part` files are deleted: they never published anything. So are the
///   leftovers of compressing a finished chunk (`<name>.jfr.zst.part`, and `<name>.jfr.zst` when
///   `<name>.jfr` is still there).
/// - Each `.jfr` chunk whose header is not finished (a generation, or the guard byte if the
///   process died between the header writes: the 56-byte body is one write, so it is the old or
///   the new one, both consistent) is cut to its published size — the bytes after it are a flush
///   that was written but never published — and closed: state 0, the published duration (at
///   least 1 ns).
/// - The newest chunk (largest start) gets the final flag, so a stream following the recording
///   ends; the others do not have it. (If the newest chunk is a compressed `.jfr.zst`, which is
///   never modified, no chunk gets it.)
///
/// Nothing published is lost. Files that are not readable chunks are reported and left alone. If
/// any chunk is locked by a live writer (a writer holds a `flock` on its live chunk) nothing is changed and
/// [`RepairReport::in_use`] is set. Only call this for a directory whose writer is dead; repairing
/// twice does nothing the second time.
pub fn repair(dir: &Path) -> io::Result<RepairReport> {
    let mut report = RepairReport::default();
    struct Found {
        path: PathBuf,
        file: File,
        header: ChunkHeader,
    }
    let mut found: Vec<Found> = Vec::new();
    let mut parts = Vec::new();
    let mut compressed: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        // Regular files only: never follow or touch a symlink.
        if !entry.file_type()?.is_file() {
            continue;
        }
        // `.<name>.jfr.part`: a chunk that never published; `<name>.jfr.zst.part`: a finished
        // chunk whose compression was cut short (its `.jfr` is still there).
        if (name.starts_with('.') && name.ends_with(".jfr.part")) || name.ends_with(".jfr.zst.part") {
            parts.push(path);
            continue;
        }
        if let Some(stem) = name.strip_suffix(".jfr.zst") {
            compressed.push(stem.to_owned());
            continue;
        }
        if !name.ends_with(".jfr") {
            continue;
        }
        let file =
            OpenOptions::new().read(true).write(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&path)?;
        if !lock(&file, true)? {
            report.in_use = true;
            return Ok(report);
        }
        let len = file.metadata()?.len();
        let mut bytes = [0u8; HEADER_SIZE];
        if len < HEADER_SIZE as u64 {
            report.unreadable.push((path, format!("{len} bytes, shorter than a chunk header")));
            continue;
        }
        file.read_exact_at(&mut bytes, 0)?;
        let header = match ChunkHeader::parse(&bytes, 0).and_then(|h| h.validate(len, 0).map(|()| h)) {
            Ok(h) => h,
            Err(e) => {
                report.unreadable.push((path, e.to_string()));
                continue;
            }
        };
        if header.metadata_offset == 0 {
            report.unreadable.push((path, "no metadata published".into()));
            continue;
        }
        found.push(Found { path, file, header });
    }
    for part in parts {
        std::fs::remove_file(&part)?;
        report.parts_removed.push(part);
    }
    let newest = found
        .iter()
        .enumerate()
        .max_by(|(_, a), (_, b)| (a.header.start_nanos, &a.path).cmp(&(b.header.start_nanos, &b.path)));
    let mut newest = newest.map(|(i, _)| i);
    // A chunk is briefly there twice while it is compressed (`x.jfr.zst` complete before `x.jfr`
    // is removed): keep the plain one, which the JDK reads.
    for stem in &compressed {
        if found.iter().any(|f| f.path.file_name().and_then(|n| n.to_str()) == Some(&format!("{stem}.jfr"))) {
            let zst = dir.join(format!("{stem}.jfr.zst"));
            std::fs::remove_file(&zst)?;
            report.parts_removed.push(zst);
        }
    }
    // Names are in start order within a recording: if a compressed chunk is newer than every
    // plain one (killed between rotation and the next chunk), no plain chunk is the last.
    let stem_of =
        |p: &Path| p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".jfr")).map(str::to_owned);
    if let Some(i) = newest {
        let newest_stem = stem_of(&found[i].path).unwrap_or_default();
        if compressed.iter().any(|c| *c > newest_stem && found.iter().all(|f| stem_of(&f.path).as_ref() != Some(c))) {
            newest = None;
        }
    }
    for (i, f) in found.iter().enumerate() {
        let is_newest = Some(i) == newest;
        let mut header = f.header;
        let flags = FLAG_COMPRESSED_INTS | if is_newest { FLAG_FINAL_CHUNK } else { 0 };
        if !header.is_finished() {
            f.file.set_len(header.chunk_size as u64)?;
            header.state = STATE_FINISHED;
            header.duration_nanos = header.duration_nanos.max(1);
            header.flags = (header.flags & !FLAG_FINAL_CHUNK) | flags;
            for (offset, bytes) in publish_writes(&header) {
                f.file.write_all_at(&bytes, offset)?;
            }
            report.chunks_closed.push(f.path.clone());
        } else if is_newest && !header.is_final() {
            header.flags |= FLAG_FINAL_CHUNK;
            f.file.write_all_at(&header.encode_state(), jfr_format::header::STATE_OFFSET as u64)?;
        } else {
            continue;
        }
        if is_newest {
            report.final_chunk = Some(f.path.clone());
        }
        f.file.sync_data()?;
    }
    Ok(report)
}

/// No process `pid` exists (in this pid namespace).
fn process_is_dead(pid: i32) -> bool {
    #[allow(unsafe_code)]
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid, 0) };
    r == -1 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Repairs (see [`repair`]) the recording directories `<yyyy_MM_dd_HH_mm_ss>_<pid>` in `base`
/// whose process no longer exists and that belong to the current user; directories of live
/// processes, of other users, symlinks and other names are left alone. Returns what was done
/// per directory that needed something (or failed).
pub fn repair_dead_recordings(base: &Path) -> Vec<(PathBuf, io::Result<RepairReport>)> {
    let mut out = Vec::new();
    let Ok(recordings) = layout::recording_dirs(base) else {
        return out;
    };
    #[allow(unsafe_code)]
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    for layout::RecordingDir { path, pid, metadata } in recordings {
        if metadata.uid() != uid || !process_is_dead(pid) {
            continue;
        }
        match repair(&path) {
            Ok(r) if r.is_clean() && r.unreadable.is_empty() => {}
            result => out.push((path, result)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks_in(dir: &Path, sizes: &[u64]) -> Vec<FinishedChunk> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &size)| {
                let path = dir.join(format!("c{i}.jfr"));
                std::fs::write(&path, vec![0u8; size as usize]).unwrap();
                FinishedChunk { path, size, start_nanos: i as i64 * 10, end_nanos: i as i64 * 10 + 10 }
            })
            .collect()
    }

    fn names(paths: &[PathBuf]) -> Vec<String> {
        paths.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn retention_without_uploads_deletes_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut chunks = chunks_in(dir.path(), &[10, 10, 10, 10]);
        let r = apply_retention(&mut chunks, 5, 30, None, |_| false);
        assert_eq!(names(&r.removed), ["c0.jfr", "c1.jfr"]);
        assert!(r.lost.is_empty());
        let r = apply_retention(&mut chunks, 0, 100, Some(35), |_| false);
        assert_eq!(names(&r.removed), ["c2.jfr"]);
    }

    #[test]
    fn retention_keeps_unposted_chunks_until_the_budget_forces_it() {
        let dir = tempfile::tempdir().unwrap();
        // c0 and c2 are not posted yet.
        let unposted = |c: &FinishedChunk| c.path.ends_with("c0.jfr") || c.path.ends_with("c2.jfr");
        let mut chunks = chunks_in(dir.path(), &[10, 10, 10, 10, 10]);
        // Age: every chunk is too old, but only posted ones go.
        let r = apply_retention(&mut chunks, 0, 1000, Some(1000), unposted);
        assert_eq!(names(&r.removed), ["c1.jfr", "c3.jfr", "c4.jfr"]);
        assert!(r.lost.is_empty());
        assert!(dir.path().join("c0.jfr").exists() && dir.path().join("c2.jfr").exists());

        let mut chunks = chunks_in(dir.path(), &[10, 10, 10, 10, 10]);
        // Size: every posted chunk goes before an unposted one, even a newer one.
        let r = apply_retention(&mut chunks, 0, 25, None, unposted);
        assert_eq!(names(&r.removed), ["c1.jfr", "c3.jfr", "c4.jfr"]);
        assert!(r.lost.is_empty());

        let mut chunks = chunks_in(dir.path(), &[10, 10, 10, 10, 10]);
        // The budget leaves no choice: the oldest unposted chunk (c0) goes too, reported as lost.
        let r = apply_retention(&mut chunks, 0, 15, None, unposted);
        assert_eq!(names(&r.removed), ["c1.jfr", "c3.jfr", "c4.jfr", "c0.jfr"]);
        assert_eq!(names(&r.lost.iter().map(|c| c.path.clone()).collect::<Vec<_>>()), ["c0.jfr"]);
        assert_eq!(names(&chunks.iter().map(|c| c.path.clone()).collect::<Vec<_>>()), ["c2.jfr"]);
    }
}
