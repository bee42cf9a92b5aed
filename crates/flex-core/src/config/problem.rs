//! A configuration problem: which key, what is wrong, how to fix it, and whether it blocks.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth fixing, but the configuration is used.
    Warning,
    /// The configuration cannot be used; no Job is created from it.
    Error,
}

/// One finding about a ConfigMap or StorageClass, written for the kube admin who must fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub severity: Severity,
    /// The ConfigMap key concerned, if the finding is about one key.
    pub key: Option<String>,
    /// What is wrong, in plain words.
    pub what: String,
    /// How to fix it.
    pub fix: String,
}

impl Problem {
    pub fn error(key: Option<&str>, what: impl Into<String>, fix: impl Into<String>) -> Self {
        Problem {
            severity: Severity::Error,
            key: key.map(str::to_owned),
            what: what.into(),
            fix: fix.into(),
        }
    }

    pub fn warning(key: Option<&str>, what: impl Into<String>, fix: impl Into<String>) -> Self {
        Problem {
            severity: Severity::Warning,
            ..Problem::error(key, what, fix)
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        match &self.key {
            Some(key) => write!(f, "{level}: key `{key}`: {}; fix: {}", self.what, self.fix),
            None => write!(f, "{level}: {}; fix: {}", self.what, self.fix),
        }
    }
}

/// The blocking problems of a configuration that cannot be used, in key order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors {
    /// `namespace/name` of the ConfigMap (or the class name when there is none).
    pub origin: String,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "configuration {} is invalid: ", self.origin)?;
        let errors: Vec<String> = self
            .problems
            .iter()
            .filter(|p| p.is_error())
            .map(ToString::to_string)
            .collect();
        f.write_str(&errors.join(" | "))
    }
}
