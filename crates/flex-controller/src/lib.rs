//! flex-controller: the in-cluster controller of flex-provisioner. It watches claims,
//! classes, ConfigMaps, Jobs, pods and PVs (kube-runtime), asks flex-core's plans what to
//! do, and carries it out; with leader election, metrics and the HTTP endpoints.
//!
//! Decisions belong in flex-core, not here: this crate only fetches, applies and watches.
//! It must not depend on the sandbox or the command line.
#![forbid(unsafe_code)]

pub mod controller;
pub mod fence;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod throttle;

/// Errors of the controller. `category()` gives a bounded label for metrics and logs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A check before anything starts: the controller may not list what it watches.
    #[error("checking {what} before starting: Kubernetes API: {source}")]
    Preflight { what: String, source: kube::Error },
    /// Reading from the API server what a plan is made from (a claim cut short, a record,
    /// whether a PV or claim exists).
    #[error("reading {what}: Kubernetes API: {source}")]
    Read { what: String, source: kube::Error },
    /// Carrying out a write a plan decided on.
    #[error("{what}: Kubernetes API: {source}")]
    Write { what: String, source: kube::Error },
    /// What an attempt is made from could not be prepared: the task that renders and
    /// digests it ended without an answer (a fault of the controller, never of the input).
    #[error("preparing claim {claim}: {message}")]
    Prepare { claim: String, message: String },
    #[error("leadership was lost; stopping so that only the new leader acts")]
    LeadershipLost,
    #[error("cannot start the thread that renews the leader Lease: {0}")]
    LeaseThread(std::io::Error),
    #[error(
        "the namespace {namespace:?} of the leader Lease does not exist: pass --namespace (env POD_NAMESPACE) naming an existing namespace where the controller may hold its Lease, or --no-leader-elect when only one instance can ever run"
    )]
    LeaseNamespaceMissing { namespace: String },
    #[error(
        "the controller may not hold its leader Lease in namespace {namespace:?} ({message}): pass --namespace (env POD_NAMESPACE) naming the namespace its RBAC grants Leases in (deploy/rbac.yaml), or --no-leader-elect when only one instance can ever run"
    )]
    LeaseForbidden { namespace: String, message: String },
}

impl Error {
    /// A label from a fixed set, safe to use in metrics (never an object name or message).
    pub fn category(&self) -> &'static str {
        match self {
            Error::Preflight { .. } => "preflight",
            Error::Read { .. } => "read",
            Error::Write { .. } => "write",
            Error::Prepare { .. } => "prepare",
            Error::LeadershipLost
            | Error::LeaseThread(_)
            | Error::LeaseNamespaceMissing { .. }
            | Error::LeaseForbidden { .. } => "leader",
        }
    }
}

impl Error {
    /// Context for a failed read of `what`.
    pub fn read(what: impl std::fmt::Display) -> impl FnOnce(kube::Error) -> Error {
        let what = what.to_string();
        move |source| Error::Read { what, source }
    }

    /// Context for a failed write (`what`: e.g. "creating Job ns/name").
    pub fn write(what: impl std::fmt::Display) -> impl FnOnce(kube::Error) -> Error {
        let what = what.to_string();
        move |source| Error::Write { what, source }
    }

    /// What the API server said, for an error of a request to it.
    fn kube_source(&self) -> Option<&kube::Error> {
        match self {
            Error::Preflight { source, .. }
            | Error::Read { source, .. }
            | Error::Write { source, .. } => Some(source),
            _ => None,
        }
    }

    /// Whether the API server was only busy or out of reach (429, 5xx, no answer): the same
    /// request may well pass a moment later.
    pub fn is_transient(&self) -> bool {
        match self.kube_source() {
            Some(kube::Error::Api(s)) => s.code == 429 || s.code >= 500,
            Some(kube::Error::HyperError(_) | kube::Error::Service(_)) => true,
            _ => false,
        }
    }

    /// The API server's status code, when it answered with one.
    pub fn status_code(&self) -> Option<u16> {
        match self.kube_source() {
            Some(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A lock whose holder panicked is used as it is: every critical section here is a few
/// infallible collection operations, so a panic cannot leave the data half-updated.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> kube::Error {
        kube::Error::Api(
            serde_json::from_value(serde_json::json!({
                "status": "Failure", "message": "jobs is forbidden", "reason": "Forbidden", "code": 403
            }))
            .unwrap(),
        )
    }

    /// The metric's label comes from the stage that failed, the message says what it was
    /// doing, and the retry policy still sees the API server's answer.
    #[test]
    fn an_error_names_its_stage_and_what_it_was_doing() {
        let write = Error::write("creating Job ns/provision-1")(forbidden());
        assert_eq!(write.category(), "write");
        assert!(
            write
                .to_string()
                .starts_with("creating Job ns/provision-1: Kubernetes API: "),
            "{write}"
        );
        assert_eq!(write.status_code(), Some(403));
        let read = Error::read("PersistentVolume pvc-1")(forbidden());
        assert_eq!(read.category(), "read");
        assert!(
            read.to_string()
                .starts_with("reading PersistentVolume pvc-1: "),
            "{read}"
        );
        assert_eq!(Error::LeadershipLost.status_code(), None);
        let prepare = Error::Prepare {
            claim: "a/data".into(),
            message: "task 7 panicked".into(),
        };
        assert_eq!(prepare.category(), "prepare");
        assert_eq!(
            prepare.to_string(),
            "preparing claim a/data: task 7 panicked"
        );
        assert_eq!(
            prepare.status_code(),
            None,
            "backed off, never taken for a 404"
        );
    }
}
