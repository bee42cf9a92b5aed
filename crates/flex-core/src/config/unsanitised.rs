//! `unsanitised-parameters`, the per-key opt-out of the path-traversal check: keys whose
//! templates may take a claim's labels or annotations into a path as they are, because the
//! image validates the value itself. Without it, that is an error of the ConfigMap.

use std::collections::{BTreeMap, BTreeSet};

use super::keys::{UNSANITISED_KEY, is_reserved};
use super::problem::Problem;

/// The keys opted out, and which of them needed it.
#[derive(Default)]
pub struct OptOut {
    allowed: BTreeSet<String>,
    used: BTreeSet<String>,
}

impl OptOut {
    /// Reads the key's value: parameter keys of this ConfigMap, `args` or `deprovision-args`,
    /// separated by commas. A name that is none of these is an error, since a misspelt entry
    /// would leave the admin believing a key is opted out.
    pub fn read(data: &BTreeMap<String, String>, problems: &mut Vec<Problem>) -> Self {
        let mut out = OptOut::default();
        let Some(raw) = data.get(UNSANITISED_KEY) else {
            return out;
        };
        for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let templated_list = matches!(entry, "args" | "deprovision-args" | "expand-args");
            if templated_list || (data.contains_key(entry) && !is_reserved(entry)) {
                out.allowed.insert(entry.to_owned());
            } else {
                problems.push(Problem::error(
                    Some(UNSANITISED_KEY),
                    format!("lists `{entry}`, which is not a parameter of this ConfigMap"),
                    "list parameter keys (or `args`, `deprovision-args`, `expand-args`) separated by commas, e.g. `directory,subdir`",
                ));
            }
        }
        out
    }

    /// Whether `key` (`args[2]` counts as `args`) may take user text unsanitised; notes
    /// that the opt-out was needed.
    pub fn allows(&mut self, key: &str) -> bool {
        let base = base_key(key);
        let allowed = self.allowed.contains(base);
        if allowed {
            self.used.insert(base.to_owned());
        }
        allowed
    }

    /// Warnings for listed keys that take no user text into a path: worth removing, so that
    /// a later change of their template is checked again.
    pub fn unneeded(&self) -> Vec<Problem> {
        self.allowed
            .difference(&self.used)
            .map(|key| {
                Problem::warning(
                    Some(UNSANITISED_KEY),
                    format!("lists `{key}`, which takes no unsanitised claim text into a path"),
                    format!("remove `{key}` from the list, so that a later template change is checked again"),
                )
            })
            .collect()
    }
}

/// The ConfigMap key of a templated value: `args[2]` comes from `args`.
pub fn base_key(key: &str) -> &str {
    key.split('[').next().unwrap_or(key)
}
