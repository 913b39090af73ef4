//! The encoder of event records: the commit path writes a record straight into the free space of
//! the committing thread's event buffer (no scratch copy), with one bounds check per value. A value
//! that does not fit marks the encoder full and writes nothing more; the commit then encodes the
//! record again into a buffer that fits it.

use std::marker::PhantomData;

/// Where an event's fields are encoded (see [`FieldType::encode`](crate::FieldType::encode)).
///
/// Values are written in the JFR encoding (varint integers, big-endian floats, tagged strings).
/// When the space runs out, the encoder is full: further writes are ignored and the commit
/// retries the whole record elsewhere, so an encoder may see a value more than once.
#[derive(Debug)]
pub struct Encoder<'a> {
    pos: *mut u8,
    end: *mut u8,
    full: bool,
    _memory: PhantomData<&'a mut [u8]>,
}

impl<'a> Encoder<'a> {
    /// An encoder writing from `pos` up to (excluding) `end`.
    ///
    /// # Safety
    /// `[pos, end)` is valid for writes for `'a` (`pos <= end`, both in or one past the end of
    /// one allocation) and nothing else reads or writes it meanwhile.
    #[inline(always)]
    pub(crate) unsafe fn new(pos: *mut u8, end: *mut u8) -> Encoder<'a> {
        Encoder { pos, end, full: false, _memory: PhantomData }
    }

    /// Where the next byte goes.
    #[inline(always)]
    pub(crate) fn position(&self) -> *mut u8 {
        self.pos
    }

    /// A value did not fit: what was written is incomplete.
    #[inline(always)]
    pub(crate) fn is_full(&self) -> bool {
        self.full
    }

    #[inline(always)]
    fn room(&self) -> usize {
        self.end as usize - self.pos as usize
    }

    /// (Inlined, as every method taking `&mut self` on the hot path: an encoder whose address
    /// reaches a call lives in memory, and every value then waits for the last store of `pos`.)
    #[inline(always)]
    fn overflow(&mut self) {
        std::hint::cold_path();
        self.full = true;
        // No room left: every later write fails its bounds check too.
        self.end = self.pos;
    }

    /// Appends a varint (the shortest JFR encoding of `v`, as `jfr_format::varint::write_u64`).
    #[inline(always)]
    pub fn put_varint(&mut self, v: u64) {
        if self.room() < MAX_VARINT {
            // Near the end of the space: byte by byte, checked.
            std::hint::cold_path();
            let mut bytes = [0u8; MAX_VARINT];
            let n = varint_bytes(v, &mut bytes);
            return self.put_bytes(&bytes[..n]);
        }
        // SAFETY: `MAX_VARINT` bytes of room (checked above).
        self.pos = unsafe { put_varint_unchecked(self.pos, v) };
    }

    /// Reserves `n` bytes for unchecked writes: `true` if they are there.
    #[inline(always)]
    pub(crate) fn has_room(&self, n: usize) -> bool {
        self.room() >= n
    }

    /// Appends a varint without a bounds check.
    ///
    /// # Safety
    /// [`MAX_VARINT`] bytes of room.
    #[inline(always)]
    pub(crate) unsafe fn put_varint_unchecked(&mut self, v: u64) {
        // SAFETY: as the caller guarantees.
        self.pos = unsafe { put_varint_unchecked(self.pos, v) };
    }

    /// Appends a varint of `v < 2^56` padded to 8 bytes (continuation bits on the first seven),
    /// and the shortest varint of a larger one: the length does not depend on the value, so the
    /// writes after it need not wait for it (the tick read it comes from takes longer than the
    /// rest of a commit). Every varint reader accepts padding (HotSpot pads record sizes).
    ///
    /// # Safety
    /// [`MAX_VARINT`] bytes of room.
    #[inline(always)]
    pub(crate) unsafe fn put_varint_padded_unchecked(&mut self, v: u64) {
        if v >> 56 != 0 {
            std::hint::cold_path();
            // SAFETY: as the caller guarantees.
            return unsafe { self.put_varint_unchecked(v) };
        }
        // SAFETY: 8 bytes of room, as the caller guarantees.
        unsafe { self.put_word_unchecked(spread_varint(v) | 0x0080_8080_8080_8080, 8) };
    }

    /// Appends the first `len` bytes of `word` (little-endian; `len <= 8`) without a bounds check:
    /// e.g. a varint encoded ahead of time.
    ///
    /// # Safety
    /// 8 bytes of room.
    #[inline(always)]
    pub(crate) unsafe fn put_word_unchecked(&mut self, word: u64, len: usize) {
        // SAFETY: 8 bytes of room, as the caller guarantees.
        unsafe {
            self.pos.cast::<u64>().write_unaligned(word.to_le());
            self.pos = self.pos.add(len);
        }
    }

    /// Appends one byte.
    #[inline(always)]
    pub fn put_byte(&mut self, b: u8) {
        if self.room() == 0 {
            return self.overflow();
        }
        // SAFETY: one byte of room (checked above).
        unsafe {
            self.pos.write(b);
            self.pos = self.pos.add(1);
        }
    }

    /// Appends raw bytes.
    #[inline(always)]
    pub fn put_bytes(&mut self, bytes: &[u8]) {
        if bytes.len() > self.room() {
            return self.overflow();
        }
        // SAFETY: `bytes.len()` bytes of room (checked above); `bytes` cannot overlap the space,
        // which nothing else references.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.pos, bytes.len());
            self.pos = self.pos.add(bytes.len());
        }
    }

    /// Appends a `boolean`.
    #[inline(always)]
    pub fn put_bool(&mut self, v: bool) {
        self.put_byte(u8::from(v));
    }

    /// Appends a `float` (big-endian IEEE-754).
    #[inline(always)]
    pub fn put_float(&mut self, v: f32) {
        self.put_bytes(&v.to_be_bytes());
    }

    /// Appends a `double` (big-endian IEEE-754).
    #[inline(always)]
    pub fn put_double(&mut self, v: f64) {
        self.put_bytes(&v.to_be_bytes());
    }

    /// Appends a string: `None` as null (tag 0), `""` as empty (tag 1), anything else as UTF-8
    /// (tag 3, byte length, bytes), as `jfr_format::write::put_string`.
    #[inline]
    pub fn put_string(&mut self, s: Option<&str>) {
        match s {
            None => self.put_byte(0),
            Some("") => self.put_byte(1),
            Some(s) => {
                self.put_byte(3);
                self.put_varint(s.len() as u64);
                self.put_bytes(s.as_bytes());
            }
        }
    }

    /// Frames the record whose one-byte size slot is at `start` (reserved before its type id):
    /// writes its size and returns its end, or `None` if the encoder is full or the record does
    /// not fit once framed. Byte for byte what `jfr_format::write::end_record` makes for records
    /// below 2^28 bytes: a one-byte size up to 127 bytes, else a 4-byte padded size (the payload
    /// moves 3 bytes on). Larger records return `None` (the scratch path frames them).
    #[inline(always)]
    pub(crate) fn finish_record(&mut self, start: *mut u8) -> Option<*mut u8> {
        if self.full {
            return None;
        }
        let len = self.pos as usize - start as usize;
        if len < 0x80 {
            // SAFETY: `start` is the reserved slot, inside the space written so far.
            unsafe { start.write(len as u8) };
            return Some(self.pos);
        }
        std::hint::cold_path();
        if len + WIDER_SIZE >= 1 << 28 || self.room() < WIDER_SIZE {
            return None;
        }
        // SAFETY: the record `[start, start + len)` was written by this encoder, and
        // `WIDER_SIZE` more bytes of room follow it (checked above).
        unsafe { widen_size(start, len) };
        // SAFETY: as above.
        self.pos = unsafe { self.pos.add(WIDER_SIZE) };
        Some(self.pos)
    }
}

/// The bytes a 4-byte padded size adds to a one-byte one.
const WIDER_SIZE: usize = 3;

/// Moves the payload of the record at `start` (one-byte size slot, `len` bytes in all) on by
/// [`WIDER_SIZE`] bytes and writes its 4-byte padded size.
///
/// # Safety
/// `[start, start + len + WIDER_SIZE)` is writable, and `len + WIDER_SIZE < 2^28`.
#[cold]
#[inline(never)]
unsafe fn widen_size(start: *mut u8, len: usize) {
    // SAFETY: inside the range the caller vouches for; `copy` allows the overlap.
    unsafe {
        std::ptr::copy(start.add(1), start.add(1 + WIDER_SIZE), len - 1);
        let total = (len + WIDER_SIZE) as u64;
        for i in 0..4 {
            let part = ((total >> (7 * i)) & 0x7f) as u8;
            start.add(i).write(if i < 3 { part | 0x80 } else { part });
        }
    }
}

/// Runs `encode` on an encoder over the spare capacity of `out` (after its length), growing it
/// until everything fits; `out` then holds what was encoded.
pub(crate) fn encode_into_vec(out: &mut Vec<u8>, mut encode: impl FnMut(&mut Encoder<'_>)) {
    let len = out.len();
    loop {
        let spare = out.spare_capacity_mut();
        let range = spare.as_mut_ptr_range();
        // SAFETY: the spare capacity is writable, owned by `out`, which `encode` cannot reach.
        let mut enc = unsafe { Encoder::new(range.start.cast(), range.end.cast()) };
        encode(&mut enc);
        if !enc.is_full() {
            let written = enc.position() as usize - range.start as usize;
            // SAFETY: the encoder initialized exactly these bytes after `len`.
            unsafe { out.set_len(len + written) };
            return;
        }
        out.reserve((out.capacity() - len).max(64) * 2);
    }
}

/// The most bytes a varint takes.
pub(crate) const MAX_VARINT: usize = 9;

/// Writes the varint of `v` at `pos`; returns its end. Branches by size class, each with the
/// fewest instructions: one byte; two (two masks); three or four (the 7-bit groups spread in a
/// 32-bit word, no 64-bit constants); five to eight (spread in a 64-bit word); nine.
///
/// # Safety
/// [`MAX_VARINT`] bytes at `pos` are writable.
#[inline(always)]
unsafe fn put_varint_unchecked(pos: *mut u8, v: u64) -> *mut u8 {
    // SAFETY (every write): at most `MAX_VARINT` bytes from `pos`, as the caller guarantees.
    unsafe {
        if v < 1 << 7 {
            pos.write(v as u8);
            return pos.add(1);
        }
        if v < 1 << 14 {
            let word = (v as u16 & 0x7f) | 0x80 | ((v as u16) << 1 & 0x7f00);
            pos.cast::<u16>().write_unaligned(word.to_le());
            return pos.add(2);
        }
        if v < 1 << 28 {
            let v = v as u32;
            let mut word = (v & 0x3FFF) | ((v & 0x0FFF_C000) << 2);
            word = (word & 0x007F_007F) | ((word & 0x3F80_3F80) << 1);
            let long = v >= 1 << 21;
            word |= if long { 0x0080_8080 } else { 0x8080 };
            pos.cast::<u32>().write_unaligned(word.to_le());
            return pos.add(3 + usize::from(long));
        }
        if v < 1 << 56 {
            let shape = VARINT_SHAPES[v.leading_zeros() as usize];
            pos.cast::<u64>().write_unaligned((spread_varint(v) | shape.continuation).to_le());
            return pos.add(shape.len as usize);
        }
        std::hint::cold_path();
        let mut bytes = [0u8; MAX_VARINT];
        varint_bytes(v, &mut bytes);
        pos.copy_from_nonoverlapping(bytes.as_ptr(), MAX_VARINT);
        pos.add(MAX_VARINT)
    }
}

/// The varint of `v < 2^35` (`u32` and smaller fields, thread ids) as a little-endian word and
/// its length: for values encoded once and written many times.
pub(crate) fn varint_word(v: u64) -> (u64, usize) {
    let mut bytes = [0u8; MAX_VARINT];
    let n = varint_bytes(v, &mut bytes);
    let mut word = [0u8; 8];
    let n = n.min(8);
    word[..n].copy_from_slice(&bytes[..n]);
    (u64::from_le_bytes(word), n)
}

/// The 7-bit groups of the low 56 bits of `v` in the bytes of a little-endian word: 28-bit
/// halves into 32-bit lanes, 14-bit quarters into 16-bit lanes, 7-bit groups into bytes.
#[inline(always)]
fn spread_varint(v: u64) -> u64 {
    let mut word = (v & 0x0FFF_FFFF) | ((v & 0x00FF_FFFF_F000_0000) << 4);
    word = (word & 0x0000_3FFF_0000_3FFF) | ((word & 0x0FFF_C000_0FFF_C000) << 2);
    (word & 0x007F_007F_007F_007F) | ((word & 0x3F80_3F80_3F80_3F80) << 1)
}

/// The length of a varint and the continuation bits of its bytes (all but the last).
#[derive(Clone, Copy)]
struct VarintShape {
    continuation: u64,
    len: u64,
}

/// [`VarintShape`] by the value's leading zero bits (a table instead of a division by 7).
static VARINT_SHAPES: [VarintShape; 65] = {
    let mut shapes = [VarintShape { continuation: 0, len: 1 }; 65];
    let mut lz = 0;
    while lz < 65 {
        let bits: usize = 64 - lz;
        let len = if bits == 0 { 1 } else { bits.div_ceil(7) };
        let len = if len > 8 { 8 } else { len };
        shapes[lz] =
            VarintShape { continuation: 0x8080_8080_8080_8080 & ((1u64 << (8 * (len - 1))) - 1), len: len as u64 };
        lz += 1;
    }
    shapes
};

/// The varint of `v` into `out`; returns its length.
fn varint_bytes(mut v: u64, out: &mut [u8; 9]) -> usize {
    for (i, b) in out.iter_mut().enumerate().take(8) {
        if v < 0x80 {
            *b = v as u8;
            return i + 1;
        }
        *b = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
    }
    out[8] = v as u8;
    9
}

#[cfg(test)]
mod tests {
    use super::*;
    use jfr_format::write;

    fn encoded(f: impl Fn(&mut Encoder<'_>)) -> Vec<u8> {
        let mut out = Vec::new();
        encode_into_vec(&mut out, f);
        out
    }

    fn varint_values() -> Vec<u64> {
        let mut values = vec![0u64, 1, 0x7f, 0x80, 0x3fff, 0x4000, u64::MAX, i64::MAX as u64, i64::MIN as u64];
        for shift in 0..64 {
            let p = 1u64 << shift;
            values.extend([p - 1, p, p + 1, p.wrapping_neg(), !p]);
        }
        values
    }

    /// Every value, in roomy and in tight space, is what the format crate's writer makes.
    #[test]
    fn values_match_the_format_writer() {
        for v in varint_values() {
            let mut theirs = Vec::new();
            write::put_varint(&mut theirs, v);
            assert_eq!(encoded(|e| e.put_varint(v)), theirs, "varint of {v:#x}");
            // Exactly enough room: the bytewise path.
            let mut space = vec![0u8; theirs.len()];
            let range = space.as_mut_ptr_range();
            // SAFETY: `space` is writable and only reached through this encoder.
            let mut enc = unsafe { Encoder::new(range.start, range.end) };
            enc.put_varint(v);
            assert!(!enc.is_full());
            assert_eq!(space, theirs, "varint of {v:#x} in tight space");
        }
        for s in [None, Some(""), Some("x"), Some("ünïcödé"), Some(&*"y".repeat(300))] {
            let mut theirs = Vec::new();
            write::put_string(&mut theirs, s);
            assert_eq!(encoded(|e| e.put_string(s)), theirs, "string {s:?}");
        }
        let mut theirs = Vec::new();
        write::put_float(&mut theirs, 1.5);
        write::put_double(&mut theirs, -2.25);
        write::put_bool(&mut theirs, true);
        assert_eq!(
            encoded(|e| {
                e.put_float(1.5);
                e.put_double(-2.25);
                e.put_bool(true);
            }),
            theirs
        );
    }

    /// A value that does not fit writes nothing past the end, and nothing after it is written.
    #[test]
    fn a_full_encoder_stays_in_its_space() {
        // 9 bytes for the varint, 1 for the byte.
        for room in 0..10 {
            let mut space = vec![0xAAu8; room + 16];
            let start = space.as_mut_ptr();
            // SAFETY: the first `room` bytes of `space` are writable and only reached here.
            let mut enc = unsafe { Encoder::new(start, start.add(room)) };
            enc.put_varint(u64::MAX);
            enc.put_byte(1);
            assert!(enc.is_full(), "room {room}");
            assert!(space[room..].iter().all(|&b| b == 0xAA), "wrote past the end with room {room}");
        }
    }

    /// In-place framing equals `begin_record` .. `end_record` for every size around the limits.
    #[test]
    fn framing_matches_the_format_writer() {
        for payload_len in [0usize, 1, 100, 122, 123, 124, 125, 126, 127, 128, 200, 20_000] {
            let payload: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
            let mut theirs = Vec::new();
            let token = write::begin_record(&mut theirs, 300);
            theirs.extend_from_slice(&payload);
            write::end_record(&mut theirs, token);
            let mut space = vec![0u8; payload_len + 16];
            let range = space.as_mut_ptr_range();
            // SAFETY: `space` is writable and only reached through this encoder.
            let mut enc = unsafe { Encoder::new(range.start, range.end) };
            let start = enc.position();
            enc.put_byte(0);
            enc.put_varint(300);
            enc.put_bytes(&payload);
            let end = enc.finish_record(start).expect("fits");
            let len = end as usize - range.start as usize;
            assert_eq!(&space[..len], &theirs[..], "record with {payload_len} payload bytes");
        }
    }
}
