//! The one duration grammar of every flag and scenario key: a number with a unit, `ms`,
//! `s`, `m` or `h`, decimals allowed (`1.5s`), units compounded from largest to smallest
//! (`1h30m`, `1m30s`, `2s500ms`); a bare number is seconds (`90`, `0.5`).
//!
//! Parsing is exact (decimal digits become nanoseconds by integer arithmetic, digits
//! past the nanosecond dropped), so [`format_duration`] and [`parse_duration`] round-trip
//! every `Duration` to the nanosecond. Limits that belong to one caller (a scenario's
//! "at most an hour", a flag's "positive") are the caller's.

use std::time::Duration;

const UNITS: [(&str, u128); 4] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
];

/// Parses `200ms`, `2s`, `1.5s`, `90`, `10m`, `1h30m`, `1m30s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty duration (write e.g. \"500ms\", \"2s\", \"1m30s\")".into());
    }
    if trimmed.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return to_duration(number_nanos(trimmed, 1_000_000_000, text)?, text);
    }
    let mut total: u128 = 0;
    let mut rest = trimmed;
    let mut smallest_so_far = usize::MAX;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "{text:?}: a number must come before {:?}",
                rest.chars().next().unwrap_or(' ')
            ));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let Some(rank) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(if unit.is_empty() {
                format!("{text:?}: {number} has no unit (h, m, s, ms)")
            } else {
                format!("{text:?}: unknown unit {unit:?} (use h, m, s, ms)")
            });
        };
        if smallest_so_far != usize::MAX && rank <= smallest_so_far {
            return Err(format!(
                "{text:?}: write units from largest to smallest, each once (\"1m30s\")"
            ));
        }
        smallest_so_far = rank;
        total = total
            .checked_add(number_nanos(number, UNITS[rank].1, text)?)
            .ok_or_else(|| format!("{text:?}: too long"))?;
        rest = next;
    }
    to_duration(total, text)
}

/// A duration as [`parse_duration`] reads it back exactly: `90s`, `1500ms`, `0.25s`,
/// `0.000001s`.
pub fn format_duration(duration: Duration) -> String {
    let secs = duration.as_secs();
    let nanos = duration.subsec_nanos();
    if nanos == 0 {
        format!("{secs}s")
    } else if nanos.is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        let fraction = format!("{nanos:09}");
        format!("{secs}.{}s", fraction.trim_end_matches('0'))
    }
}

/// `number` (digits, at most one `.`) times `unit` nanoseconds.
fn number_nanos(number: &str, unit: u128, text: &str) -> Result<u128, String> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && fraction.is_empty())
        || fraction.contains('.')
        || !whole.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("{text:?}: {number:?} is not a number"));
    }
    let too_long = || format!("{text:?}: too long");
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_long())?
    };
    let mut nanos = whole.checked_mul(unit).ok_or_else(too_long)?;
    // Each decimal digit is worth a tenth of the one before; digits past the
    // nanosecond add nothing.
    let mut place = unit;
    for digit in fraction.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        nanos += u128::from(digit - b'0') * place;
    }
    Ok(nanos)
}

fn to_duration(nanos: u128, text: &str) -> Result<Duration, String> {
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| format!("{text:?}: too long"))?;
    // The remainder is below 10^9 and fits.
    let subsec = (nanos % 1_000_000_000) as u32;
    Ok(Duration::new(secs, subsec))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn durations_parse_as_people_write_them() {
        assert_eq!(parse_duration("90"), Ok(ms(90_000)));
        assert_eq!(parse_duration("0.5"), Ok(ms(500)));
        assert_eq!(parse_duration("90s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("200ms"), Ok(ms(200)));
        assert_eq!(parse_duration("1.5s"), Ok(ms(1500)));
        assert_eq!(parse_duration("10m"), Ok(ms(600_000)));
        assert_eq!(parse_duration("2h"), Ok(ms(7_200_000)));
        assert_eq!(parse_duration("1h30m"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("2s500ms"), Ok(ms(2500)));
        assert_eq!(parse_duration(" 1.5m "), Ok(ms(90_000)));
        assert_eq!(parse_duration("0s"), Ok(ms(0)));
    }

    #[test]
    fn bad_durations_say_why() {
        for (text, why) in [
            ("", "empty"),
            ("s", "number must come before"),
            ("10x", "unknown unit"),
            ("1m30", "has no unit"),
            ("30s1m", "largest to smallest"),
            ("1s1s", "largest to smallest"),
            ("1..5s", "not a number"),
            ("-1s", "number must come before"),
            ("99999999999999999999999h", "too long"),
            ("NaN", "number must come before"),
        ] {
            let error = parse_duration(text).expect_err(text);
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }

    #[test]
    fn formats_read_back() {
        assert_eq!(format_duration(ms(90_000)), "90s");
        assert_eq!(format_duration(ms(1500)), "1500ms");
        assert_eq!(format_duration(Duration::new(0, 250_000_000)), "250ms");
        assert_eq!(format_duration(Duration::new(1, 1)), "1.000000001s");
    }

    proptest! {
        #[test]
        fn every_duration_round_trips(secs in 0u64..10_000_000_000, nanos in 0u32..1_000_000_000) {
            let duration = Duration::new(secs, nanos);
            prop_assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }
    }
}
