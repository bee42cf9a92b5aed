//! What should happen next: pure functions over API objects, returning a step and the
//! notices users should see. The controller only gathers the inputs and carries out steps.

pub mod claim;
pub mod expand;
pub mod orphan;
pub mod retry;
pub mod snapshot;
pub mod snapshot_call;
pub mod snapshot_content;
pub mod volume;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// What a planner must have read before it can decide; the controller reads it and asks the
/// planner again. A plan is never made from a guess: each of these is read from the API
/// server (or, for [`Ask::Prepare`], computed) only at the moment a decision rests on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    /// What an attempt is made from: the templates rendered, the inputs digested, the data
    /// source resolved ([`claim::Prepared`]).
    Prepare,
    /// The claim's PV (a Job succeeded and the cache shows none).
    Volume,
    /// The pods of the claim's Jobs in this namespace (a report the cache does not show).
    Pods { namespace: String },
    /// The node the claim names (the cache does not show it). Asked only for a valid name:
    /// it becomes the path of the read.
    Node { name: String },
    /// The volume's deprovision record.
    Record,
    /// The PV's claim, and the PV and its record afresh: the decision may destroy storage.
    Claim,
    /// What still names a finished Job's storage: its claim, a PV, a deprovision Job, a
    /// record ([`orphan::Confirmed`]).
    Traces,
    /// A content's VolumeSnapshot, from the API server (the cache no longer shows it).
    Snapshot,
}

/// A plan, or the one thing to read before there can be one.
pub type Decision<P> = Result<P, Ask>;

/// What a notice counts as in the metrics: read from here, never from its key or text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NoticeKind {
    /// A volume was provisioned (`provision_total`).
    Provisioned,
    /// An attempt failed, provisioning gave up, or a claim is bound to a volume that did not
    /// verify (`provision_failed_total`).
    ProvisionFailed,
    /// A deprovision attempt failed (`delete_failed_total`).
    DeleteFailed,
    /// A snapshot or delete-snapshot Job ended (`csi_sidecar_operations_seconds`).
    SnapshotCall(snapshot_call::SnapshotCall),
    /// Progress, or a problem of the claim, its class or a pod: counted by no metric.
    #[default]
    Other,
}

/// Something to tell users about, once: `key` identifies it so it is not repeated.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    pub key: String,
    pub kind: NoticeKind,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
    /// What the controller was doing (`Provision`, `Retry`, `GiveUp`, `Observe`, `Verify`).
    pub action: &'static str,
    /// The pod, Job, PV or ConfigMap the notice is about. Events that differ only in their
    /// message are merged by the event recorder, so this keeps distinct failures distinct.
    pub related: Option<ObjectReference>,
}

/// A reference to `object`, for an event on it or about it.
pub fn object_ref<K>(object: &K) -> ObjectReference
where
    K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    let meta = object.metadata();
    ObjectReference {
        api_version: Some(K::API_VERSION.to_owned()),
        kind: Some(K::KIND.to_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        ..Default::default()
    }
}

impl Notice {
    pub fn warning(
        key: impl Into<String>,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Notice {
            key: key.into(),
            kind: NoticeKind::Other,
            warning: true,
            reason,
            message: message.into(),
            action: "Provision",
            related: None,
        }
    }

    pub fn normal(
        key: impl Into<String>,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Notice {
            warning: false,
            ..Notice::warning(key, reason, message)
        }
    }

    /// What the metrics count this notice as.
    pub fn counted_as(mut self, kind: NoticeKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn action(mut self, action: &'static str) -> Self {
        self.action = action;
        self
    }

    pub fn about<K>(mut self, object: &K) -> Self
    where
        K: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta>,
    {
        self.related = Some(object_ref(object));
        self
    }
}

/// What the controller says of its own failures on the object it was reconciling.
pub mod notices {
    use super::{Notice, reasons};

    /// A missing permission or object stops the controller for this object (`key`) until
    /// the retry after `wait`.
    pub fn blocked(key: &str, error: &str, wait: std::time::Duration) -> Notice {
        let minutes = wait.as_secs() / 60;
        let message = format!(
            "the provisioner cannot go on: {error}; it retries in {minutes} minutes (check the controller's RBAC in deploy/rbac.yaml and that its config namespaces exist)"
        );
        Notice::warning(
            format!("blocked/{key}"),
            reasons::CONTROLLER_BLOCKED,
            message,
        )
    }

    /// What an attempt is made from could not be prepared: a fault of the controller.
    pub fn not_prepared(key: &str, why: &str) -> Notice {
        let message = format!(
            "the provisioner could not prepare this claim's attempt ({why}); it retries with backoff: please report this with the class's ConfigMap"
        );
        Notice::warning(
            format!("prepare-failed/{key}"),
            reasons::CONTROLLER_BLOCKED,
            message,
        )
    }
}

/// Event reasons on claims; the sig-storage library's where it has one.
pub mod reasons {
    pub const PROVISIONING: &str = "Provisioning";
    pub const SUCCEEDED: &str = "ProvisioningSucceeded";
    pub const FAILED: &str = "ProvisioningFailed";
    /// The Job's pod cannot start (image, scheduling, missing Secret or ServiceAccount).
    pub const POD_NOT_STARTING: &str = "ProvisionerPodNotStarting";
    /// The class's configuration is invalid or missing.
    pub const CONFIG_INVALID: &str = "ProvisioningConfigInvalid";
    /// On a PV: its deprovision Job failed; the PV is kept and retried.
    pub const VOLUME_FAILED_DELETE: &str = "VolumeFailedDelete";
    /// The controller lacks a permission, or an object it needs is missing.
    pub const CONTROLLER_BLOCKED: &str = "ProvisionerBlocked";
    /// An expansion Job started (the external resizer's reason and wording).
    pub const RESIZING: &str = "Resizing";
    pub const RESIZE_SUCCESSFUL: &str = "VolumeResizeSuccessful";
    pub const RESIZE_FAILED: &str = "VolumeResizeFailed";
}
