//! Hand-written JSON output: the hot path of `print --json` appends straight into a byte buffer.

/// Appends `s` as a JSON string literal (quotes included).
pub fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                unicode_escape(out, u16::from(b));
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(escape);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

fn unicode_escape(out: &mut Vec<u8>, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(b"\\u");
    for shift in [12, 8, 4, 0] {
        out.push(HEX[usize::from((unit >> shift) & 0xf)]);
    }
}

/// Appends a Java `char` (one UTF-16 code unit) as a one-character JSON string. A lone surrogate
/// is written as a `\uXXXX` escape.
pub fn char_unit(out: &mut Vec<u8>, unit: u16) {
    match char::from_u32(u32::from(unit)) {
        Some(c) => {
            let mut buf = [0u8; 4];
            string(out, c.encode_utf8(&mut buf));
        }
        None => {
            out.push(b'"');
            unicode_escape(out, unit);
            out.push(b'"');
        }
    }
}

/// Appends an integer.
pub fn int(out: &mut Vec<u8>, v: i64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Appends an unsigned integer.
pub fn uint(out: &mut Vec<u8>, v: u64) {
    let mut buf = itoa::Buffer::new();
    out.extend_from_slice(buf.format(v).as_bytes());
}

/// Appends a float: the shortest decimal that reads back to the same value. JSON has no NaN or
/// infinities, so those become the strings `"NaN"`, `"Infinity"` and `"-Infinity"` (Java's names).
pub fn float(out: &mut Vec<u8>, v: f64, single: bool) {
    if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"\"Infinity\"" } else { b"\"-Infinity\"" });
    } else if single {
        // serde_json writes the shortest round-trip form, in exponent form for very large and
        // small magnitudes, and much faster than `{:?}`.
        let _ = serde_json::to_writer(&mut *out, &(v as f32));
    } else {
        let _ = serde_json::to_writer(&mut *out, &v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_and_parse_back() {
        let text = "a\"b\\c\nd\te\u{1}ü€";
        let json = s(|o| string(o, text));
        assert_eq!(serde_json::from_str::<String>(&json).unwrap(), text);
    }

    #[test]
    fn floats_are_valid_json() {
        for v in [0.1, -1.05e-6, 1e300, 3.0, 0.0] {
            let json = s(|o| float(o, v, false));
            assert_eq!(serde_json::from_str::<f64>(&json).unwrap(), v, "{json}");
        }
        assert_eq!(s(|o| float(o, 0.1f32.into(), true)), "0.1");
        assert_eq!(s(|o| float(o, f64::NAN, false)), "\"NaN\"");
    }

    #[test]
    fn lone_surrogates_are_escaped() {
        assert_eq!(s(|o| char_unit(o, 0xd800)), "\"\\ud800\"");
        assert_eq!(s(|o| char_unit(o, 0xe9)), "\"é\"");
    }
}
