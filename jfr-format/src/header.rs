//! The 68-byte chunk header and the live-update protocol around it (docs/jfr-format.md, "Chunks
//! and the header" and "Publishing a live chunk").

use crate::error::{Error, Result};

/// Size of a chunk header in bytes.
pub const HEADER_SIZE: usize = 68;
/// The chunk magic, "FLR\0".
pub const MAGIC: [u8; 4] = *b"FLR\0";
/// Offset of the file-state ("generation") byte.
pub const STATE_OFFSET: usize = 64;
/// Header state byte of a finished chunk.
pub const STATE_FINISHED: u8 = 0;
/// Header state byte while the header is being rewritten.
pub const STATE_GUARD: u8 = 255;
/// Flags bit: integers are compressed (varints). Always set by this crate.
pub const FLAG_COMPRESSED_INTS: u16 = 1;
/// Flags bit: last chunk of the recording.
pub const FLAG_FINAL_CHUNK: u16 = 2;
/// Tick frequency used by every chunk this crate writes (the JDK's value on Linux).
pub const NANOS_PER_SECOND: i64 = 1_000_000_000;

/// A decoded chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Major version (1 or 2).
    pub major: u16,
    /// Minor version (this crate writes 1, as JDK 17 does).
    pub minor: u16,
    /// Published chunk size in bytes, header included.
    pub chunk_size: i64,
    /// Chunk-relative offset of the last checkpoint, 0 if none.
    pub cp_offset: i64,
    /// Chunk-relative offset of the latest metadata record, 0 if none.
    pub metadata_offset: i64,
    /// Wall-clock start, ns since the Unix epoch.
    pub start_nanos: i64,
    /// Chunk duration in ns (time of the last header update while in progress).
    pub duration_nanos: i64,
    /// Tick value at `start_nanos`.
    pub start_ticks: i64,
    /// Tick frequency.
    pub ticks_per_second: i64,
    /// 0 finished, 1..=254 generation of an in-progress chunk, 255 guard.
    pub state: u8,
    /// Flags (bit 0 compressed integers, bit 1 final chunk).
    pub flags: u16,
}

impl ChunkHeader {
    /// A fresh in-progress header (state 1, nothing published yet).
    pub fn new(start_nanos: i64, start_ticks: i64) -> ChunkHeader {
        ChunkHeader {
            major: 2,
            minor: 1,
            chunk_size: HEADER_SIZE as i64,
            cp_offset: 0,
            metadata_offset: 0,
            start_nanos,
            duration_nanos: 0,
            start_ticks,
            ticks_per_second: NANOS_PER_SECOND,
            state: 1,
            flags: FLAG_COMPRESSED_INTS,
        }
    }

    /// Decodes a header from the first 68 bytes of `data`. `base` is the chunk's offset in the
    /// input, used in errors. A header with the guard state decodes fine: check [`Self::is_locked`].
    pub fn parse(data: &[u8], base: u64) -> Result<ChunkHeader> {
        let bytes: &[u8; HEADER_SIZE] =
            data.get(..HEADER_SIZE).and_then(|b| b.try_into().ok()).ok_or(Error::UnexpectedEof {
                offset: base.wrapping_add(data.len() as u64),
                expected: "a 68-byte chunk header",
            })?;
        let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != MAGIC {
            return Err(Error::BadMagic { offset: base, found: magic });
        }
        let u16_at = |o: usize| u16::from_be_bytes([bytes[o], bytes[o + 1]]);
        let i64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[o..o + 8]);
            i64::from_be_bytes(b)
        };
        let header = ChunkHeader {
            major: u16_at(4),
            minor: u16_at(6),
            chunk_size: i64_at(8),
            cp_offset: i64_at(16),
            metadata_offset: i64_at(24),
            start_nanos: i64_at(32),
            duration_nanos: i64_at(40),
            start_ticks: i64_at(48),
            ticks_per_second: i64_at(56),
            state: bytes[64],
            flags: u16_at(66),
        };
        if header.major != 1 && header.major != 2 {
            return Err(Error::UnsupportedVersion {
                offset: base.wrapping_add(4),
                major: header.major,
                minor: header.minor,
            });
        }
        Ok(header)
    }

    /// Checks the sizes and offsets against the bytes available: the chunk must be at least a
    /// header long, no longer than `available`, and its metadata and checkpoint offsets must fall
    /// inside it.
    pub fn validate(&self, available: u64, base: u64) -> Result<()> {
        let size = self.chunk_size;
        if size < HEADER_SIZE as i64 {
            return Err(Error::Invalid {
                offset: base.wrapping_add(8),
                expected: "a chunk size of at least 68",
                found: size as u64,
            });
        }
        if size as u64 > available {
            return Err(Error::UnexpectedEof {
                offset: base.wrapping_add(available),
                expected: "the rest of the chunk its header announces",
            });
        }
        for (field_offset, value, what) in [
            (16, self.cp_offset, "a checkpoint offset inside the chunk"),
            (24, self.metadata_offset, "a metadata offset inside the chunk"),
        ] {
            if value != 0 && (value < HEADER_SIZE as i64 || value >= size) {
                return Err(Error::Invalid {
                    offset: base.wrapping_add(field_offset),
                    expected: what,
                    found: value as u64,
                });
            }
        }
        if self.ticks_per_second <= 0 {
            return Err(Error::Invalid {
                offset: base.wrapping_add(56),
                expected: "a positive tick frequency",
                found: self.ticks_per_second as u64,
            });
        }
        Ok(())
    }

    /// The header's guard byte is set: a writer is rewriting it.
    pub fn is_locked(&self) -> bool {
        self.state == STATE_GUARD
    }

    /// The chunk is complete (state 0).
    pub fn is_finished(&self) -> bool {
        self.state == STATE_FINISHED
    }

    /// The chunk is the last one of its recording.
    pub fn is_final(&self) -> bool {
        self.flags & FLAG_FINAL_CHUNK != 0
    }

    /// Converts a tick value of this chunk to ns since the epoch, as the JDK reader does.
    pub fn ticks_to_epoch_nanos(&self, ticks: i64) -> i64 {
        if self.ticks_per_second == NANOS_PER_SECOND {
            return self.start_nanos.wrapping_add(ticks.wrapping_sub(self.start_ticks));
        }
        let per_ns = self.ticks_per_second as f64 / 1e9;
        self.start_nanos.wrapping_add((ticks.wrapping_sub(self.start_ticks) as f64 / per_ns) as i64)
    }

    /// Converts a tick span to ns.
    pub fn ticks_to_nanos(&self, ticks: i64) -> i64 {
        if self.ticks_per_second == NANOS_PER_SECOND {
            return ticks;
        }
        (ticks as f64 / (self.ticks_per_second as f64 / 1e9)) as i64
    }

    /// Encodes the whole header.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        out[..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&self.major.to_be_bytes());
        out[6..8].copy_from_slice(&self.minor.to_be_bytes());
        out[8..64].copy_from_slice(&self.encode_body());
        out[64..68].copy_from_slice(&self.encode_state());
        out
    }

    /// Bytes 8..64: sizes, offsets, times and frequency. Written while the guard is set.
    pub fn encode_body(&self) -> [u8; 56] {
        let mut out = [0u8; 56];
        for (i, v) in [
            self.chunk_size,
            self.cp_offset,
            self.metadata_offset,
            self.start_nanos,
            self.duration_nanos,
            self.start_ticks,
            self.ticks_per_second,
        ]
        .into_iter()
        .enumerate()
        {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        out
    }

    /// Bytes 64..68: state, pad (always 0: docs/jfr-format.md, "Chunks and the header") and flags. Written last.
    pub fn encode_state(&self) -> [u8; 4] {
        let f = self.flags.to_be_bytes();
        [self.state, 0, f[0], f[1]]
    }
}

/// The next generation after `state` for an in-progress chunk: 1..=254, wrapping 254 → 1, never 0
/// or the guard.
pub fn next_generation(state: u8) -> u8 {
    match state {
        254 | 255 | 0 => 1,
        s => s + 1,
    }
}

/// The three writes that publish a header update, in order: guard byte at 64, body at 8, state at
/// 64. A writer applies them with positional writes so that a concurrent reader following
/// [`ChunkHeader::parse`] and [`ChunkHeader::is_locked`] never accepts a half-written header.
pub fn publish_writes(header: &ChunkHeader) -> [(u64, Vec<u8>); 3] {
    [
        (STATE_OFFSET as u64, vec![STATE_GUARD]),
        (8, header.encode_body().to_vec()),
        (STATE_OFFSET as u64, header.encode_state().to_vec()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let mut h = ChunkHeader::new(1_700_000_000_000_000_000, 12345);
        h.chunk_size = 1000;
        h.cp_offset = 900;
        h.metadata_offset = 68;
        h.state = 0;
        h.flags = 3;
        let bytes = h.encode();
        assert_eq!(ChunkHeader::parse(&bytes, 0).unwrap(), h);
        assert_eq!(&bytes[64..68], &[0, 0, 0, 3]);
    }

    #[test]
    fn generations_wrap_and_skip_guard() {
        assert_eq!(next_generation(1), 2);
        assert_eq!(next_generation(254), 1);
        assert_eq!(next_generation(0), 1);
    }

    #[test]
    fn bad_magic_and_short_header() {
        assert!(matches!(ChunkHeader::parse(b"nope", 0), Err(Error::UnexpectedEof { .. })));
        let mut bytes = ChunkHeader::new(0, 0).encode();
        bytes[0] = b'X';
        assert!(matches!(ChunkHeader::parse(&bytes, 10), Err(Error::BadMagic { offset: 10, .. })));
    }
}
