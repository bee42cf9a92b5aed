//! Quantities read exactly enough to compare and to print the way resource.Quantity does, and
//! the decoder's 400 for quantities it cannot read.

use super::*;

// ---------------------------------------------------------------------------------------
// Quantities, exact enough to compare and to print the way resource.Quantity does.

pub(super) const QUANTITY_FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
pub(super) const QUANTITY_SUFFIX_ERROR: &str = "unable to parse quantity's suffix";
pub(super) const NANO: i128 = 1_000_000_000;
/// Where exact arithmetic gives up; far beyond any storage size.
pub(super) const HUGE: i128 = i128::MAX / 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    BinarySI,
    DecimalSI,
    DecimalExponent,
}

impl Format {
    pub(super) fn go_name(self) -> &'static str {
        match self {
            Format::BinarySI => "BinarySI",
            Format::DecimalSI => "DecimalSI",
            Format::DecimalExponent => "DecimalExponent",
        }
    }
}

/// A parsed quantity: its value in billionths (rounded away from zero, as Kubernetes rounds
/// finer precision up), and what is needed to print it as Go would.
#[derive(Debug, Clone)]
pub(super) struct Quantity {
    pub(super) nanos: i128,
    pub(super) format: Format,
    pub(super) text: String,
    pub(super) positive: bool,
    pub(super) num: String,
    pub(super) denom: String,
    /// Power of the suffix: of 2 for binary suffixes, of 10 otherwise.
    pub(super) exponent: i32,
}

pub(super) fn pow10(n: u32) -> Option<u128> {
    10u128.checked_pow(n)
}

impl Quantity {
    /// resource.ParseQuantity, with its error texts.
    pub(super) fn parse(raw: &str) -> Result<Quantity, &'static str> {
        let s = raw.trim();
        if s.is_empty() {
            return Err(QUANTITY_FORMAT_ERROR);
        }
        let b = s.as_bytes();
        let mut pos = 0;
        let mut positive = true;
        match b[0] {
            b'-' => {
                positive = false;
                pos += 1;
            }
            b'+' => pos += 1,
            _ => {}
        }
        while pos < b.len() && b[pos] == b'0' {
            pos += 1;
        }
        let start = pos;
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        let mut num = s[start..pos].to_owned();
        if num.is_empty() {
            num = "0".into();
        }
        let mut denom = String::new();
        if pos < b.len() && b[pos] == b'.' {
            pos += 1;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            denom = s[start..pos].to_owned();
        }
        let suffix_start = pos;
        while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
            pos += 1;
        }
        if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
            pos += 1;
        }
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        if pos < b.len() {
            return Err(QUANTITY_FORMAT_ERROR);
        }
        let suffix = &s[suffix_start..];
        let (binary, exponent, format) = match suffix {
            "" => (false, 0, Format::DecimalSI),
            "n" => (false, -9, Format::DecimalSI),
            "u" => (false, -6, Format::DecimalSI),
            "m" => (false, -3, Format::DecimalSI),
            "k" => (false, 3, Format::DecimalSI),
            "M" => (false, 6, Format::DecimalSI),
            "G" => (false, 9, Format::DecimalSI),
            "T" => (false, 12, Format::DecimalSI),
            "P" => (false, 15, Format::DecimalSI),
            "E" => (false, 18, Format::DecimalSI),
            "Ki" => (true, 10, Format::BinarySI),
            "Mi" => (true, 20, Format::BinarySI),
            "Gi" => (true, 30, Format::BinarySI),
            "Ti" => (true, 40, Format::BinarySI),
            "Pi" => (true, 50, Format::BinarySI),
            "Ei" => (true, 60, Format::BinarySI),
            other if other.len() > 1 && (other.starts_with('e') || other.starts_with('E')) => {
                let e: i32 = other[1..].parse().map_err(|_| QUANTITY_SUFFIX_ERROR)?;
                (false, e, Format::DecimalExponent)
            }
            _ => return Err(QUANTITY_SUFFIX_ERROR),
        };
        let nanos = Self::nanos(&num, &denom, binary, exponent);
        Ok(Quantity {
            nanos: if positive { nanos } else { -nanos },
            format,
            text: s.to_owned(),
            positive,
            num,
            denom,
            exponent,
        })
    }

    /// |value| in billionths, rounded up; `HUGE` when it does not fit.
    pub(super) fn nanos(num: &str, denom: &str, binary: bool, exponent: i32) -> i128 {
        let digits = format!("{num}{denom}");
        let digits = digits.trim_start_matches('0');
        if digits.is_empty() {
            return 0;
        }
        let Ok(mantissa) = digits.parse::<u128>() else {
            return HUGE;
        };
        let (mul2, exp10) = if binary {
            (exponent as u32, 9 - denom.len() as i64)
        } else {
            (0, i64::from(exponent) + 9 - denom.len() as i64)
        };
        let Some(scaled) = 1u128
            .checked_shl(mul2)
            .and_then(|m| mantissa.checked_mul(m))
        else {
            return HUGE;
        };
        let value = if exp10 >= 0 {
            u32::try_from(exp10)
                .ok()
                .and_then(pow10)
                .and_then(|p| scaled.checked_mul(p))
        } else {
            match u32::try_from(-exp10).ok().and_then(pow10) {
                Some(p) => Some(scaled.div_ceil(p)),
                // A divisor beyond u128: any non-zero value rounds up to one billionth.
                None => Some(1),
            }
        };
        value
            .and_then(|v| i128::try_from(v).ok())
            .map_or(HUGE, |v| v.min(HUGE))
    }

    /// Quantity.Value(): whole units, rounded away from zero.
    pub(super) fn value(&self) -> i64 {
        let units = self.nanos.unsigned_abs().div_ceil(NANO.unsigned_abs());
        let units = i64::try_from(units).unwrap_or(i64::MAX);
        if self.nanos < 0 { -units } else { units }
    }

    /// Quantity.String(): the canonical form.
    pub(super) fn canonical(&self) -> String {
        if self.nanos == 0 {
            return "0".into();
        }
        let mut format = self.format;
        if format == Format::BinarySI && (self.nanos.abs() < 1024 * NANO || self.nanos % NANO != 0)
        {
            format = Format::DecimalSI;
        }
        if format == Format::BinarySI {
            let mut amount = self.nanos / NANO;
            let mut k = 0;
            while k < 6 && amount % 1024 == 0 {
                amount /= 1024;
                k += 1;
            }
            return format!("{amount}{}", ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][k]);
        }
        let mut amount = self.nanos;
        let mut exponent: i32 = -9;
        while amount % 10 == 0 {
            amount /= 10;
            exponent += 1;
        }
        while exponent.rem_euclid(3) != 0 {
            amount *= 10;
            exponent -= 1;
        }
        if format == Format::DecimalExponent {
            return if exponent == 0 {
                amount.to_string()
            } else {
                format!("{amount}e{exponent}")
            };
        }
        while exponent > 18 {
            amount *= 1000;
            exponent -= 3;
        }
        let suffix = match exponent {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            18 => "E",
            _ => "",
        };
        format!("{amount}{suffix}")
    }

    /// Go's `%#v` of the parsed resource.Quantity, for messages that print a whole
    /// ResourceList. Follows ParseQuantity's int64 fast path; values outside it are printed
    /// as if inside (the real text then holds a pointer address no client can rely on).
    pub(super) fn go_struct(&self) -> String {
        let shifted = format!("{}{}", self.num, self.denom);
        let (mantissa, scale): (i128, i64) = match self.format {
            Format::BinarySI if self.denom.is_empty() => {
                (1i128 << self.exponent.clamp(0, 62).unsigned_abs(), 0)
            }
            Format::BinarySI => (1, -(self.denom.len() as i64)),
            _ => (1, i64::from(self.exponent) - self.denom.len() as i64),
        };
        let value = shifted.parse::<i128>().unwrap_or(0) * mantissa;
        let value = if self.positive { value } else { -value };
        let cached = match self.format {
            Format::BinarySI => self.exponent % 10 == 0 && (value & 0x07) != 0,
            _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
        };
        let s = if cached { self.text.as_str() } else { "" };
        format!(
            "resource.Quantity{{i:resource.int64Amount{{value:{value}, scale:{scale}}}, d:resource.infDecAmount{{Dec:(*inf.Dec)(nil)}}, s:{}, Format:{}}}",
            go_quote(s),
            go_quote(self.format.go_name())
        )
    }
}

pub(super) fn quantity_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(super) fn parse_quantity(v: &Value) -> Option<Quantity> {
    quantity_text(v).and_then(|t| Quantity::parse(&t).ok())
}

/// Go's `%#v` of a core.ResourceList (nil, empty, or with quantities, keys sorted).
pub(super) fn go_resource_list(v: Option<&Value>) -> String {
    match v.and_then(Value::as_object) {
        None => "core.ResourceList(nil)".into(),
        Some(m) if m.is_empty() => "core.ResourceList{}".into(),
        Some(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .iter()
                .map(|k| {
                    let q = parse_quantity(&m[k.as_str()])
                        .map_or_else(|| "resource.Quantity{}".to_owned(), |q| q.go_struct());
                    format!("{}:{q}", go_quote(k))
                })
                .collect();
            format!("core.ResourceList{{{}}}", items.join(", "))
        }
    }
}

/// The decoder's check: a quantity that cannot be parsed fails the whole request with 400,
/// before any validation.
pub(super) fn decode_quantities(kind: &str, maps: &[Option<&Value>]) -> ApiResult<()> {
    for m in maps.iter().flatten() {
        for v in m.as_object().into_iter().flat_map(|o| o.values()) {
            let err = match v {
                Value::Null => None,
                other => match quantity_text(other) {
                    Some(t) => Quantity::parse(&t).err(),
                    None => Some(QUANTITY_FORMAT_ERROR),
                },
            };
            if let Some(why) = err {
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"v1\" cannot be handled as a {kind}: {why}"
                )));
            }
        }
    }
    Ok(())
}

/// Rejects objects whose quantities the real decoder could not read (400 BadRequest).
pub fn check_decodable(r: &Resource, obj: &Value) -> ApiResult<()> {
    match (r.group, r.plural) {
        ("", "persistentvolumes") => decode_quantities(r.kind, &[obj.pointer("/spec/capacity")]),
        ("", "persistentvolumeclaims") => decode_quantities(
            r.kind,
            &[
                obj.pointer("/spec/resources/requests"),
                obj.pointer("/spec/resources/limits"),
                obj.pointer("/status/capacity"),
                obj.pointer("/status/allocatedResources"),
            ],
        ),
        _ => Ok(()),
    }
}
