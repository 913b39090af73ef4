//! The repository: a directory of chunk files in the JDK's layout, so that `jfr`, JMC and
//! `EventStream.openRepository` read and follow it. This is the only module of the recorder that
//! writes files.
//!
//! Layout: `<base>/<yyyy_MM_dd_HH_mm_ss>_<pid>/<yyyy_MM_dd_HH_mm_ss>[_NN].jfr`, names in local time
//! as the JVM writes them. A new chunk is written under a hidden temporary name first and renamed
//! to its `.jfr` name only once its first segment (with metadata) is published, because the JDK
//! reader spins on a chunk that has a size but no metadata (jfr-format.md §6.4, pitfall P14).

use jfr_format::header::{publish_writes, ChunkHeader};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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
    if meta.uid() != uid && uid != 0 {
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

/// One chunk file being written.
#[derive(Debug)]
pub struct ChunkFile {
    file: File,
    temp_path: PathBuf,
    path: PathBuf,
    visible: bool,
}

impl ChunkFile {
    /// Creates the chunk file (under its temporary name) in `dir`, named after `start_nanos`.
    pub fn create(dir: &Path, start_nanos: i64) -> io::Result<ChunkFile> {
        let base = timestamp_name(start_nanos);
        let mut path = dir.join(format!("{base}.jfr"));
        let mut n = 1;
        while path.exists() {
            path = dir.join(format!("{base}_{n:02}.jfr"));
            n += 1;
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
        Ok(ChunkFile { file, temp_path, path, visible: false })
    }

    /// The chunk's final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `bytes` at chunk offset `offset`.
    pub fn write_at(&self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, offset)
    }

    /// Publishes `header` by the guard protocol, then makes the file visible under its `.jfr`
    /// name if it is not yet.
    pub fn publish(&mut self, header: &ChunkHeader) -> io::Result<()> {
        for (offset, bytes) in publish_writes(header) {
            self.file.write_all_at(&bytes, offset)?;
        }
        if !self.visible {
            std::fs::rename(&self.temp_path, &self.path)?;
            self.visible = true;
        }
        Ok(())
    }

    /// Cuts the file to `size` bytes (bytes of a failed write beyond the published size).
    pub fn truncate(&self, size: u64) -> io::Result<()> {
        self.file.set_len(size)
    }

    /// Reads back the published part of the chunk (for dumps).
    pub fn read_published(&self, size: u64) -> io::Result<Vec<u8>> {
        let mut out = vec![0u8; size as usize];
        self.file.read_exact_at(&mut out, 0)?;
        Ok(out)
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
pub struct FinishedChunk {
    /// Its path.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Its start, ns since the epoch.
    pub start_nanos: i64,
    /// Its end, ns since the epoch.
    pub end_nanos: i64,
}

/// Deletes the oldest finished chunks until the total size (including `live_size`) is at most
/// `max_size` and none ended before `oldest_end_nanos`. Returns the paths removed.
pub fn apply_retention(
    chunks: &mut Vec<FinishedChunk>,
    live_size: u64,
    max_size: u64,
    oldest_end_nanos: Option<i64>,
) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let mut total: u64 = chunks.iter().map(|c| c.size).sum::<u64>() + live_size;
    while let Some(first) = chunks.first() {
        let too_big = total > max_size;
        let too_old = oldest_end_nanos.is_some_and(|limit| first.end_nanos < limit);
        if !too_big && !too_old {
            break;
        }
        let first = chunks.remove(0);
        total -= first.size;
        if std::fs::remove_file(&first.path).is_ok() || !first.path.exists() {
            removed.push(first.path);
        }
    }
    removed
}
