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
    /// The Job's creation and its end (completion, or failure): the call is timed between
    /// the two, so a late look (after a restart, or a change of leader) times it right.
    pub started: Option<jiff::Timestamp>,
    pub ended: Option<jiff::Timestamp>,
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
        let s = job.status.as_ref();
        let failed = (s
            .and_then(|s| s.conditions.as_deref())
            .into_iter()
            .flatten())
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref());
        let ended = (s.and_then(|s| s.completion_time.as_ref()))
            .or(failed)
            .map(|t| t.0);
        SnapshotCall {
            delete,
            status,
            started,
            ended,
        }
    }

    /// How long it ran; `None` when its start is not known.
    pub fn seconds(&self, now: jiff::Timestamp) -> Option<f64> {
        let ran = self.ended.unwrap_or(now).duration_since(self.started?);
        Some(ran.as_secs_f64().max(0.0))
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
    fn each_failure_is_the_code_the_sidecar_would_report() {
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
        let mut job: Job = serde_json::from_value(serde_json::json!({
            "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
            "status": {"completionTime": "2026-01-01T00:00:42Z"}
        }))
        .unwrap();
        let take = SnapshotCall::of(&job, false, CallStatus::Ok);
        assert_eq!(take.method(), "/csi.v1.Controller/CreateSnapshot");
        assert_eq!(take.status.grpc_code(), "OK");
        assert_eq!(take.started, Some("2026-01-01T00:00:00Z".parse().unwrap()));
        let later = "2026-01-01T01:00:00Z".parse().unwrap();
        assert_eq!(take.seconds(later), Some(42.0), "timed to its completion");
        job.status = Some(
            serde_json::from_value(serde_json::json!({"conditions": [{"type": "Failed",
                "status": "True", "lastTransitionTime": "2026-01-01T00:00:07Z"}]}))
            .unwrap(),
        );
        let delete = SnapshotCall::of(&job, true, CallStatus::Unknown);
        assert_eq!(delete.method(), "/csi.v1.Controller/DeleteSnapshot");
        assert_eq!(delete.seconds(later), Some(7.0), "timed to its failure");
    }
}
