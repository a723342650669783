//! The one duration grammar of the harness, for command-line flags and scenario keys alike.
//!
//! A duration is a bare number of seconds (`90`, `1.5`) or one or more numbers, each with
//! a unit, added up: `200ms`, `2s`, `1.5s`, `10m`, `2h`, `1m30s`, `1h30m`. The units are
//! `ms`, `s`, `m` and `h`; numbers may have decimals; nothing below a nanosecond is kept.
//! What a caller allows beyond that (above zero, at most an hour) is the caller's check.
//! [`format_duration`] writes a duration the way [`parse_duration`] reads it back.

use std::time::Duration;

const NANOS_PER_MS: u128 = 1_000_000;
const NANOS_PER_S: u128 = 1_000_000_000;
const NANOS_PER_M: u128 = 60 * NANOS_PER_S;
const NANOS_PER_H: u128 = 3600 * NANOS_PER_S;

/// Digits of a fraction that are looked at: beyond these, a digit is worth less than a
/// nanosecond even in hours.
const FRACTION_DIGITS: usize = 20;

/// Parses a duration as the module describes it; the error names `text`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err(
            "empty duration (write it like \"90s\", \"200ms\", \"1m30s\" or \"2h\")".into(),
        );
    }
    if text.starts_with('-') {
        return Err(format!("{text:?}: a duration cannot be negative"));
    }
    let is_number_char = |c: char| c.is_ascii_digit() || c == '.';
    let mut total: u128 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !is_number_char(c))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        if number.is_empty() {
            return Err(format!(
                "{text:?} is not a duration: a number must come before {after:?} (write it like \"90s\", \"200ms\", \"1m30s\")"
            ));
        }
        let unit_end = after.find(is_number_char).unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let unit_nanos = match unit {
            "" if number.len() == text.len() => NANOS_PER_S,
            "" => return Err(format!("{text:?}: {number} has no unit (ms, s, m or h)")),
            "ms" => NANOS_PER_MS,
            "s" => NANOS_PER_S,
            "m" => NANOS_PER_M,
            "h" => NANOS_PER_H,
            other => {
                return Err(format!(
                    "{text:?}: unknown unit {other:?} (the units are ms, s, m and h)"
                ))
            }
        };
        let nanos = match nanos_of(number, unit_nanos) {
            Ok(nanos) => nanos,
            Err(NumberError::NotANumber) => {
                return Err(format!("{text:?}: {number:?} is not a number"))
            }
            Err(NumberError::TooLarge) => return Err(too_long(text)),
        };
        total = total.checked_add(nanos).ok_or_else(|| too_long(text))?;
        rest = next;
    }
    let secs = u64::try_from(total / NANOS_PER_S).map_err(|_| too_long(text))?;
    // Below NANOS_PER_S, so it fits.
    let nanos = (total % NANOS_PER_S) as u32;
    Ok(Duration::new(secs, nanos))
}

fn too_long(text: &str) -> String {
    format!("{text:?}: too long a duration")
}

enum NumberError {
    NotANumber,
    TooLarge,
}

/// `number` (digits with at most one `.`) of a unit `unit_nanos` long, in nanoseconds.
fn nanos_of(number: &str, unit_nanos: u128) -> Result<u128, NumberError> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') || (whole.is_empty() && fraction.is_empty()) {
        return Err(NumberError::NotANumber);
    }
    // Digits only from here, so the only way to fail is by being too large.
    let whole_nanos = if whole.is_empty() {
        0
    } else {
        whole
            .parse::<u128>()
            .ok()
            .and_then(|whole| whole.checked_mul(unit_nanos))
            .ok_or(NumberError::TooLarge)?
    };
    let fraction = &fraction[..fraction.len().min(FRACTION_DIGITS)];
    let fraction_nanos = if fraction.is_empty() {
        0
    } else {
        // At most FRACTION_DIGITS digits times an hour in nanoseconds fits a u128.
        let digits: u128 = fraction.parse().map_err(|_| NumberError::NotANumber)?;
        digits.saturating_mul(unit_nanos) / 10u128.pow(fraction.len() as u32)
    };
    whole_nanos
        .checked_add(fraction_nanos)
        .ok_or(NumberError::TooLarge)
}

/// `duration` written so that [`parse_duration`] reads back exactly it: in the largest of
/// `h`, `m`, `s`, `ms` that it is a whole number of (`2h`, `90s`, `1500ms`), else in
/// seconds with as many decimals as it needs (`0.000001s`).
pub fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    for (unit, size) in [
        ("h", NANOS_PER_H),
        ("m", NANOS_PER_M),
        ("s", NANOS_PER_S),
        ("ms", NANOS_PER_MS),
    ] {
        // (No `is_multiple_of`: the workspace's MSRV is 1.80.)
        let (whole, rest) = (nanos / size, nanos % size);
        if rest == 0 {
            return format!("{whole}{unit}");
        }
    }
    let fraction = format!("{:09}", nanos % NANOS_PER_S);
    format!(
        "{}.{}s",
        nanos / NANOS_PER_S,
        fraction.trim_end_matches('0')
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(ms: u64) -> Result<Duration, String> {
        Ok(Duration::from_millis(ms))
    }

    #[test]
    fn durations_parse_as_people_write_them() {
        assert_eq!(parse_duration("90"), ms(90_000));
        assert_eq!(parse_duration("1.5"), ms(1500));
        assert_eq!(parse_duration("90s"), ms(90_000));
        assert_eq!(parse_duration("10m"), ms(600_000));
        assert_eq!(parse_duration("2h"), ms(7_200_000));
        assert_eq!(parse_duration("1h30m"), ms(5_400_000));
        assert_eq!(parse_duration("1m30s"), ms(90_000));
        assert_eq!(parse_duration("1.5m"), ms(90_000));
        assert_eq!(parse_duration("200ms"), ms(200));
        assert_eq!(parse_duration("2s"), ms(2000));
        assert_eq!(parse_duration("1.5s"), ms(1500));
        assert_eq!(parse_duration("1m"), ms(60_000));
        assert_eq!(parse_duration("1s500ms"), ms(1500));
        assert_eq!(parse_duration(" 20s "), ms(20_000));
        assert_eq!(parse_duration(".5s"), ms(500));
        assert_eq!(parse_duration("0"), ms(0));
        assert_eq!(parse_duration("0s"), ms(0));
        assert_eq!(parse_duration("0.000000001s"), Ok(Duration::from_nanos(1)));
        assert_eq!(
            parse_duration("18446744073709551615s"),
            Ok(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn mistakes_are_refused_naming_the_text() {
        for bad in [
            "m",
            "10x",
            "10m5",
            "-5",
            "-5s",
            "ten",
            "NaN",
            "inf",
            "1.2.3s",
            ".s",
            "5 s",
            "1h 30m",
            "+5",
            "18446744073709551616s",
            "99999999999999999999999999999999999999999h",
        ] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains(&format!("{bad:?}")), "{bad:?}: {error}");
        }
        for empty in ["", "  "] {
            assert!(parse_duration(empty).expect_err(empty).contains("empty"));
        }
        assert!(parse_duration("10x")
            .unwrap_err()
            .contains("unknown unit \"x\""));
        assert!(parse_duration("10m5")
            .unwrap_err()
            .contains("5 has no unit"));
        assert!(parse_duration("-5").unwrap_err().contains("negative"));
    }

    #[test]
    fn durations_are_written_in_their_largest_whole_unit() {
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_micros(1)), "0.000001s");
        assert_eq!(format_duration(Duration::new(3, 5)), "3.000000005s");
    }

    proptest! {
        #[test]
        fn format_then_parse_gives_the_duration_back(
            secs in prop_oneof![0u64..100_000, any::<u64>()],
            nanos in prop_oneof![Just(0u32), (0u32..1000).prop_map(|ms| ms * 1_000_000), 0u32..1_000_000_000],
        ) {
            let duration = Duration::new(secs, nanos);
            let text = format_duration(duration);
            prop_assert_eq!(parse_duration(&text), Ok(duration), "{}", text);
        }

        #[test]
        fn a_compound_is_the_sum_of_its_parts(h in 0u64..100, m in 0u64..100, s in 0u64..100, ms in 0u64..1000) {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let expected = Duration::from_millis(((h * 60 + m) * 60 + s) * 1000 + ms);
            prop_assert_eq!(parse_duration(&text), Ok(expected));
        }
    }
}
