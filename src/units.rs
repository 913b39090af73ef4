//! Durations and sizes as people type them (`10ms`, `512KiB`), one spelling for every front end:
//! the CLI's flags, the preloaded library's `RECORDER_OPTIONS` and the `jdk.ActiveSetting` values
//! (`10 ms`) that readers of a recording parse back.

use std::time::Duration;

/// Parses `10ms`, `500us`, `1.5s`, `2m`, `1h`, `1d`, `100ns`, also with a space before the unit
/// (`20 ms`, the JDK's spelling of a setting); a bare number is milliseconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("`{}` is not a duration such as 10ms", text.trim());
    let (value, unit) = split_number(text).ok_or_else(bad)?;
    let nanos_per = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "" | "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86400e9,
        other => return Err(format!("unknown duration unit `{other}` (use ns, us, ms, s, m, h or d)")),
    };
    let nanos = (value * nanos_per).round();
    if nanos >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(Duration::from_nanos(nanos as u64))
}

/// Parses `512KiB`, `1MiB`, `4096` (bytes), `64k`, `2G`: at least one byte.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let (value, unit) = split_number(text).ok_or_else(|| format!("`{}` is not a size such as 512KiB", text.trim()))?;
    let per = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("unknown size unit `{unit}` (use B, KiB, MiB or GiB)")),
    };
    let bytes = value * per;
    if bytes < 1.0 || bytes >= u64::MAX as f64 {
        return Err(format!("`{}`: the size must be at least 1 byte", text.trim()));
    }
    Ok(bytes as u64)
}

/// A finite, non-negative number and the unit after it (trimmed); `None` when there is no number.
fn split_number(text: &str) -> Option<(f64, &str)> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some((value, unit.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_every_unit_and_spelling() {
        assert_eq!(parse_duration("10ms"), Ok(Duration::from_millis(10)));
        assert_eq!(parse_duration("20 ms"), Ok(Duration::from_millis(20)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_millis(7)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("500µs"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_duration("100ns"), Ok(Duration::from_nanos(100)));
        assert_eq!(parse_duration(" 1.5s "), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn bad_durations_say_why() {
        assert_eq!(parse_duration("fast").unwrap_err(), "`fast` is not a duration such as 10ms");
        assert_eq!(parse_duration("-1ms").unwrap_err(), "`-1ms` is not a duration such as 10ms");
        assert_eq!(parse_duration("").unwrap_err(), "`` is not a duration such as 10ms");
        assert!(parse_duration("10 weeks").unwrap_err().contains("unknown duration unit `weeks`"));
        assert!(parse_duration("1e30d").is_err());
    }

    #[test]
    fn sizes_in_every_unit_and_at_least_one_byte() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512KiB"), Ok(512 * 1024));
        assert_eq!(parse_size("64k"), Ok(64 * 1024));
        assert_eq!(parse_size("1 MiB"), Ok(1024 * 1024));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1b"), Ok(1));
        assert!(parse_size("0").unwrap_err().contains("at least 1 byte"));
        assert!(parse_size("0.5").unwrap_err().contains("at least 1 byte"));
        assert!(parse_size("big").unwrap_err().contains("not a size such as 512KiB"));
        assert!(parse_size("3 TiB").unwrap_err().contains("unknown size unit `TiB`"));
    }
}
