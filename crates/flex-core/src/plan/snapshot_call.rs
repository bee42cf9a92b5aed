//! A snapshot Job's end as the CSI snapshotter counts its calls to a driver: which call, the
//! gRPC status it would have ended with, and since when it ran. Dashboards built on the
//! sidecar's `csi_sidecar_operations_seconds` then show our snapshots unchanged.

use crate::job::Failure;
use k8s_openapi::api::batch::v1::Job;

/// One finished snapshot or delete-snapshot Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotCall {
    /// A delete-snapshot Job (`DeleteSnapshot`), else a snapshot Job (`CreateSnapshot`).
    pub delete: bool,
    pub status: CallStatus,
    /// The Job's creation: the call is timed from it.
    pub started: Option<jiff::Timestamp>,
}

/// The gRPC status codes a Job's end maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    Ok,
    /// It ran past its timeout.
    DeadlineExceeded,
    /// A permanent exit code, or a report the controller refused: the same inputs would
    /// fail again.
    InvalidArgument,
    /// Any other failure.
    Unknown,
}

impl CallStatus {
    /// The code's name, as the sidecar labels it.
    pub fn grpc_code(self) -> &'static str {
        match self {
            CallStatus::Ok => "OK",
            CallStatus::DeadlineExceeded => "DeadlineExceeded",
            CallStatus::InvalidArgument => "InvalidArgument",
            CallStatus::Unknown => "Unknown",
        }
    }

    /// How a failed attempt ended.
    pub fn of_failure(f: &Failure) -> Self {
        if f.timed_out {
            CallStatus::DeadlineExceeded
        } else if f.permanent {
            CallStatus::InvalidArgument
        } else {
            CallStatus::Unknown
        }
    }
}

impl SnapshotCall {
    /// `job`'s end, with `status`.
    pub fn of(job: &Job, delete: bool, status: CallStatus) -> Self {
        let started = job.metadata.creation_timestamp.as_ref().map(|t| t.0);
        SnapshotCall {
            delete,
            status,
            started,
        }
    }

    /// The CSI method the Job stands for, as the sidecar names it.
    pub fn method(&self) -> &'static str {
        match self.delete {
            true => "/csi.v1.Controller/DeleteSnapshot",
            false => "/csi.v1.Controller/CreateSnapshot",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(permanent: bool, timed_out: bool) -> Failure {
        Failure {
            permanent,
            message: "exit code 1".into(),
            at: None,
            timed_out,
        }
    }

    #[test]
    fn a_timeout_is_a_deadline_even_when_the_policy_also_failed_it() {
        assert_eq!(
            CallStatus::of_failure(&failure(true, true)),
            CallStatus::DeadlineExceeded
        );
        assert_eq!(
            CallStatus::of_failure(&failure(true, false)),
            CallStatus::InvalidArgument
        );
        assert_eq!(
            CallStatus::of_failure(&failure(false, false)),
            CallStatus::Unknown
        );
    }

    #[test]
    fn calls_are_named_as_the_csi_snapshotter_names_them() {
        let job = Job {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                creation_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-01-01T00:00:00Z".parse().unwrap(),
                )),
                ..Default::default()
            },
            ..Default::default()
        };
        let take = SnapshotCall::of(&job, false, CallStatus::Ok);
        assert_eq!(take.method(), "/csi.v1.Controller/CreateSnapshot");
        assert_eq!(take.status.grpc_code(), "OK");
        assert_eq!(take.started, Some("2026-01-01T00:00:00Z".parse().unwrap()));
        let delete = SnapshotCall::of(&job, true, CallStatus::Unknown);
        assert_eq!(delete.method(), "/csi.v1.Controller/DeleteSnapshot");
    }
}
