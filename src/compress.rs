//! zstd compression of finished chunk files (`<name>.jfr.zst`), behind the `zstd` feature: off by
//! default, so an embedding application builds no C code unless it asks for compressed chunks.
//! Reading them back is `repository::layout`'s (every reader needs it).

#[cfg(feature = "zstd")]
use crate::repository::layout;
use std::io;
use std::path::{Path, PathBuf};

/// Writes `<path>.zst`, the compressed copy of the finished chunk file `path`, and returns its
/// path and size. The plain file stays: the caller removes it once the copy replaced it in its
/// own records (the recorder does that under its lock, after compressing without it), so a
/// reader finds the chunk in one of them at all times (possibly in both for a moment).
#[cfg(feature = "zstd")]
pub(crate) fn compress_chunk_file(path: &Path) -> io::Result<(PathBuf, u64)> {
    let plain = std::fs::read(path)?;
    let compressed = zstd::encode_all(&plain[..], 3)?;
    let zst = layout::compressed_path(path);
    let mut partial = zst.clone().into_os_string();
    partial.push(".part");
    let partial = PathBuf::from(partial);
    // Held open through `sync_all`: in a descriptor table of its own (`fds::in_private_table`).
    crate::fds::in_private_table(|| {
        // Left by a compression cut short (removing a name never follows a symlink).
        let _ = std::fs::remove_file(&partial);
        layout::replace_file(&partial, &zst, 0o666, |f| io::Write::write_all(f, &compressed))
    })?;
    Ok((zst, compressed.len() as u64))
}

/// Without the `zstd` feature nothing is compressed (`validate` refuses the setting up front).
#[cfg(not(feature = "zstd"))]
pub(crate) fn compress_chunk_file(path: &Path) -> io::Result<(PathBuf, u64)> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{}: recorder was built without its `zstd` feature", path.display()),
    ))
}
