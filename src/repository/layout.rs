//! The repository on disk, for its writer and its readers alike (the recorder, `consumer`, `push`
//! and the CLI): the names of recording directories and chunk files, their listing, how a
//! compressed chunk file is recognized and read, and how a file is replaced whole.
//!
//! Layout: `<base>/<yyyy_MM_dd_HH_mm_ss>_<pid>[_<n>]/<yyyy_MM_dd_HH_mm_ss>[_NN].jfr[.zst]`, as the
//! JVM names its repositories (a second recording of one process in the same second gets `_<n>`).

use jfr_format::header::{ChunkHeader, HEADER_SIZE};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The zstd frame magic, at the start of a compressed chunk file (whatever its name).
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Are `bytes` (the start of a file) zstd-compressed?
pub fn is_zstd(bytes: &[u8]) -> bool {
    bytes.starts_with(&ZSTD_MAGIC)
}

/// The chunk bytes of a finished chunk file's contents: decompressed if they are zstd.
pub(crate) fn chunk_bytes(bytes: Vec<u8>, path: &Path) -> io::Result<Vec<u8>> {
    if !is_zstd(&bytes) {
        return Ok(bytes);
    }
    #[cfg(feature = "zstd")]
    {
        let _ = path;
        zstd::decode_all(&bytes[..])
    }
    #[cfg(not(feature = "zstd"))]
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{}: a zstd-compressed chunk, and recorder was built without its `zstd` feature", path.display()),
    ))
}

/// A reader of the decompressed contents of the zstd stream `input`.
#[cfg(feature = "zstd")]
fn decoder<R: Read>(input: R) -> io::Result<impl Read> {
    zstd::stream::read::Decoder::new(input)
}

/// Without the `zstd` feature a compressed chunk is an error that says why.
#[cfg(not(feature = "zstd"))]
fn decoder<R: Read>(_input: R) -> io::Result<io::Empty> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "a zstd-compressed chunk: reading it needs recorder's `zstd` feature",
    ))
}

/// The name of the recording directory of process `pid` started at `timestamp`
/// ([`super::timestamp_name`]).
pub fn recording_dir_name(timestamp: &str, pid: u32) -> String {
    format!("{timestamp}_{pid}")
}

/// The pid in a recording directory name `yyyy_MM_dd_HH_mm_ss_<pid>[_<n>]`: the pid a positive
/// decimal number, `<n>` decimal digits. `None` for any other name: this is the one rule by which
/// the recorder, `repair`, `push`, the consumer and the CLI tell a recording directory.
pub fn recording_dir_pid(name: &str) -> Option<i32> {
    let b = name.as_bytes();
    if b.len() < 21 {
        return None;
    }
    let stamp_ok = b[..20].iter().enumerate().all(|(i, c)| match i {
        4 | 7 | 10 | 13 | 16 | 19 => *c == b'_',
        _ => c.is_ascii_digit(),
    });
    if !stamp_ok {
        return None;
    }
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    let mut rest = name[20..].split('_');
    let pid = rest.next().filter(|p| digits(p))?;
    match (rest.next(), rest.next()) {
        (None, _) => {}
        (Some(n), None) if digits(n) => {}
        _ => return None,
    }
    pid.parse::<i32>().ok().filter(|&pid| pid > 0)
}

/// Is `name` a recording directory's name (see [`recording_dir_pid`])?
pub fn is_recording_dir_name(name: &str) -> bool {
    recording_dir_pid(name).is_some()
}

/// The stem a chunk file is known by: its name without `.jfr`, or without `.jfr.zst` for a
/// compressed one (a chunk keeps its stem when it is compressed). `None` for other names.
pub fn chunk_stem(name: &str) -> Option<&str> {
    name.strip_suffix(".jfr.zst").or_else(|| name.strip_suffix(".jfr"))
}

/// Is `name` a chunk file's name: `*.jfr`, or `*.jfr.zst` (a compressed finished chunk)?
pub fn is_chunk_file_name(name: &str) -> bool {
    chunk_stem(name).is_some()
}

/// A recording directory found in a base directory.
#[derive(Debug)]
pub struct RecordingDir {
    /// Its path.
    pub path: PathBuf,
    /// The pid in its name.
    pub pid: i32,
    /// Its metadata (of the directory itself: never of a symlink's target).
    pub metadata: std::fs::Metadata,
}

/// The recording directories in `base`, in name order (time order, for one machine's clock).
/// Directories only: a symlink is never followed, whatever it points to.
pub fn recording_dirs(base: &Path) -> io::Result<Vec<RecordingDir>> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(base)? {
        let entry = entry?;
        let Some(pid) = entry.file_name().to_str().and_then(recording_dir_pid) else { continue };
        // DirEntry::metadata does not traverse a symlink.
        let Ok(metadata) = entry.metadata() else { continue };
        if metadata.is_dir() {
            dirs.push(RecordingDir { path: entry.path(), pid, metadata });
        }
    }
    dirs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(dirs)
}

/// The chunk files (`*.jfr`, `*.jfr.zst`) directly in `dir`, in name order (time order within a
/// recording). Anything but a directory is listed.
pub fn chunk_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type().is_ok_and(|t| !t.is_dir()) && entry.file_name().to_str().is_some_and(is_chunk_file_name) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// The header of the first chunk in the file `path`, decompressed first if the file is zstd.
pub fn read_chunk_header(path: &Path) -> io::Result<ChunkHeader> {
    let mut file = File::open(path)?;
    let mut bytes = [0u8; HEADER_SIZE];
    let mut magic = [0u8; ZSTD_MAGIC.len()];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut magic, 0)?;
    if is_zstd(&magic) {
        decoder(file)?.read_exact(&mut bytes)?;
    } else {
        file.read_exact(&mut bytes)?;
    }
    ChunkHeader::parse(&bytes, 0).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

/// `<path>.zst`: the name a finished chunk file has once it is compressed.
pub fn compressed_path(path: &Path) -> PathBuf {
    let mut zst = path.as_os_str().to_owned();
    zst.push(".zst");
    PathBuf::from(zst)
}

/// The chunk bytes of the finished chunk file `path`, decompressed if it is zstd. A plain `.jfr`
/// chunk compressed since it was listed (`compress_finished_chunks`) is read from its `.zst`: the
/// same chunk. `NotFound` when neither is there (removed by retention).
pub fn read_finished_chunk(path: &Path) -> io::Result<Vec<u8>> {
    let bytes = match std::fs::read(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && path.extension().is_some_and(|x| x == "jfr") => {
            let zst = compressed_path(path);
            return match std::fs::read(&zst) {
                Err(z) if z.kind() == io::ErrorKind::NotFound => Err(e),
                read => chunk_bytes(read?, &zst),
            };
        }
        read => read?,
    };
    chunk_bytes(bytes, path)
}

/// The temporary name beside `path` that [`write_file_atomically`] and [`write_recording_file`]
/// write first: `.<name>.<pid>.tmp`.
pub fn temporary_path(path: &Path) -> PathBuf {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    dir.join(format!(".{name}.{}.tmp", std::process::id()))
}

/// Replaces `path` whole: `write` fills the new file `temp` (in the same directory, created with
/// `mode`), which is synced and renamed to `path`. A reader finds the old file or the complete new
/// one, never a part; on failure `temp` is removed and `path` is left as it was. `temp` is created
/// exclusively: a name already there (a symlink planted in a shared directory, or anything else)
/// makes the write fail and is left alone.
pub fn replace_file(
    temp: &Path,
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(temp)?;
    let result = write(&mut file).and_then(|()| file.sync_all()).and_then(|()| std::fs::rename(temp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(temp);
    }
    result
}

/// Writes `bytes` to `path` by [`replace_file`] (mode 0644, through [`temporary_path`]).
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_file(&temporary_path(path), path, 0o644, |f| f.write_all(bytes))
}

/// Writes the plain (`.jfr`) chunk files of the recording directory `dir`, in order, as the one
/// file `out` (a JFR file is its chunks one after the other), by [`replace_file`]. Returns how many
/// chunks it holds; with none, nothing is written and the error says so.
pub fn write_recording_file(dir: &Path, out: &Path) -> io::Result<usize> {
    let chunks: Vec<PathBuf> =
        chunk_files(dir)?.into_iter().filter(|p| p.extension().is_some_and(|x| x == "jfr")).collect();
    if chunks.is_empty() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("{} holds no chunk file", dir.display())));
    }
    // 0666: the umask decides, as for any file the user asks for.
    replace_file(&temporary_path(out), out, 0o666, |f| {
        for c in &chunks {
            let bytes = std::fs::read(c).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", c.display())))?;
            f.write_all(&bytes)?;
        }
        Ok(())
    })?;
    Ok(chunks.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recording_directory_names() {
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_10829"), Some(10829));
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_10829_2"), Some(10829));
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_10829_0"), Some(10829));
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53"), None);
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_"), None);
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_x"), None);
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_+12"), None);
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_12_"), None);
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_12_3_4"), None);
        assert_eq!(recording_dir_pid("2026-11-29_16_36_53_12"), None);
        assert_eq!(recording_dir_pid("2026_11_29_16_36_5310829"), None);
        assert_eq!(recording_dir_pid("2026_11_29_16_36_53_0"), None);
        assert_eq!(recording_dir_pid("control"), None);
        assert_eq!(recording_dir_name("2026_11_29_16_36_53", 10829), "2026_11_29_16_36_53_10829");
    }

    #[test]
    fn chunk_file_names() {
        assert_eq!(chunk_stem("2026_11_29_16_36_53_01.jfr"), Some("2026_11_29_16_36_53_01"));
        assert_eq!(chunk_stem("2026_11_29_16_36_53.jfr.zst"), Some("2026_11_29_16_36_53"));
        assert_eq!(chunk_stem(".2026_11_29_16_36_53.jfr.part"), None);
        assert_eq!(chunk_stem("2026_11_29_16_36_53.jfr.zst.part"), None);
    }

    #[test]
    fn a_replaced_file_is_whole_or_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jfr");
        std::fs::write(&path, b"old").unwrap();
        write_file_atomically(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert!(!temporary_path(&path).exists());
        let failed = replace_file(&temporary_path(&path), &path, 0o644, |_| Err(io::Error::other("full")));
        assert!(failed.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"new", "a failed write leaves the file");
        assert!(!temporary_path(&path).exists(), "and no temporary file");
        std::fs::write(temporary_path(&path), b"planted").unwrap();
        assert!(write_file_atomically(&path, b"newer").is_err(), "a temporary name already there");
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(std::fs::read(temporary_path(&path)).unwrap(), b"planted");
    }
}
