//! A container's `securityContext` capabilities and `allowPrivilegeEscalation: false`, applied
//! as a container runtime applies them: the process starts through `setpriv` (util-linux)
//! with its bounding set reduced to what the container is granted, nothing inheritable or
//! ambient, and `no_new_privs` when escalation is off. A root process gets exactly its
//! bounding set when it execs, so a script running as root keeps only the granted
//! capabilities, as it would in a pod.
//!
//! A container without `capabilities` (and without `allowPrivilegeEscalation: false`), or a
//! privileged one, starts with the sandbox's own privileges. The user is never changed:
//! `runAsUser` is not applied.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// What containerd grants a container that drops nothing (its `defaultUnixCaps`), in
/// setpriv's spelling.
const RUNTIME_DEFAULT: &[&str] = &[
    "chown",
    "dac_override",
    "fsetid",
    "fowner",
    "mknod",
    "net_raw",
    "setgid",
    "setuid",
    "setfcap",
    "setpcap",
    "net_bind_service",
    "sys_chroot",
    "kill",
    "audit_write",
];

/// CAP_SETPCAP's bit: needed to reduce a bounding set.
const CAP_SETPCAP: u32 = 8;

/// The program and arguments that start container `c` with only the capabilities its
/// `securityContext` grants: through setpriv, or as they are when it limits nothing. A
/// program that cannot be found is left as it is, so that starting it fails as before
/// (exit 128 and "failed to start container"), not inside setpriv.
pub(super) fn confine(
    c: &Value,
    program: PathBuf,
    args: Vec<String>,
    env: &[(String, String)],
) -> Result<(PathBuf, Vec<String>), super::Waiting> {
    let options =
        setpriv_options(c, can_reduce_bounding_set()).map_err(|message| super::Waiting {
            reason: "CreateContainerError",
            message,
        })?;
    let Some(options) = options else {
        return Ok((program, args));
    };
    let child_path = env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or_default();
    if !resolves(&program, child_path) {
        return Ok((program, args));
    }
    let setpriv = setpriv().ok_or_else(|| super::Waiting {
        reason: "CreateContainerError",
        message: "the container's securityContext limits its capabilities, which the sandbox applies with setpriv (util-linux); it is not installed".into(),
    })?;
    let args = options
        .into_iter()
        .chain(["--".to_owned(), program.display().to_string()])
        .chain(args)
        .collect();
    Ok((setpriv, args))
}

/// The setpriv options that confine container `c`'s process, or `None` when it starts
/// unconfined. `can_bound` says whether this process may reduce a bounding set (see
/// [`can_reduce_bounding_set`]); without it the child is already unprivileged and only the
/// inherited and ambient sets are cleared. An invalid capability name is an error, as a
/// runtime refuses to create the container.
fn setpriv_options(c: &Value, can_bound: bool) -> Result<Option<Vec<String>>, String> {
    let sc = &c["securityContext"];
    if sc["privileged"] == Value::Bool(true) {
        return Ok(None);
    }
    let caps = sc.get("capabilities").filter(|v| !v.is_null());
    let no_escalation = sc["allowPrivilegeEscalation"] == Value::Bool(false);
    if caps.is_none() && !no_escalation {
        return Ok(None);
    }
    let mut options = Vec::new();
    if let Some(caps) = caps {
        let add = names(&caps["add"])?;
        let drop = names(&caps["drop"])?;
        // containerd's order: `ALL` in add, then `ALL` in drop, then each added name, then
        // each dropped one (so a name both added and dropped is dropped).
        let mut set: Vec<String> = if drop.iter().any(|n| n == "all") {
            vec!["-all".into()]
        } else if add.iter().any(|n| n == "all") {
            vec!["+all".into()]
        } else {
            std::iter::once("-all".to_owned())
                .chain(RUNTIME_DEFAULT.iter().map(|n| format!("+{n}")))
                .collect()
        };
        set.extend(add.iter().filter(|n| *n != "all").map(|n| format!("+{n}")));
        set.extend(drop.iter().filter(|n| *n != "all").map(|n| format!("-{n}")));
        if can_bound {
            options.push(format!("--bounding-set={}", set.join(",")));
        }
        options.push("--inh-caps=-all".into());
        options.push("--ambient-caps=-all".into());
    }
    if no_escalation {
        options.push("--no-new-privs".into());
    }
    Ok(Some(options))
}

/// Capability names as setpriv spells them: `CAP_CHOWN` and `CHOWN` are both `chown`.
fn names(list: &Value) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for v in list.as_array().into_iter().flatten() {
        let raw = v.as_str().unwrap_or_default();
        let upper = raw.to_ascii_uppercase();
        let name = upper
            .strip_prefix("CAP_")
            .unwrap_or(&upper)
            .to_ascii_lowercase();
        // Only letters, digits and `_`: a `,` or `-` would be read by setpriv as another
        // entry of its list.
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!("invalid capability {raw:?} in securityContext"));
        }
        out.push(name);
    }
    Ok(out)
}

/// Whether this process may reduce a child's bounding set (it holds CAP_SETPCAP, as root
/// does).
fn can_reduce_bounding_set() -> bool {
    effective() & (1 << CAP_SETPCAP) != 0
}

/// This process's effective capabilities, read from /proc/self/status; none where that
/// cannot be read.
pub(super) fn effective() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        })
        .unwrap_or(0)
}

/// The setpriv executable: on this process's PATH, else in /usr/bin or /bin.
fn setpriv() -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    on_path(Path::new("setpriv"), &format!("{path}:/usr/bin:/bin"))
}

/// Whether `program` names an executable: a path as it is, a bare name on `path`.
fn resolves(program: &Path, path: &str) -> bool {
    if program.components().count() > 1 {
        return super::is_executable(program);
    }
    on_path(program, path).is_some()
}

fn on_path(name: &Path, path: &str) -> Option<PathBuf> {
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| super::is_executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(sc: Value) -> Option<Vec<String>> {
        setpriv_options(&json!({"name": "c", "securityContext": sc}), true).unwrap()
    }

    #[test]
    fn drop_all_keeps_only_what_is_added() {
        assert_eq!(
            options(json!({"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "CAP_DAC_OVERRIDE", "fowner"]}})),
            Some(vec![
                "--bounding-set=-all,+chown,+dac_override,+fowner".to_owned(),
                "--inh-caps=-all".to_owned(),
                "--ambient-caps=-all".to_owned(),
                "--no-new-privs".to_owned(),
            ])
        );
        assert_eq!(
            options(json!({"capabilities": {"drop": ["ALL"]}})).unwrap()[0],
            "--bounding-set=-all"
        );
    }

    #[test]
    fn without_drop_all_the_runtime_default_is_the_start() {
        let o = options(json!({"capabilities": {"drop": ["NET_RAW"], "add": ["SYS_TIME"]}}));
        let bounding = &o.unwrap()[0];
        assert!(
            bounding.starts_with("--bounding-set=-all,+chown,+dac_override,"),
            "{bounding}"
        );
        assert!(bounding.ends_with(",+sys_time,-net_raw"), "{bounding}");
        let o = options(json!({"capabilities": {"add": ["ALL"], "drop": ["MKNOD"]}}));
        assert_eq!(o.unwrap()[0], "--bounding-set=+all,-mknod");
    }

    #[test]
    fn unconfined_when_privileged_or_nothing_is_said() {
        assert_eq!(options(Value::Null), None);
        assert_eq!(options(json!({"runAsUser": 0})), None);
        assert_eq!(
            options(json!({"privileged": true, "capabilities": {"drop": ["ALL"]}})),
            None
        );
        assert_eq!(
            options(json!({"allowPrivilegeEscalation": false})),
            Some(vec!["--no-new-privs".to_owned()])
        );
    }

    #[test]
    fn an_unprivileged_sandbox_only_clears_what_it_can() {
        let c = json!({"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}});
        assert_eq!(
            setpriv_options(&c, false).unwrap(),
            Some(vec![
                "--inh-caps=-all".to_owned(),
                "--ambient-caps=-all".to_owned()
            ])
        );
    }

    #[test]
    fn a_name_that_would_widen_setprivs_list_is_refused() {
        for bad in ["CHOWN,+SYS_ADMIN", "-all", "", "CAP_"] {
            let c = json!({"securityContext": {"capabilities": {"add": [bad]}}});
            let e = setpriv_options(&c, true).unwrap_err();
            assert!(e.contains("invalid capability"), "{bad}: {e}");
        }
    }
}
