//! Field validation of PersistentVolumes and PersistentVolumeClaims as kube-apiserver does it
//! (pkg/apis/core/validation and pkg/volume/validation): the same rules, field paths, wording
//! and order, so a client gets the 422 a real cluster would send. What is left out is listed
//! at the end of this comment; everything else a client writes passes.
//!
//! Shape of the answer: the real server collects every field error, reports each as a cause,
//! and writes the message from the distinct ones only (`ErrorList.ToAggregate`). On update the
//! create rules run twice (once from the strategy, once inside the update validation), so the
//! causes hold them twice while the message shows them once; that is kept here.
//!
//! Not checked (a real server would): label-selector syntax in a claim's `selector`, claim
//! `dataSource`/`dataSourceRef`, node-selector key syntax in `nodeAffinity`, the per-source
//! fields of the rarer volume types (only hostPath, local, nfs, iscsi and csi are looked
//! into; the others are only counted), PV `nodeAffinity` immutability, and the
//! PersistentVolumeClaimResize admission plugin (expansion needs `allowVolumeExpansion`).
//! Update messages leave out the `cmp.Diff` the real server appends after "immutable after
//! creation": it prints Go's internal structs, which a JSON server cannot reproduce.

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use crate::admission::{LABEL_HELP, SUBDOMAIN_HELP};
use crate::resources::Resource;
use crate::status::{ApiError, ApiResult, Cause};

const MOUNT_OPTIONS_ANNOTATION: &str = "volume.beta.kubernetes.io/mount-options";
const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

const ACCESS_MODES: [&str; 4] = [
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];
const RECLAIM_POLICIES: [&str; 3] = ["Delete", "Recycle", "Retain"];
const VOLUME_MODES: [&str; 2] = ["Block", "Filesystem"];
const HOST_PATH_TYPES: [&str; 8] = [
    "",
    "BlockDevice",
    "CharDevice",
    "Directory",
    "DirectoryOrCreate",
    "File",
    "FileOrCreate",
    "Socket",
];

/// The PersistentVolumeSource fields in the order the real validation visits them:
/// (JSON field, name used in the field path of the "more than 1 volume type" error).
const PV_SOURCES: [(&str, &str); 22] = [
    ("hostPath", "hostPath"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("nfs", "nfs"),
    ("rbd", "rbd"),
    ("quobyte", "quobyte"),
    ("cephfs", "cephFS"),
    ("iscsi", "iscsi"),
    ("cinder", "cinder"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("scaleIO", "scaleIO"),
    ("local", "local"),
    ("storageos", "storageos"),
    ("csi", "csi"),
];

/// Volume types whose PVs may carry the mount-options annotation; any other type (hostPath,
/// local, csi, fc, flexVolume, ...) is refused. `spec.mountOptions` itself is not validated
/// by the real server for any type.
const MOUNT_OPTION_TYPES: [&str; 13] = [
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "glusterfs",
    "nfs",
    "rbd",
    "quobyte",
    "iscsi",
    "cinder",
    "cephfs",
    "azureFile",
    "vsphereVolume",
    "azureDisk",
    "photonPersistentDisk",
];

// ---------------------------------------------------------------------------------------
// Field errors, worded like apimachinery's field.Error.ErrorBody.

/// A rejected value as Go's error printer shows it.
enum Bad {
    /// A string (or a named string type): quoted.
    Str(String),
    /// An integer: bare.
    Int(i64),
    /// Already rendered (Go's `%#v` of a struct or map, or a `Stringer`).
    Raw(String),
}

impl Bad {
    fn render(&self) -> String {
        match self {
            Bad::Str(s) => go_quote(s),
            Bad::Int(i) => i.to_string(),
            Bad::Raw(s) => s.clone(),
        }
    }
}

/// Go's `%q`: a double-quoted string with Go escapes.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[derive(Default)]
struct Errs(Vec<Cause>);

impl Errs {
    fn with_detail(head: &str, detail: &str) -> String {
        if detail.is_empty() {
            head.to_owned()
        } else {
            format!("{head}: {detail}")
        }
    }

    fn required(&mut self, field: impl Into<String>, detail: &str) {
        self.0.push(Cause::new(
            "FieldValueRequired",
            field,
            Self::with_detail("Required value", detail),
        ));
    }

    fn forbidden(&mut self, field: impl Into<String>, detail: &str) {
        self.0.push(Cause::new(
            "FieldValueForbidden",
            field,
            Self::with_detail("Forbidden", detail),
        ));
    }

    fn too_long(&mut self, field: impl Into<String>, max: usize) {
        self.0.push(Cause::new(
            "FieldValueTooLong",
            field,
            format!("Too long: must have at most {max} bytes"),
        ));
    }

    fn invalid(&mut self, field: impl Into<String>, value: Bad, detail: &str) {
        let head = format!("Invalid value: {}", value.render());
        self.0.push(Cause::new(
            "FieldValueInvalid",
            field,
            Self::with_detail(&head, detail),
        ));
    }

    fn not_supported(&mut self, field: impl Into<String>, value: Bad, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
        let head = format!("Unsupported value: {}", value.render());
        self.0.push(Cause::new(
            "FieldValueNotSupported",
            field,
            Self::with_detail(&head, &format!("supported values: {}", list.join(", "))),
        ));
    }

    fn extend(&mut self, other: Errs) {
        self.0.extend(other.0);
    }
}

/// The 422 answer: every cause in details, the distinct ones in the message.
fn invalid_error(r: &Resource, name: &str, causes: Vec<Cause>) -> ApiError {
    let mut seen = HashSet::new();
    let distinct: Vec<Cause> = causes
        .iter()
        .filter(|c| seen.insert(format!("{}: {}", c.field, c.message)))
        .cloned()
        .collect();
    let mut e = ApiError::invalid(r.kind, r.group, name, distinct);
    if let Some(d) = e.details.as_mut() {
        d["causes"] = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "field": c.field, "message": c.message}))
            .collect();
    }
    e
}

fn finish(r: &Resource, name: &str, errs: Errs) -> ApiResult<()> {
    if errs.0.is_empty() {
        Ok(())
    } else {
        Err(invalid_error(r, name, errs.0))
    }
}

// ---------------------------------------------------------------------------------------
// Name rules (IsDNS1123Subdomain / IsDNS1123Label), as separate messages like the real ones.

fn label_chars_ok(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn dns_subdomain_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_owned());
    }
    if !s.split('.').all(label_chars_ok) {
        out.push(SUBDOMAIN_HELP.to_owned());
    }
    out
}

fn dns_label_errors(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push("must be no more than 63 characters".to_owned());
    }
    if !label_chars_ok(s) {
        out.push(LABEL_HELP.to_owned());
    }
    out
}

/// ValidateClassName: storage and volume-attributes class names are DNS subdomains.
fn class_name(errs: &mut Errs, field: &str, value: &str) {
    for msg in dns_subdomain_errors(value) {
        errs.invalid(field, Bad::Str(value.to_owned()), &msg);
    }
}

// ---------------------------------------------------------------------------------------
// Quantities, exact enough to compare and to print the way resource.Quantity does.

const QUANTITY_FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const QUANTITY_SUFFIX_ERROR: &str = "unable to parse quantity's suffix";
const NANO: i128 = 1_000_000_000;
/// Where exact arithmetic gives up; far beyond any storage size.
const HUGE: i128 = i128::MAX / 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    BinarySI,
    DecimalSI,
    DecimalExponent,
}

impl Format {
    fn go_name(self) -> &'static str {
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
struct Quantity {
    nanos: i128,
    format: Format,
    text: String,
    positive: bool,
    num: String,
    denom: String,
    /// Power of the suffix: of 2 for binary suffixes, of 10 otherwise.
    exponent: i32,
}

fn pow10(n: u32) -> Option<u128> {
    10u128.checked_pow(n)
}

impl Quantity {
    /// resource.ParseQuantity, with its error texts.
    fn parse(raw: &str) -> Result<Quantity, &'static str> {
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
    fn nanos(num: &str, denom: &str, binary: bool, exponent: i32) -> i128 {
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
    fn value(&self) -> i64 {
        let units = self.nanos.unsigned_abs().div_ceil(NANO.unsigned_abs());
        let units = i64::try_from(units).unwrap_or(i64::MAX);
        if self.nanos < 0 { -units } else { units }
    }

    /// Quantity.String(): the canonical form.
    fn canonical(&self) -> String {
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
    fn go_struct(&self) -> String {
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

fn quantity_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn parse_quantity(v: &Value) -> Option<Quantity> {
    quantity_text(v).and_then(|t| Quantity::parse(&t).ok())
}

/// Go's `%#v` of a core.ResourceList (nil, empty, or with quantities, keys sorted).
fn go_resource_list(v: Option<&Value>) -> String {
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
fn decode_quantities(kind: &str, maps: &[Option<&Value>]) -> ApiResult<()> {
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

// ---------------------------------------------------------------------------------------
// Small readers: JSON null counts as absent, as it does for Go pointers, maps and slices.

fn present<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn list<'a>(v: &'a Value, key: &str) -> Vec<&'a Value> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// A value printed as Go prints a named string type (quoted), whatever JSON type it has.
fn bad_of(v: &Value) -> Bad {
    match v {
        Value::String(s) => Bad::Str(s.clone()),
        other => Bad::Raw(other.to_string()),
    }
}

// ---------------------------------------------------------------------------------------
// Shared pieces of both kinds.

fn access_modes(errs: &mut Errs, spec: &Value, required_detail: &str) {
    let modes = list(spec, "accessModes");
    if modes.is_empty() {
        errs.required("spec.accessModes", required_detail);
    }
    let (mut rwop, mut other) = (false, false);
    for m in &modes {
        let s = m.as_str().unwrap_or_default();
        if !ACCESS_MODES.contains(&s) || !m.is_string() {
            errs.not_supported("spec.accessModes", bad_of(m), &ACCESS_MODES);
        }
        if s == "ReadWriteOncePod" {
            rwop = true;
        } else if ACCESS_MODES.contains(&s) {
            other = true;
        }
    }
    if rwop && other {
        errs.forbidden(
            "spec.accessModes",
            "may not use ReadWriteOncePod with other access modes",
        );
    }
}

fn volume_mode(errs: &mut Errs, spec: &Value) {
    if let Some(m) = present(spec, "volumeMode")
        && !m.as_str().is_some_and(|s| VOLUME_MODES.contains(&s))
    {
        errs.not_supported("spec.volumeMode", bad_of(m), &VOLUME_MODES);
    }
}

/// validatePathNoBacksteps.
fn no_backsteps(errs: &mut Errs, field: &str, path: &str) {
    if path.split('/').any(|p| p == "..") {
        errs.invalid(field, Bad::Str(path.to_owned()), "must not contain '..'");
    }
}

/// Go's path.Clean, for the one question asked of it: does an absolute path name `/`.
fn cleans_to_root(p: &str) -> bool {
    if !p.starts_with('/') {
        return false;
    }
    let mut depth: usize = 0;
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => depth = depth.saturating_sub(1),
            _ => depth += 1,
        }
    }
    depth == 0
}

// ---------------------------------------------------------------------------------------
// PersistentVolume.

fn node_affinity(errs: &mut Errs, na: &Value) {
    let Some(required) = present(na, "required") else {
        errs.required(
            "spec.nodeAffinity.required",
            "must specify required node constraints",
        );
        return;
    };
    let terms = list(required, "nodeSelectorTerms");
    let terms_path = "spec.nodeAffinity.required.nodeSelectorTerms";
    if terms.is_empty() {
        errs.required(terms_path, "must have at least one node selector term");
        return;
    }
    for (i, term) in terms.iter().enumerate() {
        for (j, rq) in list(term, "matchExpressions").iter().enumerate() {
            let path = format!("{terms_path}[{i}].matchExpressions[{j}]");
            let values = list(rq, "values").len();
            match text(rq, "operator") {
                "In" | "NotIn" if values == 0 => errs.required(
                    format!("{path}.values"),
                    "must be specified when `operator` is 'In' or 'NotIn'",
                ),
                "Exists" | "DoesNotExist" if values > 0 => errs.forbidden(
                    format!("{path}.values"),
                    "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                ),
                "Gt" | "Lt" if values != 1 => errs.required(
                    format!("{path}.values"),
                    "must be specified single value when `operator` is 'Lt' or 'Gt'",
                ),
                "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
                other => errs.invalid(
                    format!("{path}.operator"),
                    Bad::Str(other.to_owned()),
                    "not a valid selector operator",
                ),
            }
        }
    }
}

fn host_path_source(errs: &mut Errs, src: &Value) {
    let path = text(src, "path");
    if path.is_empty() {
        errs.required("spec.hostPath.path", "");
        return;
    }
    no_backsteps(errs, "spec.hostPath.path", path);
    if let Some(t) = present(src, "type")
        && !t.as_str().is_some_and(|s| HOST_PATH_TYPES.contains(&s))
    {
        errs.not_supported("spec.hostPath.type", bad_of(t), &HOST_PATH_TYPES);
    }
}

fn nfs_source(errs: &mut Errs, src: &Value) {
    if text(src, "server").is_empty() {
        errs.required("spec.nfs.server", "");
    }
    let path = text(src, "path");
    if path.is_empty() {
        errs.required("spec.nfs.path", "");
    }
    if !path.starts_with('/') {
        errs.invalid(
            "spec.nfs.path",
            Bad::Str(path.to_owned()),
            "must be an absolute path",
        );
    }
}

fn local_source(errs: &mut Errs, src: &Value, affinity_given: bool) {
    let path = text(src, "path");
    if path.is_empty() {
        errs.required("spec.local.path", "");
    } else {
        no_backsteps(errs, "spec.local.path", path);
    }
    if !affinity_given {
        errs.required("spec.nodeAffinity", "Local volume requires node affinity");
    }
}

fn secret_reference(errs: &mut Errs, path: &str, r: &Value) {
    let name = text(r, "name");
    if name.is_empty() {
        errs.required(format!("{path}.name"), "");
    } else {
        for msg in dns_subdomain_errors(name) {
            errs.invalid(format!("{path}.name"), Bad::Str(name.to_owned()), &msg);
        }
    }
    let ns = text(r, "namespace");
    if ns.is_empty() {
        errs.required(format!("{path}.namespace"), "");
    } else {
        for msg in dns_label_errors(ns) {
            errs.invalid(format!("{path}.namespace"), Bad::Str(ns.to_owned()), &msg);
        }
    }
}

fn csi_source(errs: &mut Errs, src: &Value) {
    let driver = text(src, "driver");
    if driver.is_empty() {
        errs.required("spec.csi.driver", "");
    }
    if driver.len() > 63 {
        errs.too_long("spec.csi.driver", 63);
    }
    for msg in dns_subdomain_errors(&driver.to_lowercase()) {
        errs.invalid("spec.csi.driver", Bad::Str(driver.to_owned()), &msg);
    }
    if text(src, "volumeHandle").is_empty() {
        errs.required("spec.csi.volumeHandle", "");
    }
    for key in [
        "controllerPublishSecretRef",
        "controllerExpandSecretRef",
        "nodePublishSecretRef",
        "nodeExpandSecretRef",
    ] {
        if let Some(r) = present(src, key) {
            secret_reference(errs, &format!("spec.csi.{key}"), r);
        }
    }
}

/// The iSCSI qualified-name formats: `iqn.YYYY-MM.<authority>:<name>`, `eui.` and 16
/// alphanumerics, `naa.` and 32 alphanumerics.
fn iscsi_name_ok(name: &str) -> bool {
    // `eui` or `naa`, any one character, then exactly n ASCII alphanumerics.
    let tail_ok = |n: usize| {
        let mut chars = name.chars().skip(3);
        chars.next().is_some() && {
            let rest: Vec<char> = chars.collect();
            rest.len() == n && rest.iter().all(char::is_ascii_alphanumeric)
        }
    };
    if name.starts_with("eui") {
        return tail_ok(16);
    }
    if name.starts_with("naa") {
        return tail_ok(32);
    }
    // The iqn pattern is not anchored at the start: any "iqn." may begin the match.
    name.match_indices("iqn.").any(|(i, _)| {
        let rest = &name.as_bytes()[i + 4..];
        if rest.len() < 8
            || !rest[..4].iter().all(u8::is_ascii_digit)
            || rest[4] != b'-'
            || !rest[5..7].iter().all(u8::is_ascii_digit)
            || rest[7] != b'.'
        {
            return false;
        }
        let rest = &name[i + 12..];
        let Some((head, tail)) = rest.split_once(':') else {
            return false;
        };
        !head.is_empty()
            && head
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            && !tail.is_empty()
            && !tail.contains([',', ';', '*', '&', '$', '|', ' ', '\t', '\n', '\r', '\u{c}'])
    })
}

fn iscsi_name(errs: &mut Errs, field: &str, name: &str) {
    let known = ["iqn", "eui", "naa"].iter().any(|p| name.starts_with(p));
    if !known || !iscsi_name_ok(name) {
        errs.invalid(field, Bad::Str(name.to_owned()), "must be valid format");
    }
}

fn iscsi_source(errs: &mut Errs, src: &Value, pv_name: &str) {
    let portal = text(src, "targetPortal");
    if portal.is_empty() {
        errs.required("spec.iscsi.targetPortal", "");
    }
    let initiator = present(src, "initiatorName").and_then(Value::as_str);
    if initiator.is_some() && pv_name.len() + 1 + portal.len() > 64 {
        errs.invalid(
            "spec.iscsi.targetportal",
            Bad::Str(portal.to_owned()),
            "Total length of <volume name>:<iscsi.targetPortal> must be under 64 characters if iscsi.initiatorName is specified.",
        );
    }
    let iqn = text(src, "iqn");
    if iqn.is_empty() {
        errs.required("spec.iscsi.iqn", "");
    } else {
        iscsi_name(errs, "spec.iscsi.iqn", iqn);
    }
    let lun = src.get("lun").and_then(Value::as_i64).unwrap_or(0);
    if !(0..=255).contains(&lun) {
        errs.invalid(
            "spec.iscsi.lun",
            Bad::Int(lun),
            "must be between 0 and 255, inclusive",
        );
    }
    let chap = |k: &str| src.get(k).and_then(Value::as_bool).unwrap_or(false);
    let secret = present(src, "secretRef");
    if (chap("chapAuthDiscovery") || chap("chapAuthSession")) && secret.is_none() {
        errs.required("spec.iscsi.secretRef", "");
    }
    if let Some(s) = secret
        && text(s, "name").is_empty()
    {
        errs.required("spec.iscsi.secretRef.name", "");
    }
    if let Some(init) = initiator {
        iscsi_name(errs, "spec.iscsi.initiatorname", init);
    }
}

/// ValidatePersistentVolume (name aside, which admission checks first) and the volume
/// plugin check on the mount-options annotation.
fn pv_errors(name: &str, obj: &Value) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    access_modes(&mut errs, spec, "");

    let capacity = present(spec, "capacity");
    let cap_map = capacity.and_then(Value::as_object);
    let cap_len = cap_map.map_or(0, Map::len);
    if cap_len == 0 {
        errs.required("spec.capacity", "");
    }
    if !cap_map.is_some_and(|m| m.contains_key("storage")) || cap_len > 1 {
        errs.not_supported(
            "spec.capacity",
            Bad::Raw(go_resource_list(capacity)),
            &["storage"],
        );
    }
    if let Some(m) = cap_map {
        let mut keys: Vec<&String> = m.keys().collect();
        keys.sort();
        for k in keys {
            let Some(q) = parse_quantity(&m[k.as_str()]) else {
                continue;
            };
            let field = format!("spec.capacity[{k}]");
            if q.value() < 0 {
                errs.invalid(
                    field.clone(),
                    Bad::Int(q.value()),
                    "must be a valid resource quantity",
                );
            }
            if q.nanos <= 0 {
                errs.invalid(field, Bad::Str(q.canonical()), "must be greater than zero");
            }
        }
    }

    let policy = present(spec, "persistentVolumeReclaimPolicy");
    if let Some(p) = policy
        && !p
            .as_str()
            .is_some_and(|s| s.is_empty() || RECLAIM_POLICIES.contains(&s))
    {
        errs.not_supported(
            "spec.persistentVolumeReclaimPolicy",
            bad_of(p),
            &RECLAIM_POLICIES,
        );
    }

    let affinity = present(spec, "nodeAffinity");
    if let Some(na) = affinity {
        node_affinity(&mut errs, na);
    }

    let mut count = 0;
    for (key, path_name) in PV_SOURCES {
        let Some(src) = present(spec, key) else {
            continue;
        };
        // The real code counts flexVolume without the "more than 1" check.
        if count > 0 && key != "flexVolume" {
            errs.forbidden(
                format!("spec.{path_name}"),
                "may not specify more than 1 volume type",
            );
            continue;
        }
        count += 1;
        match key {
            "hostPath" => host_path_source(&mut errs, src),
            "nfs" => nfs_source(&mut errs, src),
            "iscsi" => iscsi_source(&mut errs, src, name),
            "local" => local_source(&mut errs, src, affinity.is_some()),
            "csi" => csi_source(&mut errs, src),
            _ => {}
        }
    }
    if count == 0 {
        errs.required("spec", "must specify a volume type");
    }

    if let Some(hp) = present(spec, "hostPath")
        && cleans_to_root(text(hp, "path"))
        && policy.and_then(Value::as_str) == Some("Recycle")
    {
        errs.forbidden(
            "spec.persistentVolumeReclaimPolicy",
            "may not be 'recycle' for a hostPath mount of '/'",
        );
    }

    let class = text(spec, "storageClassName");
    if !class.is_empty() {
        class_name(&mut errs, "spec.storageClassName", class);
    }
    volume_mode(&mut errs, spec);
    if let Some(vac) = present(spec, "volumeAttributesClassName") {
        let vac = vac.as_str().unwrap_or_default();
        if vac.is_empty() {
            errs.required(
                "spec.volumeAttributesClassName",
                "an empty string is disallowed",
            );
        } else {
            class_name(&mut errs, "spec.volumeAttributesClassName", vac);
        }
        if present(spec, "csi").is_none() {
            errs.required(
                "spec.csi",
                "has to be specified when using volumeAttributesClassName",
            );
        }
    }
    errs
}

/// pkg/volume/validation: the mount-options annotation only on types that support it.
fn pv_mount_option_errors(obj: &Value) -> Errs {
    let mut errs = Errs::default();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let supported = MOUNT_OPTION_TYPES
        .iter()
        .any(|k| present(&spec, k).is_some());
    let has = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MOUNT_OPTIONS_ANNOTATION));
    if !supported && has {
        errs.forbidden(
            format!("metadata.annotations.{MOUNT_OPTIONS_ANNOTATION}"),
            "may not specify mount options for this volume type",
        );
    }
    errs
}

// ---------------------------------------------------------------------------------------
// PersistentVolumeClaim.

/// ValidatePersistentVolumeClaimSpec (selector and data sources aside).
fn pvc_errors(obj: &Value) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let spec = obj.get("spec").unwrap_or(&null);
    access_modes(&mut errs, spec, "at least 1 access mode is required");
    let storage = spec
        .pointer("/resources/requests")
        .and_then(Value::as_object)
        .and_then(|m| m.get("storage"))
        .filter(|v| !v.is_null());
    match storage.and_then(parse_quantity) {
        None if storage.is_none() => errs.required("spec.resources[storage]", ""),
        None => {}
        Some(q) if q.nanos <= 0 => errs.invalid(
            "spec.resources[storage]",
            Bad::Str(q.canonical()),
            "must be greater than zero",
        ),
        Some(_) => {}
    }
    if let Some(class) = present(spec, "storageClassName").and_then(Value::as_str)
        && !class.is_empty()
    {
        class_name(&mut errs, "spec.storageClassName", class);
    }
    volume_mode(&mut errs, spec);
    if let Some(vac) = present(spec, "volumeAttributesClassName").and_then(Value::as_str)
        && !vac.is_empty()
    {
        class_name(&mut errs, "spec.volumeAttributesClassName", vac);
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Semantic equality (apiequality.Semantic.DeepEqual on the decoded object): JSON null, empty
// lists and empty maps stand for Go's nil, and quantities compare by value.

fn normalize(v: &Value) -> Option<Value> {
    match v {
        Value::Null => None,
        Value::Array(a) if a.is_empty() => None,
        Value::Array(a) => Some(Value::Array(
            a.iter()
                .map(|x| normalize(x).unwrap_or(Value::Null))
                .collect(),
        )),
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .filter_map(|(k, x)| normalize(x).map(|x| (k.clone(), x)))
                .collect();
            (!out.is_empty()).then_some(Value::Object(out))
        }
        other => Some(other.clone()),
    }
}

/// A quantity map with each value replaced by its exact amount.
fn normalize_quantities(m: &mut Value) {
    if let Some(obj) = m.as_object_mut() {
        for v in obj.values_mut() {
            if let Some(q) = parse_quantity(v) {
                *v = json!(format!("{}n", q.nanos));
            }
        }
    }
}

fn normal_claim_spec(spec: &Value) -> Value {
    let mut s = spec.clone();
    for key in ["requests", "limits"] {
        if let Some(m) = s.pointer_mut(&format!("/resources/{key}")) {
            normalize_quantities(m);
        }
    }
    // volumeName is a plain string in Go: "" and absent are the same.
    if s.get("volumeName").and_then(Value::as_str) == Some("")
        && let Some(m) = s.as_object_mut()
    {
        m.remove("volumeName");
    }
    normalize(&s).unwrap_or_else(|| json!({}))
}

fn storage_request(spec: &Value) -> Option<Quantity> {
    spec.pointer("/resources/requests/storage")
        .and_then(parse_quantity)
}

/// Go's `%#v` of a *PersistentVolumeMode (or of nil) in ValidateImmutableField.
fn immutable_volume_mode(errs: &mut Errs, old: &Value, new: &Value) {
    let o = old.pointer("/spec/volumeMode").filter(|v| !v.is_null());
    let n = new.pointer("/spec/volumeMode").filter(|v| !v.is_null());
    if o != n {
        // A nil pointer prints as the string "null", quoted.
        let shown = n.map_or(Bad::Str("null".into()), bad_of);
        errs.invalid("volumeMode", shown, "field is immutable");
    }
}

fn pvc_update_errors(old: &Value, new: &Value) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let old_spec = old.get("spec").unwrap_or(&null);
    let new_spec = new.get("spec").unwrap_or(&null);
    let mut old_clone = old_spec.clone();
    let mut new_clone = new_spec.clone();
    if !old_clone.is_object() {
        old_clone = json!({});
    }
    if !new_clone.is_object() {
        new_clone = json!({});
    }

    // The PV controller sets volumeName once.
    if text(old_spec, "volumeName").is_empty() {
        old_clone["volumeName"] = new_spec.get("volumeName").cloned().unwrap_or(Value::Null);
    }

    let old_sc = present(old_spec, "storageClassName").and_then(Value::as_str);
    let new_sc = present(new_spec, "storageClassName").and_then(Value::as_str);
    let old_ann = annotation(old, BETA_STORAGE_CLASS_ANNOTATION);
    let new_ann = annotation(new, BETA_STORAGE_CLASS_ANNOTATION);
    let from_annotation = old_ann.is_some()
        && old_sc.is_none()
        && new_sc.is_some()
        && new_sc == old_ann
        && (new_ann.is_none() || new_ann == old_ann);
    if from_annotation {
        new_clone["storageClassName"] = Value::Null;
    } else {
        if new_ann != old_ann {
            errs.invalid(
                format!("metadata.annotations.{BETA_STORAGE_CLASS_ANNOTATION}"),
                Bad::Str(new_ann.unwrap_or_default().to_owned()),
                "field is immutable",
            );
        }
        let from_nil =
            new_sc.is_some() && old_sc.is_none() && (old_ann.is_none() || new_sc == old_ann);
        if from_nil {
            new_clone["storageClassName"] = old_clone
                .get("storageClassName")
                .cloned()
                .unwrap_or(Value::Null);
        }
    }

    let bound = new.pointer("/status/phase").and_then(Value::as_str) == Some("Bound");
    if bound
        && new_clone
            .pointer("/resources/requests")
            .is_some_and(Value::is_object)
    {
        new_clone["resources"]["requests"]["storage"] = old_spec
            .pointer("/resources/requests/storage")
            .cloned()
            .unwrap_or_else(|| json!("0"));
    }
    if bound && present(&new_clone, "volumeAttributesClassName").is_some() {
        new_clone["volumeAttributesClassName"] = old_clone
            .get("volumeAttributesClassName")
            .cloned()
            .unwrap_or(Value::Null);
    }

    if normal_claim_spec(&new_clone) != normal_claim_spec(&old_clone) {
        // The real message goes on with "\n" and a cmp.Diff of the internal Go structs.
        errs.forbidden(
            "spec",
            "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
        );
    }

    let zero = || Quantity::parse("0").expect("zero parses");
    let old_size = storage_request(old_spec).unwrap_or_else(zero);
    let new_size = storage_request(new_spec).unwrap_or_else(zero);
    let status_size = old
        .pointer("/status/capacity/storage")
        .and_then(parse_quantity)
        .unwrap_or_else(zero);
    // RecoverVolumeExpansionFailure is on: a claim may shrink back, but not to or below
    // what its volume already has.
    if new_size.nanos < old_size.nanos && new_size.nanos <= status_size.nanos {
        errs.forbidden(
            "spec.resources.requests.storage",
            "field can not be less than status.capacity",
        );
    }

    immutable_volume_mode(&mut errs, old, new);

    let old_vac = present(old_spec, "volumeAttributesClassName");
    let new_vac = present(new_spec, "volumeAttributesClassName");
    if old_vac.is_some() && old_vac != new_vac {
        match new_vac.and_then(Value::as_str) {
            None => errs.forbidden(
                "spec.volumeAttributesClassName",
                "update from non-nil value to nil is forbidden",
            ),
            Some("") => errs.forbidden(
                "spec.volumeAttributesClassName",
                "update from non-nil value to an empty string is forbidden",
            ),
            Some(_) => {}
        }
    }
    errs
}

fn pv_source(spec: &Value) -> Value {
    let mut out = Map::new();
    for (key, _) in PV_SOURCES {
        if let Some(v) = spec.get(key).and_then(normalize) {
            out.insert(key.to_owned(), v);
        }
    }
    Value::Object(out)
}

fn pv_update_errors(old: &Value, new: &Value) -> Errs {
    let mut errs = Errs::default();
    let null = Value::Null;
    let old_spec = old.get("spec").unwrap_or(&null);
    let new_spec = new.get("spec").unwrap_or(&null);
    let mut new_source = pv_source(new_spec);
    // A CSI volume may gain a controllerExpandSecretRef it did not have.
    if old_spec
        .pointer("/csi/controllerExpandSecretRef")
        .is_none_or(Value::is_null)
        && let Some(csi) = new_source.get_mut("csi").and_then(Value::as_object_mut)
    {
        csi.remove("controllerExpandSecretRef");
    }
    if new_source != pv_source(old_spec) {
        // The real message goes on with "\n" and a cmp.Diff of the internal Go structs.
        errs.forbidden(
            "spec.persistentvolumesource",
            "spec.persistentvolumesource is immutable after creation",
        );
    }
    immutable_volume_mode(&mut errs, old, new);
    let old_vac = present(old_spec, "volumeAttributesClassName");
    if old_vac.is_some() && present(new_spec, "volumeAttributesClassName").is_none() {
        errs.forbidden(
            "spec.volumeAttributesClassName",
            "update from non-nil value to nil is forbidden",
        );
    }
    errs
}

// ---------------------------------------------------------------------------------------
// Entry points, called by admission after defaulting.

/// Validation of a new PersistentVolume or PersistentVolumeClaim.
pub fn validate_create(r: &Resource, name: &str, obj: &Value) -> ApiResult<()> {
    match (r.group, r.plural) {
        ("", "persistentvolumes") => {
            let mut errs = pv_errors(name, obj);
            errs.extend(pv_mount_option_errors(obj));
            finish(r, name, errs)
        }
        ("", "persistentvolumeclaims") => finish(r, name, pvc_errors(obj)),
        _ => Ok(()),
    }
}

/// Validation of a write to an existing PersistentVolume or PersistentVolumeClaim.
///
/// A status write leaves the spec as stored, and the real server validates neither the
/// spec nor the volume's annotations then; admission does not know which subresource was
/// written, so an unchanged spec stands for it: the spec was valid when stored, and only
/// the annotation rules (which look at metadata) are applied, when the annotation changed.
pub fn validate_update(r: &Resource, name: &str, old: &Value, new: &Value) -> ApiResult<()> {
    let spec_changed = old.get("spec") != new.get("spec");
    match (r.group, r.plural) {
        ("", "persistentvolumes") => {
            if !spec_changed {
                let changed = annotation(old, MOUNT_OPTIONS_ANNOTATION)
                    != annotation(new, MOUNT_OPTIONS_ANNOTATION);
                let errs = if changed {
                    pv_mount_option_errors(new)
                } else {
                    Errs::default()
                };
                return finish(r, name, errs);
            }
            // The strategy validates the new object, then ValidatePersistentVolumeUpdate
            // validates it again before the update rules.
            let mut errs = pv_errors(name, new);
            errs.extend(pv_mount_option_errors(new));
            errs.extend(pv_errors(name, new));
            errs.extend(pv_update_errors(old, new));
            finish(r, name, errs)
        }
        ("", "persistentvolumeclaims") => {
            if !spec_changed {
                let mut errs = Errs::default();
                let (o, n) = (
                    annotation(old, BETA_STORAGE_CLASS_ANNOTATION),
                    annotation(new, BETA_STORAGE_CLASS_ANNOTATION),
                );
                if o != n {
                    errs.invalid(
                        format!("metadata.annotations.{BETA_STORAGE_CLASS_ANNOTATION}"),
                        Bad::Str(n.unwrap_or_default().to_owned()),
                        "field is immutable",
                    );
                }
                return finish(r, name, errs);
            }
            // As for volumes: the claim rules run twice, then the update rules.
            let mut errs = pvc_errors(new);
            errs.extend(pvc_errors(new));
            errs.extend(pvc_update_errors(old, new));
            finish(r, name, errs)
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).unwrap()
    }

    #[test]
    fn quantities_parse_and_print_like_resource_quantity() {
        assert_eq!(q("1Gi").nanos, (1i128 << 30) * NANO);
        assert_eq!(q("1.5Gi").nanos, 3 * (1i128 << 29) * NANO);
        assert_eq!(q("100m").nanos, 100_000_000);
        assert_eq!(q("1e3").nanos, 1000 * NANO);
        assert!([q("0"), q("0Gi"), q("-0")].iter().all(|z| z.nanos == 0));
        assert_eq!(q("0Gi").canonical(), "0");
        assert_eq!(q("-1Gi").canonical(), "-1Gi");
        assert_eq!(q("-1000").canonical(), "-1k");
        assert_eq!(q("-1500").canonical(), "-1500");
        assert_eq!(q("-0.5").canonical(), "-500m");
        assert_eq!(q("-1e3").canonical(), "-1e3");
        assert_eq!(q("-1Gi").value(), -(1 << 30));
        assert_eq!(Quantity::parse("abc").unwrap_err(), QUANTITY_FORMAT_ERROR);
        assert_eq!(Quantity::parse("1GB").unwrap_err(), QUANTITY_FORMAT_ERROR);
        assert_eq!(Quantity::parse("1KG").unwrap_err(), QUANTITY_SUFFIX_ERROR);
        assert_eq!(Quantity::parse("").unwrap_err(), QUANTITY_FORMAT_ERROR);
        assert_eq!(Quantity::parse("1.2.3").unwrap_err(), QUANTITY_FORMAT_ERROR);
    }

    #[test]
    fn resource_lists_print_like_go() {
        assert_eq!(go_resource_list(None), "core.ResourceList(nil)");
        assert_eq!(go_resource_list(Some(&json!({}))), "core.ResourceList{}");
        assert_eq!(
            go_resource_list(Some(&json!({"cpu": "1"}))),
            "core.ResourceList{\"cpu\":resource.Quantity{i:resource.int64Amount{value:1, scale:0}, d:resource.infDecAmount{Dec:(*inf.Dec)(nil)}, s:\"1\", Format:\"DecimalSI\"}}"
        );
    }

    #[test]
    fn iscsi_names() {
        assert!(iscsi_name_ok("iqn.2001-04.com.example:storage"));
        assert!(!iscsi_name_ok("iqn.2001-04.com.example"));
        assert!(iscsi_name_ok("eui.02004567A425678D"));
        assert!(!iscsi_name_ok("eui.0200"));
        assert!(iscsi_name_ok("naa.52004567BA64678D52004567BA64678D"));
    }

    #[test]
    fn root_paths() {
        assert!(cleans_to_root("/"));
        assert!(cleans_to_root("//./"));
        assert!(cleans_to_root("/a/.."));
        assert!(!cleans_to_root("/a"));
        assert!(!cleans_to_root("a/.."));
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    }
}
