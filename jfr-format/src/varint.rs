//! JFR's compressed integers: LEB128 with 7 payload bits in each of the first 8 bytes and a 9th byte
//! of 8 full bits, so any u64 fits in 9 bytes. Negative values are their two's complement, never
//! zigzag (docs/jfr-format.md, "Encodings").

/// Largest encoded length of a u64.
pub const MAX_LEN: usize = 9;

/// Number of bytes [`write_u64`] uses for `v`.
#[inline]
pub fn encoded_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    if bits > 56 {
        9
    } else {
        bits.div_ceil(7)
    }
}

/// Appends the shortest encoding of `v`.
#[inline]
pub fn write_u64(out: &mut Vec<u8>, mut v: u64) {
    if v < 0x80 {
        out.push(v as u8);
        return;
    }
    let mut buf = [0u8; MAX_LEN];
    let mut n = 0;
    while n < 8 {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            buf[n] = byte;
            n += 1;
            out.extend_from_slice(&buf[..n]);
            return;
        }
        buf[n] = byte | 0x80;
        n += 1;
    }
    buf[8] = v as u8;
    out.extend_from_slice(&buf);
}

/// Appends `v` in exactly `width` bytes (2..=8), with the continuation bit on all but the last: the
/// "padded" form writers use for values patched later. `v` must fit in `7 * width` bits.
pub fn write_padded(out: &mut Vec<u8>, v: u64, width: usize) {
    let start = out.len();
    out.resize(start + width, 0);
    patch_padded(&mut out[start..start + width], v);
}

/// Overwrites `slot` (2..=8 bytes) with the padded encoding of `v`.
///
/// # Panics
/// If `v` does not fit in `7 * slot.len()` bits (a writer bug, never input-driven).
pub fn patch_padded(slot: &mut [u8], v: u64) {
    let width = slot.len();
    assert!(
        (1..=8).contains(&width) && (width == 8 || v >> (7 * width) == 0),
        "value {v} does not fit a {width}-byte padded varint"
    );
    for (i, b) in slot.iter_mut().enumerate() {
        let part = ((v >> (7 * i)) & 0x7f) as u8;
        *b = if i + 1 < width { part | 0x80 } else { part };
    }
}

/// Decodes a varint from the start of `data`: the value and the bytes used, or `None` if the data
/// ends inside it.
#[inline]
pub fn read_u64(data: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for i in 0..8 {
        let b = *data.get(i)?;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    let b = *data.get(8)?;
    Some((v | (u64::from(b) << 56), 9))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_encodings_match_hotspot() {
        assert_eq!(read_u64(&[0xdf, 0x80, 0x80, 0x00]), Some((95, 4)));
        assert_eq!(read_u64(&[0x81, 0x80, 0x80, 0x00]), Some((1, 4)));
        assert_eq!(read_u64(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Some((0xffff_ffff, 5)));
        let mut out = Vec::new();
        write_u64(&mut out, u64::MAX);
        assert_eq!(out, [0xff; 9]);
        assert_eq!(encoded_len(u64::MAX), 9);
        assert_eq!(encoded_len(0), 1);
        assert_eq!(encoded_len(127), 1);
        assert_eq!(encoded_len(128), 2);
    }

    #[test]
    fn truncated_varint_is_none() {
        assert_eq!(read_u64(&[0x80, 0x80]), None);
        assert_eq!(read_u64(&[]), None);
        assert_eq!(read_u64(&[0xff; 8]), None);
    }

    #[test]
    fn padded_round_trips() {
        let mut out = Vec::new();
        write_padded(&mut out, 95, 4);
        assert_eq!(out, [0xdf, 0x80, 0x80, 0x00]);
        let mut out = Vec::new();
        write_padded(&mut out, (1 << 56) - 1, 8);
        assert_eq!(read_u64(&out), Some(((1 << 56) - 1, 8)));
    }
}
