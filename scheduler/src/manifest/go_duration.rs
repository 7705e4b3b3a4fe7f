//! Go's `time.ParseDuration` syntax, which Volcano's duration arguments use: an optional
//! sign, then one or more `number unit` pairs, where the number may have a fraction
//! (`1.5h`, `1h30m`, `300ms`, `.5s`) and the unit is `ns`, `us` (`µs`, `μs`), `ms`, `s`,
//! `m` or `h`; a bare `0` is zero. As in Go, the total must fit in an `i64` of nanoseconds
//! (about 292 years).

use thiserror::Error;

/// Why a text is not a Go duration.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum GoDurationError {
    #[error("is empty")]
    Empty,
    #[error("has no number before `{0}`")]
    MissingNumber(String),
    #[error("has a number without a unit (use ns, us, ms, s, m or h, e.g. 90s or 1.5h)")]
    MissingUnit,
    #[error("has the unknown unit `{0}` (use ns, us, ms, s, m or h)")]
    UnknownUnit(String),
    #[error("is longer than Go allows (about 292 years)")]
    Overflow,
}

const NANOS_PER_UNIT: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Fraction digits beyond this cannot change a nanosecond total of an `i64`.
const MAX_FRACTION_DIGITS: usize = 18;

/// Parses `text` as Go would, into nanoseconds.
pub fn parse_go_duration(text: &str) -> Result<i64, GoDurationError> {
    let (negative, mut rest) = match text.as_bytes().first() {
        None => return Err(GoDurationError::Empty),
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        Some(_) => (false, text),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(GoDurationError::MissingNumber(text.to_string()));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (nanos, after) = one_term(rest)?;
        total = total.saturating_add(nanos);
        if total > i64::MAX as u128 + u128::from(negative) {
            return Err(GoDurationError::Overflow);
        }
        rest = after;
    }
    let signed = if negative {
        0i128 - total as i128
    } else {
        total as i128
    };
    i64::try_from(signed).map_err(|_| GoDurationError::Overflow)
}

/// One `number unit` pair at the start of `text`: its nanoseconds and the rest.
fn one_term(text: &str) -> Result<(u128, &str), GoDurationError> {
    let whole_len = text.bytes().take_while(u8::is_ascii_digit).count();
    let (whole, rest) = text.split_at(whole_len);
    let (fraction, rest) = match rest.strip_prefix('.') {
        Some(after) => {
            let len = after.bytes().take_while(u8::is_ascii_digit).count();
            after.split_at(len)
        }
        None => ("", rest),
    };
    if whole.is_empty() && fraction.is_empty() {
        let shown: String = rest.chars().take(8).collect();
        return Err(GoDurationError::MissingNumber(shown));
    }
    let unit_len = rest
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(rest.len());
    let (unit, rest) = rest.split_at(unit_len);
    if unit.is_empty() {
        return Err(GoDurationError::MissingUnit);
    }
    let &(_, per_unit) = NANOS_PER_UNIT
        .iter()
        .find(|(name, _)| *name == unit)
        .ok_or_else(|| GoDurationError::UnknownUnit(unit.chars().take(8).collect()))?;
    Ok((term_nanos(whole, fraction, per_unit)?, rest))
}

/// `whole.fraction` units in nanoseconds (the fraction truncated to whole nanoseconds).
fn term_nanos(whole: &str, fraction: &str, per_unit: u128) -> Result<u128, GoDurationError> {
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| GoDurationError::Overflow)?
    };
    let mut nanos = whole
        .checked_mul(per_unit)
        .ok_or(GoDurationError::Overflow)?;
    let digits = &fraction[..fraction.len().min(MAX_FRACTION_DIGITS)];
    if !digits.is_empty() {
        let numerator: u128 = digits.parse().map_err(|_| GoDurationError::Overflow)?;
        let scale = 10u128.pow(digits.len() as u32);
        nanos = nanos.saturating_add(numerator * per_unit / scale);
    }
    Ok(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    #[test]
    fn go_durations_with_fractions_and_several_units_parse_as_go_parses_them() {
        assert_eq!(parse_go_duration("1.5h"), Ok(5_400 * SECOND));
        assert_eq!(parse_go_duration("90m"), Ok(5_400 * SECOND));
        assert_eq!(parse_go_duration("1h30m"), Ok(5_400 * SECOND));
        assert_eq!(parse_go_duration("300ms"), Ok(300_000_000));
        assert_eq!(parse_go_duration("10s"), Ok(10 * SECOND));
        assert_eq!(parse_go_duration(".5s"), Ok(SECOND / 2));
        assert_eq!(parse_go_duration("1.s"), Ok(SECOND));
        assert_eq!(parse_go_duration("2µs3ns"), Ok(2_003));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert_eq!(parse_go_duration("-1m"), Ok(-60 * SECOND));
        assert_eq!(parse_go_duration("2562047h47m16.854775807s"), Ok(i64::MAX));
    }

    #[test]
    fn text_go_refuses_is_refused_with_the_reason() {
        assert_eq!(parse_go_duration(""), Err(GoDurationError::Empty));
        assert_eq!(parse_go_duration("10"), Err(GoDurationError::MissingUnit));
        assert_eq!(
            parse_go_duration("1.5hours"),
            Err(GoDurationError::UnknownUnit("hours".into()))
        );
        assert!(matches!(
            parse_go_duration("h"),
            Err(GoDurationError::MissingNumber(_))
        ));
        assert!(matches!(
            parse_go_duration("."),
            Err(GoDurationError::MissingNumber(_))
        ));
        assert_eq!(
            parse_go_duration("2562048h"),
            Err(GoDurationError::Overflow)
        );
        assert_eq!(
            parse_go_duration("99999999999999999999999999999999999999999h"),
            Err(GoDurationError::Overflow)
        );
        assert!(parse_go_duration("1h 30m").is_err());
    }
}
