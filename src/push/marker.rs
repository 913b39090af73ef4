//! The pushed-chunks marker: which chunks (or cuts of chunks) of a directory a server already has,
//! so that a restarted uploader, or `recorder push` run twice, never posts them again.
//!
//! One file per directory and server, `.recorder-push-<id>` (hidden: the JDK's tools read only
//! `*.jfr`), one line per finished item: `<key> <outcome>`, appended and synced after each
//! request. Keys are chunk names without `.jfr`/`.jfr.zst` (a chunk keeps its name when it is
//! compressed), `<name>@<offset>` for chunks of a multi-chunk file, and `<key>#<i>/<n>` for the
//! uploads of a cut chunk. A crash between the server's answer and the sync posts that one request
//! again at the next start: the only double post possible.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Lines beyond which the file is rewritten with the entries of chunks still on disk.
const COMPACT_AFTER: usize = 4096;

#[derive(Debug)]
pub(crate) struct Marker {
    path: PathBuf,
    file: File,
    done: HashSet<String>,
    lines: usize,
    compact_after: usize,
}

impl Marker {
    /// Opens (or creates) the marker of `dir` for the server `id`.
    pub(crate) fn open(dir: &Path, id: &str) -> io::Result<Marker> {
        let path = dir.join(format!(".recorder-push-{id}"));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)?;
        let text = std::fs::read_to_string(&path)?;
        let mut done = HashSet::new();
        let mut lines = 0;
        // A line cut short by a crash has no outcome: it does not count.
        for line in text.lines() {
            if let Some((key, outcome)) = line.split_once(' ') {
                if !key.is_empty() && !outcome.is_empty() {
                    done.insert(key.to_owned());
                    lines += 1;
                }
            }
        }
        let mut marker = Marker { path, file, done, lines, compact_after: COMPACT_AFTER };
        if !text.is_empty() && !text.ends_with('\n') {
            // Finish the torn line so the next entry starts on its own.
            marker.file.write_all(b"\n")?;
        }
        Ok(marker)
    }

    pub(crate) fn is_done(&self, key: &str) -> bool {
        self.done.contains(key)
    }

    /// Records `key` as done (`outcome`: `posted`, `rejected-400`, `no-profile-data`, …) and
    /// syncs it to disk.
    pub(crate) fn record(&mut self, key: &str, outcome: &str) -> io::Result<()> {
        debug_assert!(!key.contains([' ', '\n']) && !outcome.contains('\n'));
        self.file.write_all(format!("{key} {outcome}\n").as_bytes())?;
        self.file.sync_data()?;
        self.done.insert(key.to_owned());
        self.lines += 1;
        Ok(())
    }

    /// Rewrites the file without the entries `keep` refuses (chunks no longer on disk), when it
    /// has grown long. The new file replaces the old one atomically.
    pub(crate) fn compact(&mut self, keep: impl Fn(&str) -> bool) -> io::Result<()> {
        if self.lines < self.compact_after {
            return Ok(());
        }
        let text = std::fs::read_to_string(&self.path)?;
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| l.split_once(' ').is_some_and(|(key, _)| keep(key.split(['#', '@']).next().unwrap_or(key))))
            .collect();
        let temp = self.path.with_extension("compact");
        // Left by a process killed while compacting (removing a name never follows a symlink).
        let _ = std::fs::remove_file(&temp);
        crate::repository::layout::replace_file(&temp, &self.path, 0o600, |f| {
            for line in &kept {
                f.write_all(line.as_bytes())?;
                f.write_all(b"\n")?;
            }
            Ok(())
        })?;
        self.file =
            OpenOptions::new().append(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&self.path)?;
        self.done = kept.iter().filter_map(|l| l.split_once(' ').map(|(k, _)| k.to_owned())).collect();
        self.lines = kept.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survives_reopen_and_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Marker::open(dir.path(), "abc").unwrap();
        m.record("2026_01_01_00_00_00", "posted").unwrap();
        m.record("2026_01_01_00_00_01#1/2", "posted").unwrap();
        drop(m);
        // A crash in the middle of a line.
        let path = dir.path().join(".recorder-push-abc");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"2026_01_01_00_00_01#2/2").unwrap();
        drop(f);
        let mut m = Marker::open(dir.path(), "abc").unwrap();
        assert!(m.is_done("2026_01_01_00_00_00"));
        assert!(m.is_done("2026_01_01_00_00_01#1/2"));
        assert!(!m.is_done("2026_01_01_00_00_01#2/2"));
        m.record("2026_01_01_00_00_01#2/2", "posted").unwrap();
        let m = Marker::open(dir.path(), "abc").unwrap();
        assert!(m.is_done("2026_01_01_00_00_01#2/2"));
        assert!(!Marker::open(dir.path(), "other").unwrap().is_done("2026_01_01_00_00_00"));
    }

    #[test]
    fn compaction_keeps_what_is_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = Marker::open(dir.path(), "x").unwrap();
        m.compact_after = 10;
        for i in 0..10 {
            m.record(&format!("old_{i}"), "posted").unwrap();
        }
        m.record("kept#1/2", "posted").unwrap();
        m.compact(|stem| stem == "kept").unwrap();
        assert!(m.is_done("kept#1/2") && !m.is_done("old_1"));
        m.record("new", "posted").unwrap();
        let m = Marker::open(dir.path(), "x").unwrap();
        assert!(m.is_done("kept#1/2") && m.is_done("new") && !m.is_done("old_7"));
    }
}
