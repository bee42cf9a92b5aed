//! Exact parsing of Kubernetes resource quantities (`1536Mi`, `1.5Gi`, `10G`, `1e9`) into bytes.
//!
//! Floating point would turn `1.1Gi` into a byte count one off from what Kubernetes computes,
//! so the number is kept as an integer mantissa and a decimal scale, and rounded up once.

use std::fmt;

/// Why a quantity could not be read; the message is shown to the user as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct QuantityError(String);

/// A storage size in bytes, with the rounded-up MiB and GiB that templates offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl Bytes {
    pub fn mib(self) -> u64 {
        self.0.div_ceil(1 << 20)
    }
    pub fn gib(self) -> u64 {
        self.0.div_ceil(1 << 30)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A byte count as Kubernetes writes a binary quantity (`resource.BinarySI`): with the
/// largest of Ki to Ei that divides it, plain digits when none does, and below 1024 in
/// decimal form (so 1000 is `1k`).
pub fn format_binary(bytes: u64) -> String {
    if bytes == 1000 {
        return "1k".into();
    }
    if bytes >= 1024 {
        for (shift, suffix) in [
            (60, "Ei"),
            (50, "Pi"),
            (40, "Ti"),
            (30, "Gi"),
            (20, "Mi"),
            (10, "Ki"),
        ] {
            if bytes.trailing_zeros() >= shift {
                return format!("{}{suffix}", bytes >> shift);
            }
        }
    }
    bytes.to_string()
}

/// Parses a quantity as Kubernetes writes it and returns whole bytes, rounded up
/// (Kubernetes rounds a fractional byte count up as well).
pub fn parse_bytes(text: &str) -> Result<Bytes, QuantityError> {
    let err = |why: &str| {
        QuantityError(format!(
            "`{text}` is not a valid storage quantity: {why} (examples: 1Gi, 1536Mi, 1.5Gi, 10G, 500000)"
        ))
    };
    let s = text.trim();
    if s.is_empty() {
        return Err(err("it is empty"));
    }
    let s = match s.strip_prefix('+') {
        Some(rest) => rest,
        None if s.starts_with('-') => return Err(err("a size cannot be negative")),
        None => s,
    };
    let number_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return Err(err("it has no number"));
    }
    if frac_part.contains('.') {
        return Err(err("it has more than one decimal point"));
    }
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 30 {
        return Err(err("it is too large"));
    }
    let mantissa: u128 = if digits.is_empty() {
        0
    } else {
        digits.parse().map_err(|_| err("it has no number"))?
    };
    // value = mantissa * 2^bin * 10^dec / 10^frac_len
    let (bin, dec): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        other => match other.strip_prefix(['e', 'E']) {
            Some(exp) if !exp.is_empty() => {
                let e: i32 = exp
                    .parse()
                    .map_err(|_| err("its exponent is not a number"))?;
                if !(-30..=30).contains(&e) {
                    return Err(err("its exponent is out of range"));
                }
                (0, e)
            }
            _ => {
                return Err(err(&format!(
                    "unknown suffix `{other}` (use Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P, E or none)"
                )));
            }
        },
    };
    let too_large = || err("it is too large");
    let scaled = mantissa.checked_mul(1u128 << bin).ok_or_else(too_large)?;
    let exp10 = dec - frac_part.len() as i32;
    let bytes: u128 = if exp10 >= 0 {
        scaled
            .checked_mul(10u128.checked_pow(exp10 as u32).ok_or_else(too_large)?)
            .ok_or_else(too_large)?
    } else {
        let divisor = 10u128
            .checked_pow(exp10.unsigned_abs())
            .ok_or_else(too_large)?;
        scaled.div_ceil(divisor)
    };
    u64::try_from(bytes).map(Bytes).map_err(|_| too_large())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> u64 {
        parse_bytes(s).unwrap().0
    }

    #[test]
    fn binary_quantities_are_written_as_kubernetes_writes_them() {
        for (bytes, text) in [
            (0, "0"),
            (512, "512"),
            (1000, "1k"),
            (1024, "1Ki"),
            (1025, "1025"),
            (1536, "1536"),
            (3072, "3Ki"),
            (1 << 30, "1Gi"),
            (3 << 40, "3Ti"),
            ((1 << 30) + 1024, "1048577Ki"),
        ] {
            assert_eq!(format_binary(bytes), text, "{bytes}");
            assert_eq!(parse_bytes(text).unwrap().0, bytes, "{text}");
        }
    }

    #[test]
    fn every_suffix() {
        assert_eq!(b("123"), 123);
        assert_eq!(b("1Ki"), 1024);
        assert_eq!(b("1536Mi"), 1536 << 20);
        assert_eq!(b("2Gi"), 2 << 30);
        assert_eq!(b("1Ti"), 1 << 40);
        assert_eq!(b("1Pi"), 1 << 50);
        assert_eq!(b("1Ei"), 1 << 60);
        assert_eq!(b("1k"), 1000);
        assert_eq!(b("5M"), 5_000_000);
        assert_eq!(b("10G"), 10_000_000_000);
        assert_eq!(b("3T"), 3_000_000_000_000);
        assert_eq!(b("1P"), 1_000_000_000_000_000);
        assert_eq!(b("2E"), 2_000_000_000_000_000_000);
        assert_eq!(b("1e3"), 1000);
        assert_eq!(b("12E3"), 12_000);
        assert_eq!(b("+7"), 7);
    }

    #[test]
    fn decimals_are_exact_and_round_up() {
        assert_eq!(b("1.5Gi"), 1_610_612_736);
        assert_eq!(b("0.5Ki"), 512);
        assert_eq!(b("1.1Gi"), 1_181_116_007); // 1.1 * 2^30 = 1181116006.4 -> up
        assert_eq!(b(".5k"), 500);
        assert_eq!(b("1500m"), 2);
        assert_eq!(b("1n"), 1);
        assert_eq!(b("2.5"), 3);
        assert_eq!(b("0"), 0);
        assert_eq!(b("1e-2"), 1);
    }

    #[test]
    fn mib_and_gib_round_up() {
        let q = parse_bytes("1536Mi").unwrap();
        assert_eq!(q.mib(), 1536);
        assert_eq!(q.gib(), 2);
        let q = parse_bytes("1G").unwrap();
        assert_eq!(q.mib(), 954);
        assert_eq!(q.gib(), 1);
        assert_eq!(parse_bytes("1").unwrap().gib(), 1);
        assert_eq!(parse_bytes("0").unwrap().gib(), 0);
    }

    #[test]
    fn bad_quantities_explain_themselves() {
        for (input, needle) in [
            ("", "empty"),
            ("-1Gi", "negative"),
            ("Gi", "no number"),
            ("1.2.3", "more than one decimal point"),
            ("10GB", "unknown suffix `GB`"),
            ("10 Gi", "unknown suffix ` Gi`"),
            ("1e", "unknown suffix"),
            ("1ex", "exponent is not a number"),
            ("1e99", "out of range"),
            ("100Ei", "too large"),
            ("99999999999999999999999999999999", "too large"),
        ] {
            let e = parse_bytes(input).unwrap_err().to_string();
            assert!(e.contains(needle), "{input}: {e}");
        }
    }
}
