//! Kubernetes resource quantities, parsed exactly into the integer units phalanx counts in.
//!
//! The grammar is Kubernetes' own (`k8s.io/apimachinery/pkg/api/resource`):
//!
//! ```text
//! quantity  ::= sign? number suffix
//! number    ::= digits | digits '.' digits? | '.' digits
//! suffix    ::= binarySI | decimalSI | ('e' | 'E') sign? digits
//! binarySI  ::= Ki | Mi | Gi | Ti | Pi | Ei
//! decimalSI ::= n | u | m | "" | k | M | G | T | P | E
//! ```
//!
//! The value is never held in floating point: it is `digits × 10^exp10 × 2^exp2`, scaled to
//! the unit the resource is counted in (millicores for `cpu`, bytes for `memory`, a count for
//! everything else) and rounded up, as `Quantity.MilliValue()` / `Value()` do. A quantity that
//! is negative, larger than `i64::MAX` in its unit, or fractional where the resource must be
//! whole (`nvidia.com/gpu: 0.5`) is an error that quotes the text, never a silent 0 or a wrap.

use thiserror::Error;

/// How one resource is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuantityUnit {
    /// `cpu`: thousandths of a core; finer values round up (`0.1m` is `1m`).
    Milli,
    /// `memory`, `ephemeral-storage`, `hugepages-*`: bytes; fractions round up.
    Bytes,
    /// Extended resources (`nvidia.com/gpu`, ...) and `pods`: whole numbers only.
    WholeCount,
}

/// Why a quantity was refused. The caller adds which object and field it came from.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum QuantityError {
    #[error("{text:?} is not a Kubernetes quantity ({why})")]
    Malformed { text: String, why: &'static str },
    #[error("{text:?} is negative; resource quantities must be zero or more")]
    Negative { text: String },
    #[error("{text:?} is too large (the most this resource can hold is {max} {unit})")]
    TooLarge {
        text: String,
        max: i64,
        unit: &'static str,
    },
    #[error("{text:?} is fractional, but this resource is counted in whole units")]
    Fractional { text: String },
}

/// Parses `text` and returns it in `unit` (millicores, bytes or a whole count).
pub fn parse_quantity(text: &str, unit: QuantityUnit) -> Result<i64, QuantityError> {
    let parsed = ParsedQuantity::parse(text)?;
    parsed.to_unit(text, unit)
}

/// `digits × 10^exp10 × 2^exp2`, with `digits` stripped of leading and trailing zeros.
#[derive(Debug)]
struct ParsedQuantity {
    negative: bool,
    /// Significant decimal digits, no leading zeros (empty means the value is zero).
    digits: Vec<u8>,
    exp10: i64,
    exp2: u32,
}

impl ParsedQuantity {
    fn parse(text: &str) -> Result<Self, QuantityError> {
        let malformed = |why| QuantityError::Malformed {
            text: text.to_string(),
            why,
        };
        let bytes = text.as_bytes();
        if bytes.is_empty() {
            return Err(malformed("it is empty"));
        }
        let mut pos = 0;
        let mut negative = false;
        if bytes[0] == b'+' || bytes[0] == b'-' {
            negative = bytes[0] == b'-';
            pos = 1;
        }
        let mut digits: Vec<u8> = Vec::new();
        let mut exp10: i64 = 0;
        let mut seen_digit = false;
        let mut seen_dot = false;
        while pos < bytes.len() {
            let c = bytes[pos];
            if c.is_ascii_digit() {
                seen_digit = true;
                if !(digits.is_empty() && c == b'0') {
                    digits.push(c - b'0');
                }
                if seen_dot {
                    exp10 -= 1;
                }
            } else if c == b'.' && !seen_dot {
                seen_dot = true;
            } else {
                break;
            }
            pos += 1;
        }
        if !seen_digit {
            return Err(malformed("it has no digits"));
        }
        // A leading zero that was skipped after the dot still moved the exponent; that is
        // right: "0.05" is digits [5] with exp10 -2.
        let suffix = &text[pos..];
        let (suffix_exp10, exp2) =
            parse_suffix(suffix).ok_or_else(|| malformed("unknown suffix"))?;
        exp10 = exp10
            .checked_add(suffix_exp10)
            .ok_or_else(|| malformed("exponent out of range"))?;
        while digits.last() == Some(&0) {
            digits.pop();
            exp10 += 1;
        }
        Ok(Self {
            negative,
            digits,
            exp10,
            exp2,
        })
    }

    fn to_unit(&self, text: &str, unit: QuantityUnit) -> Result<i64, QuantityError> {
        if self.digits.is_empty() {
            return Ok(0);
        }
        if self.negative {
            return Err(QuantityError::Negative {
                text: text.to_string(),
            });
        }
        let (scale10, unit_name) = match unit {
            QuantityUnit::Milli => (3, "millicores"),
            QuantityUnit::Bytes => (0, "bytes"),
            QuantityUnit::WholeCount => (0, "units"),
        };
        let too_large = || QuantityError::TooLarge {
            text: text.to_string(),
            max: i64::MAX,
            unit: unit_name,
        };
        // value = digits * 2^exp2 * 10^exp10 (the digits form an integer here).
        let exp10 = self.exp10.saturating_add(scale10);
        // An integer above i64::MAX has at most 19 digits; 40 significant digits with a
        // non-negative exponent are certainly too large, and with a negative one we keep
        // only as many as u128 can carry and remember whether anything was cut off.
        let mut mantissa: u128 = 0;
        let mut dropped_nonzero = false;
        let mut dropped_digits: i64 = 0;
        for &d in &self.digits {
            match mantissa
                .checked_mul(10)
                .and_then(|m| m.checked_add(u128::from(d)))
            {
                Some(m) if m <= u128::from(u64::MAX) << 40 => mantissa = m,
                _ => {
                    dropped_digits += 1;
                    dropped_nonzero |= d != 0;
                }
            }
        }
        let exp10 = exp10.saturating_add(dropped_digits);
        let mut value = mantissa
            .checked_mul(1u128 << self.exp2)
            .ok_or_else(too_large)?;
        let mut fractional = dropped_nonzero;
        if exp10 >= 0 {
            if dropped_nonzero {
                // Digits were dropped only because the number is enormous.
                return Err(too_large());
            }
            for _ in 0..exp10 {
                value = value.checked_mul(10).ok_or_else(too_large)?;
                if value > i64::MAX as u128 {
                    return Err(too_large());
                }
            }
        } else {
            // Divide by 10 once per negative power, rounding up; nested ceilings equal one
            // ceiling of the whole quotient for positive integers.
            let mut remaining = exp10.unsigned_abs();
            while remaining > 0 && value > 0 {
                if value % 10 != 0 {
                    fractional = true;
                }
                value = value / 10 + u128::from(value % 10 != 0);
                remaining -= 1;
            }
            if remaining > 0 {
                fractional = true;
            }
            if fractional && value == 0 {
                value = 1;
            }
        }
        if unit == QuantityUnit::WholeCount && fractional {
            return Err(QuantityError::Fractional {
                text: text.to_string(),
            });
        }
        i64::try_from(value).map_err(|_| too_large())
    }
}

/// Returns (power of ten, power of two) for a suffix.
fn parse_suffix(suffix: &str) -> Option<(i64, u32)> {
    let by_name = match suffix {
        "" => Some((0, 0)),
        "n" => Some((-9, 0)),
        "u" => Some((-6, 0)),
        "m" => Some((-3, 0)),
        "k" => Some((3, 0)),
        "M" => Some((6, 0)),
        "G" => Some((9, 0)),
        "T" => Some((12, 0)),
        "P" => Some((15, 0)),
        "E" => Some((18, 0)),
        "Ki" => Some((0, 10)),
        "Mi" => Some((0, 20)),
        "Gi" => Some((0, 30)),
        "Ti" => Some((0, 40)),
        "Pi" => Some((0, 50)),
        "Ei" => Some((0, 60)),
        _ => None,
    };
    if by_name.is_some() {
        return by_name;
    }
    let rest = suffix
        .strip_prefix('e')
        .or_else(|| suffix.strip_prefix('E'))?;
    let (negative, digits) = match rest.as_bytes().first()? {
        b'+' => (false, &rest[1..]),
        b'-' => (true, &rest[1..]),
        _ => (false, rest),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Exponents beyond a few thousand are meaningless for i64 values; clamp so the
    // arithmetic above stays in range while still rejecting (or rounding) correctly.
    let magnitude: i64 = digits.parse::<i64>().unwrap_or(i64::MAX).min(100_000);
    Some((if negative { -magnitude } else { magnitude }, 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use QuantityUnit::*;

    #[track_caller]
    fn ok(text: &str, unit: QuantityUnit, want: i64) {
        assert_eq!(parse_quantity(text, unit), Ok(want), "{text}");
    }

    #[test]
    fn cpu_quantities_are_millicores() {
        ok("2", Milli, 2000);
        ok("500m", Milli, 500);
        ok("0.5", Milli, 500);
        ok("1.5", Milli, 1500);
        ok(".5", Milli, 500);
        ok("5.", Milli, 5000);
        ok("1e3", Milli, 1_000_000);
        ok("2k", Milli, 2_000_000);
        ok("+3", Milli, 3000);
        ok("0.0001", Milli, 1); // rounds up like MilliValue()
        ok("100u", Milli, 1);
        ok("1000000n", Milli, 1);
        ok("0", Milli, 0);
        ok("-0", Milli, 0);
        ok("00012", Milli, 12000);
    }

    #[test]
    fn memory_quantities_are_bytes() {
        ok("4Gi", Bytes, 4 << 30);
        ok("1.5Gi", Bytes, 3 << 29);
        ok("128974848", Bytes, 128_974_848);
        ok("129e6", Bytes, 129_000_000);
        ok("129M", Bytes, 129_000_000);
        ok("123Mi", Bytes, 123 << 20);
        ok("1Ki", Bytes, 1024);
        ok("7Ei", Bytes, 7 << 60);
        ok("0.5", Bytes, 1);
        ok("1E-3", Bytes, 1);
    }

    #[test]
    fn whole_counts_refuse_fractions() {
        ok("8", WholeCount, 8);
        ok("1e1", WholeCount, 10);
        ok("2000m", WholeCount, 2);
        assert!(matches!(
            parse_quantity("0.5", WholeCount),
            Err(QuantityError::Fractional { .. })
        ));
        assert!(matches!(
            parse_quantity("1500m", WholeCount),
            Err(QuantityError::Fractional { .. })
        ));
    }

    #[test]
    fn hostile_quantities_are_errors_that_quote_the_text() {
        for (text, unit) in [("-1", WholeCount), ("-1E30", Milli), ("-0.5", Bytes)] {
            let err = parse_quantity(text, unit).unwrap_err();
            assert!(
                matches!(err, QuantityError::Negative { .. }),
                "{text}: {err}"
            );
            assert!(err.to_string().contains(text));
        }
        for (text, unit) in [
            ("1e400", Milli),
            ("9223372036854775808", WholeCount),
            ("1Ei", Milli),
            ("9223372036854775807", Milli),
            ("99999999999999999999999999999999999999999999999", Bytes),
            ("8Ei", Bytes),
        ] {
            let err = parse_quantity(text, unit).unwrap_err();
            assert!(
                matches!(err, QuantityError::TooLarge { .. }),
                "{text}: {err}"
            );
        }
        for text in [
            "abc", "", "1.2.3", "1Gb", "e3", "1e", "1e+", "--1", "1 Gi", "Gi", ".",
        ] {
            let err = parse_quantity(text, Bytes).unwrap_err();
            assert!(
                matches!(err, QuantityError::Malformed { .. }),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn largest_values_fit_exactly() {
        ok("9223372036854775807", WholeCount, i64::MAX);
        ok("9223372036854775807m", Milli, i64::MAX);
        ok("1e-400", Bytes, 1);
    }

    proptest::proptest! {
        #![proptest_config(crate::proptest_config(256, 0x0017_9A27))]

        #[test]
        fn integers_round_trip_in_every_unit(n in 0i64..=i64::MAX / 1000) {
            proptest::prop_assert_eq!(parse_quantity(&n.to_string(), Bytes), Ok(n));
            proptest::prop_assert_eq!(parse_quantity(&n.to_string(), WholeCount), Ok(n));
            proptest::prop_assert_eq!(parse_quantity(&format!("{n}m"), Milli), Ok(n));
            proptest::prop_assert_eq!(parse_quantity(&n.to_string(), Milli), Ok(n * 1000));
        }

        #[test]
        fn decimal_and_milli_spellings_agree(whole in 0i64..1_000_000, frac in 0i64..1000) {
            let decimal = format!("{whole}.{frac:03}");
            let milli = format!("{}m", whole * 1000 + frac);
            proptest::prop_assert_eq!(parse_quantity(&decimal, Milli), parse_quantity(&milli, Milli));
        }

        #[test]
        fn binary_suffixes_multiply_by_powers_of_1024(n in 0i64..1_000_000, power in 1u32..=4) {
            let suffix = ["Ki", "Mi", "Gi", "Ti"][power as usize - 1];
            let want = n.checked_mul(1i64 << (10 * power));
            let got = parse_quantity(&format!("{n}{suffix}"), Bytes).ok();
            proptest::prop_assert_eq!(got, want);
        }

        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,24}") {
            let _ = parse_quantity(&text, Milli);
            let _ = parse_quantity(&text, WholeCount);
        }
    }
}
