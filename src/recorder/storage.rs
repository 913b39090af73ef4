//! The recording's files: the live chunk's file, the finished chunks, retention, compression and
//! the reading side of dumps. Everything that touches the disk for the recorder is here; the
//! chunk writer hands over bytes and headers ([`Publish`]).
//!
//! Under L only what must be consistent with the chunk writer: writing a segment and its
//! header, finishing a chunk, retention (unlinks). Compressing a finished chunk and reading the
//! files of a dump run with L released.

use crate::chunk::Publish;
use crate::clock::{self, ClockPair};
use crate::push;
use crate::repository::{self, ChunkFile, ChunkNames, FinishedChunk};
use jfr_format::header::{ChunkHeader, FLAG_COMPRESSED_INTS, FLAG_FINAL_CHUNK, HEADER_SIZE, STATE_FINISHED};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Retention limits and what happens to finished chunks.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    /// Total size of the repository.
    pub max_size: u64,
    /// Oldest data kept.
    pub max_age: Option<Duration>,
    /// Rotation size: room kept for the live chunk.
    pub max_chunk_size: u64,
    /// Replace finished chunks by `.jfr.zst` files.
    pub compress: bool,
}

/// The files of one recording.
#[derive(Debug)]
pub(super) struct Storage {
    dir: PathBuf,
    policy: Policy,
    names: ChunkNames,
    /// The live chunk's file, created at its first publish.
    live: Option<ChunkFile>,
    /// The live chunk's header as last written successfully (None before its first publish).
    published: Option<ChunkHeader>,
    finished: Vec<FinishedChunk>,
    /// Finished chunks to compress with L released.
    to_compress: Vec<PathBuf>,
    /// The Pyroscope uploader, if the recording pushes: retention keeps its unposted chunks.
    push: push::Link,
}

/// What a dump reads, taken under L and read without it.
#[derive(Debug)]
pub(super) struct DumpPlan {
    finished: Vec<PathBuf>,
    /// A handle on the live chunk's file, its published size and the header that closes it.
    live: Option<(File, u64, ChunkHeader)>,
}

impl Storage {
    pub fn new(dir: PathBuf, policy: Policy) -> Storage {
        Storage {
            dir,
            policy,
            names: ChunkNames::default(),
            live: None,
            published: None,
            finished: Vec::new(),
            to_compress: Vec::new(),
            push: push::Link::default(),
        }
    }

    /// Finished chunks are posted by the uploader behind `link` (set before the first chunk
    /// finishes).
    #[cfg(feature = "push")]
    pub fn push_to(&mut self, link: push::Link) {
        self.push = link;
    }

    /// The uploader's side of retention, for its statistics event.
    #[cfg(feature = "push")]
    pub fn push(&self) -> &push::Link {
        &self.push
    }

    /// The recording's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn live_file(&mut self, start: ClockPair) -> io::Result<&mut ChunkFile> {
        if self.live.is_none() {
            self.live = Some(ChunkFile::create(&self.dir, start.epoch_nanos, &mut self.names)?);
        }
        Ok(self.live.as_mut().expect("just created"))
    }

    /// Writes a segment of the live chunk (which starts at `start`), then its header by the guard
    /// protocol; the first publish creates the file and makes it visible.
    pub fn publish(&mut self, start: ClockPair, p: &Publish) -> io::Result<()> {
        let file = self.live_file(start)?;
        file.write_at(p.offset, &p.bytes)?;
        file.publish(&p.header)?;
        self.published = Some(p.header);
        Ok(())
    }

    /// Writes the last bytes and the final header of the live chunk and files it with the
    /// finished ones (queued for compression if asked), then applies retention; `final_chunk`:
    /// the recording ends with it.
    pub fn finish(&mut self, start: ClockPair, p: &Publish, final_chunk: bool) -> io::Result<()> {
        let file = self.live_file(start)?;
        file.write_at(p.offset, &p.bytes)?;
        file.publish(&p.header)?;
        let path = file.path().to_owned();
        self.live = None;
        self.published = None;
        let duration = p.header.duration_nanos;
        if self.policy.compress {
            self.to_compress.push(path.clone());
        }
        self.finished.push(FinishedChunk {
            path,
            size: p.header.chunk_size as u64,
            start_nanos: start.epoch_nanos,
            end_nanos: start.epoch_nanos + duration,
        });
        self.push.chunk_finished();
        // Leave room for the next live chunk, so the repository stays under its limit at all
        // times; after the final chunk no other comes.
        self.apply_retention(if final_chunk { 0 } else { self.policy.max_chunk_size });
        Ok(())
    }

    /// A write of the live chunk failed: close its file at the last published state, so that
    /// readers (and the streaming API) can move on, or delete it if nothing was ever published.
    pub fn close_failed(&mut self, start: ClockPair, duration: i64) {
        let file = self.live.take();
        match (self.published.take(), file) {
            (Some(mut header), Some(mut file)) => {
                // Overwriting the header needs no new disk space.
                header.state = STATE_FINISHED;
                header.duration_nanos = duration;
                header.flags = FLAG_COMPRESSED_INTS;
                // A file holds exactly its chunks: drop what the failed write left behind.
                if file.truncate(header.chunk_size as u64).and_then(|()| file.publish(&header)).is_ok() {
                    self.finished.push(FinishedChunk {
                        path: file.path().to_owned(),
                        size: header.chunk_size as u64,
                        start_nanos: start.epoch_nanos,
                        end_nanos: start.epoch_nanos + duration,
                    });
                }
            }
            (None, Some(file)) => file.abandon(),
            (_, None) => {}
        }
    }

    /// Retention: deletes the oldest finished chunks beyond the size and age limits, counting
    /// `live` bytes for the chunk being written, never the newest finished chunk for size (see
    /// `repository::apply_retention`). The one place that deletes recorded data. Chunks the
    /// uploader has not posted yet outlive their age and go last under the size limit; those that
    /// go are counted as lost for the server.
    pub fn apply_retention(&mut self, live: u64) {
        let oldest = self.policy.max_age.map(|a| clock::epoch_nanos() - a.as_nanos() as i64);
        let push = &self.push;
        let retained = repository::apply_retention(&mut self.finished, live, self.policy.max_size, oldest, |c| {
            push.is_unposted(&c.path)
        });
        for c in retained.lost {
            push.deleted_unposted(&c.path, c.size);
        }
    }

    /// Finished chunks waiting for compression (compress them with L released, then report
    /// each with [`Self::compressed`]).
    pub fn take_compression(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.to_compress)
    }

    /// `plain` was compressed (by `compress::compress_chunk_file`, without L): the chunk is now the
    /// `.jfr.zst` file; the plain one goes. If retention removed the chunk meanwhile, the copy
    /// goes too. A chunk that could not be compressed stays as it is: complete and valid.
    pub fn compressed(&mut self, plain: &Path, result: io::Result<(PathBuf, u64)>) {
        let Ok((zst, size)) = result else { return };
        match self.finished.iter_mut().find(|c| c.path == plain) {
            Some(chunk) => {
                if std::fs::remove_file(plain).is_ok() {
                    chunk.path = zst;
                    chunk.size = size;
                } else {
                    // Keep one copy only: the plain chunk stays.
                    let _ = std::fs::remove_file(&zst);
                }
            }
            None => {
                let _ = std::fs::remove_file(&zst);
            }
        }
    }

    /// What a dump of everything recorded so far reads: the finished chunks and the published
    /// part of the live one.
    pub fn dump_plan(&self) -> io::Result<DumpPlan> {
        let live = match (self.live.as_ref(), self.published) {
            (Some(file), Some(header)) => Some((file.reader()?, header.chunk_size as u64, header)),
            _ => None,
        };
        Ok(DumpPlan { finished: self.finished.iter().map(|c| c.path.clone()).collect(), live })
    }
}

impl DumpPlan {
    /// Reads every chunk of the plan into one valid file (finished chunks decompressed, the live
    /// chunk closed with the final flag). Runs without L: a chunk that retention removed meanwhile
    /// is left out (a dump holds what exists), one compressed meanwhile is read compressed.
    pub fn read(self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut last_start = None;
        for path in &self.finished {
            match crate::repository::layout::read_finished_chunk(path) {
                Ok(bytes) => {
                    last_start = Some(out.len());
                    out.extend_from_slice(&bytes);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        if let Some((file, size, header)) = self.live {
            let at = out.len();
            out.resize(at + size as usize, 0);
            file.read_exact_at(&mut out[at..], 0)?;
            let mut closed = header;
            closed.state = STATE_FINISHED;
            closed.duration_nanos = header.duration_nanos.max(1);
            closed.flags = FLAG_COMPRESSED_INTS | FLAG_FINAL_CHUNK;
            out[at..at + HEADER_SIZE].copy_from_slice(&closed.encode());
            return Ok(out);
        }
        if let Some(start) = last_start {
            // No live chunk: the last finished one closes the file.
            out[start + 67] |= FLAG_FINAL_CHUNK as u8;
        }
        Ok(out)
    }
}

pub(super) use crate::repository::layout::write_file_atomically;

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use jfr_format::header::FLAG_FINAL_CHUNK;

    const KIB: u64 = 1024;

    fn storage(dir: &Path) -> Storage {
        let policy = Policy { max_size: 256 * KIB, max_age: None, max_chunk_size: 64 * KIB, compress: false };
        Storage::new(dir.to_owned(), policy)
    }

    /// Finishes a chunk of `size` bytes that starts at `start` s (the final one if `final_chunk`).
    fn finish(storage: &mut Storage, start: i64, size: u64, final_chunk: bool) {
        let at = ClockPair {
            epoch_nanos: start * 1_000_000_000,
            ticks: start * 1_000_000_000,
            ticks_per_second: 1_000_000_000,
        };
        let mut header = ChunkHeader::new(at.epoch_nanos, at.ticks);
        header.chunk_size = size as i64;
        header.duration_nanos = 1_000_000_000;
        header.state = STATE_FINISHED;
        header.flags = FLAG_COMPRESSED_INTS | if final_chunk { FLAG_FINAL_CHUNK } else { 0 };
        let p = Publish { offset: 0, bytes: vec![0; size as usize], header };
        storage.finish(at, &p, final_chunk).unwrap();
    }

    fn files(dir: &Path) -> Vec<(String, u64)> {
        let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.metadata().unwrap().len()))
            .collect();
        files.sort();
        files
    }

    /// The data loss the interop helper found: at `stop`, `finish` kept room for a live chunk
    /// that will never come, and retention deleted the newest chunk when it alone passed the
    /// limit, so a recording whose flushes came late (large chunks) left nothing behind.
    #[test]
    fn the_final_chunk_reserves_no_room_and_the_newest_chunk_is_never_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = storage(dir.path());
        finish(&mut s, 1, 100 * KIB, false);
        // 100 + 150 KiB fit in 256: nothing is deleted at the stop.
        finish(&mut s, 2, 150 * KIB, true);
        let sizes: Vec<u64> = files(dir.path()).iter().map(|f| f.1).collect();
        assert_eq!(sizes, [100 * KIB, 150 * KIB], "both chunks fit the limit: {:?}", files(dir.path()));

        let dir = tempfile::tempdir().unwrap();
        let mut s = storage(dir.path());
        finish(&mut s, 1, 100 * KIB, false);
        finish(&mut s, 2, 300 * KIB, true);
        let sizes: Vec<u64> = files(dir.path()).iter().map(|f| f.1).collect();
        assert_eq!(sizes, [300 * KIB], "the older chunk goes, the newest stays although it passes the limit alone");
    }

    /// While recording: the live chunk's size counts, the oldest chunks go first, and neither the
    /// newest finished chunk nor the live one is deleted, however large they are.
    #[test]
    fn retention_deletes_oldest_first_and_stops_before_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = storage(dir.path());
        for start in 1..=4 {
            finish(&mut s, start, 60 * KIB, false);
        }
        assert_eq!(files(dir.path()).len(), 3, "4 * 60 KiB and 64 KiB of room: the oldest goes");
        s.apply_retention(100 * KIB);
        assert_eq!(files(dir.path()).len(), 2, "2 * 60 + 100 KiB fit");
        s.apply_retention(1024 * KIB);
        let left = files(dir.path());
        assert_eq!(left.len(), 1, "the newest finished chunk stays: {left:?}");
        assert_eq!(s.finished.len(), 1);
        assert_eq!(s.finished[0].start_nanos, 4_000_000_000, "the newest: {:?}", s.finished);
    }
}
