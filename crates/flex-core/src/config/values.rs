//! Parsers for the values of reserved keys. Each returns the fix-it message on failure, so
//! the caller only adds the key name.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::names::{is_label_key, is_label_value};

/// `90s`, `10m`, `1h30m`, `2h`, `1d`: what kube admins write for timeouts. A bare number is
/// refused because seconds and minutes are both plausible readings.
pub fn duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let help = "write a duration such as `90s`, `10m`, `1h30m`";
    if s.is_empty() {
        return Err(format!("is empty; {help}"));
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(format!("`{s}` has an unknown unit `{c}`; {help}")),
        };
        if number.is_empty() {
            return Err(format!("`{s}` has a unit without a number; {help}"));
        }
        let n: u64 = number
            .parse()
            .map_err(|_| format!("`{s}` is too large; {help}"))?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("`{s}` is too large; {help}"))?;
        number.clear();
    }
    if !number.is_empty() {
        return Err(format!("`{s}` has no unit; {help}"));
    }
    if total == 0 {
        return Err(format!("`{s}` is zero; {help}"));
    }
    if total > 7 * 86_400 {
        return Err(format!(
            "`{s}` is longer than 7 days; a Job that long is a hung Job"
        ));
    }
    Ok(Duration::from_secs(total))
}

pub fn boolean(text: &str) -> Result<bool, String> {
    match text.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(format!("`{other}` is not `true` or `false`")),
    }
}

pub fn integer(text: &str, min: u32, max: u32) -> Result<u32, String> {
    let s = text.trim();
    match s.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a whole number from {min} to {max}")),
    }
}

/// Exit codes from 1 to 255; 0 means success and can never be permanent. An empty value
/// means no exit code is permanent.
pub fn exit_codes(text: &str) -> Result<BTreeSet<i32>, String> {
    let parts = text.split(',').map(str::trim).filter(|p| !p.is_empty());
    parts
        .map(|part| match part.parse::<i32>() {
            Ok(n) if (1..=255).contains(&n) => Ok(n),
            _ => Err(format!(
                "`{part}` is not an exit code from 1 to 255; write a comma-separated list such as `2,3`"
            )),
        })
        .collect()
}

/// `key=value[,key=value...]`, each a valid label key and value.
pub fn node_selector(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = part.split_once('=') else {
            return Err(format!(
                "`{part}` is not `key=value`; write e.g. `storage-net=true,kubernetes.io/os=linux`"
            ));
        };
        let (k, v) = (k.trim(), v.trim());
        if !is_label_key(k) {
            return Err(format!("`{k}` is not a valid node label key"));
        }
        if !is_label_value(v) {
            return Err(format!(
                "`{v}` is not a valid label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)"
            ));
        }
        if map.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(format!("`{k}` is given twice"));
        }
    }
    if map.is_empty() {
        return Err("is empty; write `key=value[,key=value...]` or remove the key".into());
    }
    Ok(map)
}

/// An argv list: a YAML/JSON list of strings, or a single word. A string with spaces is
/// refused instead of being split, since we never hand anything to a shell to split.
pub fn string_list(text: &str) -> Result<Vec<String>, String> {
    let s = text.trim();
    if s.starts_with('[') || s.starts_with('-') {
        let list: Vec<serde_yaml_ng::Value> = serde_yaml_ng::from_str(s).map_err(|e| {
            format!("is not a valid list ({e}); write e.g. `[\"/bin/provision\", \"--verbose\"]`")
        })?;
        let out = (list.into_iter())
            .map(|item| match item {
                serde_yaml_ng::Value::String(v) => Ok(v),
                serde_yaml_ng::Value::Number(n) => Ok(n.to_string()),
                serde_yaml_ng::Value::Bool(b) => Ok(b.to_string()),
                other => Err(format!(
                    "has an entry that is not a string ({other:?}); quote every entry"
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if out.is_empty() {
            return Err("is an empty list; remove the key to use the image's default".into());
        }
        return Ok(out);
    }
    if s.is_empty() {
        return Err("is empty; remove the key to use the image's default".into());
    }
    if s.chars().any(char::is_whitespace) {
        return Err(format!(
            "`{s}` contains spaces, and it is never split by a shell; write a list such as [\"{}\"]",
            s.split_whitespace().collect::<Vec<_>>().join("\", \"")
        ));
    }
    Ok(vec![s.to_owned()])
}

/// A container image reference: no whitespace or control characters, at most one `@`.
pub fn image(text: &str) -> Result<String, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("is empty; set it to the provisioner image, e.g. `registry.example.com/nfs-provision:1.0`".into());
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) || s.matches('@').count() > 1 {
        return Err(format!("`{s}` is not a valid image reference"));
    }
    let name = s.split('@').next().unwrap_or(s);
    let last = name.rsplit('/').next().unwrap_or(name);
    let repo = match last.split_once(':') {
        Some((r, _)) => name.strip_suffix(&last[r.len()..]).unwrap_or(name),
        None => name,
    };
    if repo.chars().any(|c| c.is_ascii_uppercase()) && !repo.contains('.') {
        return Err(format!("`{s}`: image repository names must be lower case"));
    }
    Ok(s.to_owned())
}

/// Whether an image is pinned: a digest or a tag other than `latest`.
pub fn image_is_pinned(image: &str) -> bool {
    if image.contains('@') {
        return true;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    matches!(last.split_once(':'), Some((_, tag)) if tag != "latest")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("90s").unwrap().as_secs(), 90);
        assert_eq!(duration("10m").unwrap().as_secs(), 600);
        assert_eq!(duration("1h30m").unwrap().as_secs(), 5400);
        assert_eq!(duration("1d").unwrap().as_secs(), 86_400);
        assert!(duration("10").unwrap_err().contains("no unit"));
        assert!(duration("10x").unwrap_err().contains("unknown unit"));
        assert!(duration("0s").unwrap_err().contains("zero"));
        assert!(duration("m").unwrap_err().contains("without a number"));
        assert!(duration("30d").unwrap_err().contains("7 days"));
        assert!(duration("").unwrap_err().contains("empty"));
        assert!(
            duration("99999999999999999999s")
                .unwrap_err()
                .contains("too large")
        );
    }

    #[test]
    fn booleans_and_integers() {
        assert!(boolean("true").unwrap());
        assert!(!boolean(" false ").unwrap());
        assert!(boolean("yes").is_err());
        assert_eq!(integer("3", 0, 20).unwrap(), 3);
        assert!(integer("21", 0, 20).is_err());
        assert!(integer("-1", 0, 20).is_err());
        assert!(integer("two", 0, 20).is_err());
    }

    #[test]
    fn exit_code_lists() {
        assert_eq!(exit_codes("2").unwrap(), BTreeSet::from([2]));
        assert_eq!(exit_codes("2, 3,42").unwrap(), BTreeSet::from([2, 3, 42]));
        assert!(exit_codes("").unwrap().is_empty());
        assert!(exit_codes("0").unwrap_err().contains("1 to 255"));
        assert!(exit_codes("256").is_err());
        assert!(exit_codes("two").is_err());
    }

    #[test]
    fn node_selectors() {
        let m = node_selector("storage-net=true, kubernetes.io/os=linux").unwrap();
        assert_eq!(m["storage-net"], "true");
        assert_eq!(m["kubernetes.io/os"], "linux");
        assert!(
            node_selector("storage-net")
                .unwrap_err()
                .contains("key=value")
        );
        assert!(
            node_selector("bad key=1")
                .unwrap_err()
                .contains("label key")
        );
        assert!(node_selector("a=b c").unwrap_err().contains("label value"));
        assert!(node_selector("a=1,a=2").unwrap_err().contains("twice"));
        assert!(node_selector(" , ").unwrap_err().contains("empty"));
    }

    #[test]
    fn string_lists() {
        assert_eq!(string_list("/bin/provision").unwrap(), ["/bin/provision"]);
        assert_eq!(
            string_list(r#"["/bin/sh", "-c", "x y"]"#).unwrap(),
            ["/bin/sh", "-c", "x y"]
        );
        assert_eq!(string_list("- a\n- 2\n").unwrap(), ["a", "2"]);
        assert!(
            string_list("/bin/provision --fast")
                .unwrap_err()
                .contains("never split")
        );
        assert!(string_list("[").unwrap_err().contains("not a valid list"));
        assert!(string_list("[]").unwrap_err().contains("empty list"));
        assert!(
            string_list("[{a: 1}]")
                .unwrap_err()
                .contains("not a string")
        );
    }

    #[test]
    fn images() {
        assert!(image("custom/iscsi-provision:1.4").is_ok());
        assert!(image("registry.example.com:5000/team/img@sha256:abc").is_ok());
        assert!(image("").is_err());
        assert!(image("bad image").is_err());
        assert!(image("Custom/Img:1").is_err());
        assert!(image_is_pinned("a/b:1.4"));
        assert!(image_is_pinned("registry:5000/a/b@sha256:00"));
        assert!(!image_is_pinned("registry:5000/a/b"));
        assert!(!image_is_pinned("a/b:latest"));
    }
}
