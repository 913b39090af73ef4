//! Wall-clock formatting of epoch nanoseconds (UTC), without a date crate.

/// (year, month, day) of the day `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    hour: i64,
    minute: i64,
    second: i64,
    nanos: i64,
}

fn parts(epoch_nanos: i64) -> Parts {
    let secs = epoch_nanos.div_euclid(1_000_000_000);
    let nanos = epoch_nanos.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    Parts { year, month, day, hour: sod / 3600, minute: sod / 60 % 60, second: sod % 60, nanos }
}

/// `2026-11-29T16:59:14.957127984Z`, as `jfr print --json` writes timestamps.
pub fn iso_nanos(epoch_nanos: i64) -> String {
    let p = parts(epoch_nanos);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", p.year, p.month, p.day, p.hour, p.minute, p.second, p.nanos)
}

/// `2026-11-29 16:59:14`, as `jfr summary` writes the start.
pub fn date_time_seconds(epoch_nanos: i64) -> String {
    let p = parts(epoch_nanos);
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", p.year, p.month, p.day, p.hour, p.minute, p.second)
}

/// A span in the largest unit that keeps it readable: `840 ns`, `12.5 us`, `3.250 ms`, `2.000 s`.
pub fn human_span(nanos: i64) -> String {
    let abs = nanos.unsigned_abs();
    if abs < 1_000 {
        format!("{nanos} ns")
    } else if abs < 1_000_000 {
        format!("{:.3} us", nanos as f64 / 1e3)
    } else if abs < 1_000_000_000 {
        format!("{:.3} ms", nanos as f64 / 1e6)
    } else {
        format!("{:.3} s", nanos as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_epoch_nanos_in_utc() {
        assert_eq!(iso_nanos(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(iso_nanos(1_795_971_554_957_127_984), "2026-11-29T16:59:14.957127984Z");
        assert_eq!(date_time_seconds(951_782_400_000_000_000), "2000-02-29 00:00:00");
        assert_eq!(iso_nanos(-1), "1969-12-31T23:59:59.999999999Z");
    }

    #[test]
    fn spans_pick_a_readable_unit() {
        assert_eq!(human_span(840), "840 ns");
        assert_eq!(human_span(12_500), "12.500 us");
        assert_eq!(human_span(2_000_000_000), "2.000 s");
    }
}
