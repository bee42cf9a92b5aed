//! What a snapshot Job's image reports on exit 0, checked as a volume report is: it is
//! written by the image, so it is data to verify, never an instruction.

/// The most a snapshot report may hold; a handle and a size fit in far less.
pub const MAX_REPORT_BYTES: usize = 4096;
/// The longest handle accepted (CSI's own limit for snapshot ids is 128 bytes; paths and
/// export names run longer).
pub const MAX_HANDLE_BYTES: usize = 1024;

/// A snapshot as its image reported it, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotReport {
    pub handle: String,
    /// Bytes a volume restored from it needs.
    pub restore_size: i64,
}

/// Why a snapshot report is refused; `Display` follows "the snapshot Job ... succeeded, but".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotReportError {
    #[error(
        "it reported nothing (its termination message is empty): the image must write {{\"snapshotHandle\":\"…\",\"restoreSize\":<bytes>}} to its termination log on exit 0"
    )]
    Empty,
    #[error("its report holds {0} bytes, more than the {MAX_REPORT_BYTES} a snapshot report may")]
    TooLong(usize),
    #[error(
        "its report is not one JSON object ({0}): it must be {{\"snapshotHandle\":\"…\",\"restoreSize\":<bytes>}}"
    )]
    NotAnObject(String),
    #[error(
        "its report carries {0}, which the controller sets: a report holds only snapshotHandle and restoreSize"
    )]
    SetsWhatTheControllerOwns(String),
    #[error(
        "its report carries {0}, which a snapshot report does not have: it holds only snapshotHandle and restoreSize"
    )]
    UnknownKeys(String),
    #[error(
        "its report's snapshotHandle is missing, not text, empty, longer than {MAX_HANDLE_BYTES} bytes or holds a control character"
    )]
    BadHandle,
    #[error(
        "its report names the snapshot `{got}`, but this snapshot's directory is `{expected}`: an image may report only the snapshot it was given"
    )]
    NotItsHandle { got: String, expected: String },
    #[error("its report's restoreSize is missing or not a whole number of bytes from 0 to 2^63-1")]
    BadSize,
}

/// Checks a snapshot report. `expected`: the only handle the image may report (a class with
/// per-volume directories knows it before the Job runs).
pub fn check_snapshot_report(
    report: &str,
    expected: Option<&str>,
) -> Result<SnapshotReport, SnapshotReportError> {
    use SnapshotReportError as E;
    let report = report.trim();
    if report.is_empty() {
        return Err(E::Empty);
    }
    if report.len() > MAX_REPORT_BYTES {
        return Err(E::TooLong(report.len()));
    }
    let map = match serde_json::from_str::<serde_json::Value>(report) {
        Ok(serde_json::Value::Object(map)) => map,
        Ok(other) => return Err(E::NotAnObject(format!("it is {}", kind_of(&other)))),
        Err(e) => return Err(E::NotAnObject(e.to_string())),
    };
    let keys = |f: &dyn Fn(&str) -> bool| {
        map.keys()
            .filter(|k| f(k))
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let owned = keys(&|k| matches!(k, "readyToUse" | "creationTime" | "error"));
    if !owned.is_empty() {
        return Err(E::SetsWhatTheControllerOwns(owned));
    }
    let unknown = keys(&|k| !matches!(k, "snapshotHandle" | "restoreSize"));
    if !unknown.is_empty() {
        return Err(E::UnknownKeys(unknown));
    }
    let handle = map
        .get("snapshotHandle")
        .and_then(serde_json::Value::as_str)
        .filter(|h| !h.is_empty() && h.len() <= MAX_HANDLE_BYTES)
        .filter(|h| !h.chars().any(char::is_control))
        .ok_or(E::BadHandle)?;
    if let Some(expected) = expected.filter(|e| *e != handle) {
        return Err(E::NotItsHandle {
            got: handle.to_owned(),
            expected: expected.to_owned(),
        });
    }
    let restore_size = map
        .get("restoreSize")
        .and_then(serde_json::Value::as_i64)
        .filter(|s| *s >= 0)
        .ok_or(E::BadSize)?;
    Ok(SnapshotReport {
        handle: handle.to_owned(),
        restore_size,
    })
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::String(_) => "text",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::Bool(_) => "a boolean",
        _ => "null",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "/var/flex/.snapshots/team/9f1c";

    #[test]
    fn a_report_is_exactly_a_handle_and_a_size() {
        let ok = check_snapshot_report(
            &format!("{{\"snapshotHandle\":\"{DIR}\",\"restoreSize\":1073741824}}\n"),
            Some(DIR),
        )
        .unwrap();
        assert_eq!(ok.handle, DIR);
        assert_eq!(ok.restore_size, 1 << 30);
        let refused = |r: &str| check_snapshot_report(r, None).unwrap_err().to_string();
        assert!(refused("").contains("reported nothing"));
        assert!(refused("[1]").contains("a list"), "{}", refused("[1]"));
        assert!(
            refused("{\"snapshotHandle\":\"h\",\"restoreSize\":1,\"readyToUse\":true}")
                .contains("readyToUse, which the controller sets")
        );
        assert!(
            refused("{\"snapshotHandle\":\"h\",\"restoreSize\":1,\"nfs\":{}}")
                .contains("nfs, which a snapshot report does not have")
        );
        assert!(refused("{\"snapshotHandle\":\"\",\"restoreSize\":1}").contains("snapshotHandle"));
        assert!(refused("{\"snapshotHandle\":\"a\\nb\",\"restoreSize\":1}").contains("control"));
        assert!(
            refused(&format!(
                "{{\"snapshotHandle\":\"{}\",\"restoreSize\":1}}",
                "h".repeat(1025)
            ))
            .contains("longer")
        );
        assert!(refused(&" ".repeat(10)).contains("reported nothing"));
        assert!(refused(&format!("{{\"x\":\"{}\"}}", "a".repeat(5000))).contains("more than"));
    }

    #[test]
    fn sizes_outside_int64_and_fractions_are_refused() {
        for size in ["-1", "1.5", "9223372036854775808", "\"1Gi\"", "null"] {
            let r = format!("{{\"snapshotHandle\":\"h\",\"restoreSize\":{size}}}");
            assert_eq!(
                check_snapshot_report(&r, None),
                Err(SnapshotReportError::BadSize),
                "{size}"
            );
        }
        let max = "{\"snapshotHandle\":\"h\",\"restoreSize\":9223372036854775807}";
        assert_eq!(
            check_snapshot_report(max, None).unwrap().restore_size,
            i64::MAX
        );
    }

    #[test]
    fn with_a_known_directory_only_its_own_handle() {
        let other = "{\"snapshotHandle\":\"/var/flex/.snapshots/other/77\",\"restoreSize\":1}";
        let e = check_snapshot_report(other, Some(DIR))
            .unwrap_err()
            .to_string();
        assert!(e.contains("only the snapshot it was given"), "{e}");
        let up = format!("{{\"snapshotHandle\":\"{DIR}/..\",\"restoreSize\":1}}");
        assert!(check_snapshot_report(&up, Some(DIR)).is_err());
    }
}
