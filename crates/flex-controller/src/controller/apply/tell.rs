//! What the applier tells users, and the metrics of what was done: each notice is published
//! as an event once per object, and the success and failure counts move with it (by the
//! notice's kind), so a metric counts what users were told and nothing twice.

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeClaim};
use kube::Resource;
use kube::runtime::events::{Event, EventType};

use super::Applier;
use flex_core::plan::Notice;

/// What an event's note may hold: the API server refuses a note over 1,024 bytes (not
/// characters: a message of multi-byte text cut at 1,000 characters was refused, and the
/// user told nothing), so it is cut at a character boundary within 1,000 bytes.
pub(super) fn note(message: &str) -> &str {
    const MOST: usize = 1000;
    if message.len() <= MOST {
        return message;
    }
    let end = (0..=MOST)
        .rev()
        .find(|i| message.is_char_boundary(*i))
        .unwrap_or(0);
    &message[..end]
}

impl Applier {
    /// Tells notices on a claim; its first success is also timed, from the claim's
    /// creation (`provision_duration`).
    pub async fn tell_claim(&self, claim: &PersistentVolumeClaim, class: &str, notices: &[Notice]) {
        let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (self.tell(&claim.object_ref(&()), class, notices, created)).await;
    }

    /// Publishes each notice the first time it is seen on `on`, counting it by its kind.
    /// Each fresh notice is counted, and a success timed from `created`, before its event
    /// is published: a scrape taken while the event write is under way (it may wait on the
    /// API server's rate limits) then sees the count and its duration together, never one
    /// without the other.
    pub async fn tell(
        &self,
        on: &ObjectReference,
        class: &str,
        notices: &[Notice],
        created: Option<jiff::Timestamp>,
    ) {
        // Events are de-duplicated twice, for two reasons: here, so that a notice every
        // reconcile repeats costs no request and is counted in the metrics once; kube's
        // recorder then merges what is published again after this memory let it go (see
        // seen.rs) into one event series, as Kubernetes' own components do.
        for n in notices {
            // Once per object: a class's problem is told on each of its claims.
            let scoped = format!("{}/{}", on.uid.as_deref().unwrap_or_default(), n.key);
            if !self.said.insert(&scoped) {
                continue;
            }
            self.metrics.count_notice(n.kind, class, created);
            self.publish(
                on,
                n.warning,
                n.reason,
                &n.message,
                n.action,
                n.related.clone(),
            )
            .await;
        }
    }

    /// Publishes an event now, whether or not it was said before (a problem found on a
    /// write of its own, such as a ConfigMap's or an orphaned Job's).
    pub async fn event(&self, on: &ObjectReference, warning: bool, reason: &str, message: &str) {
        self.publish(on, warning, reason, message, "Provision", None)
            .await;
    }

    async fn publish(
        &self,
        on: &ObjectReference,
        warning: bool,
        reason: &str,
        message: &str,
        action: &str,
        related: Option<ObjectReference>,
    ) {
        let ev = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note(message).to_owned()),
            action: action.into(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&ev, on).await {
            tracing::warn!(error = %e, reason, "cannot publish an event");
        }
    }

    /// A ConfigMap's problems, each an event on it; its errors are counted for the class.
    pub async fn tell_config_problems(&self, class: &str, r: &super::super::configs::ConfigReport) {
        let on = r.config_map.object_ref(&());
        let errors = r.problems.iter().filter(|p| p.is_error()).count();
        self.metrics.count_config_errors(class, errors);
        for p in &r.problems {
            let reason = flex_core::plan::reasons::CONFIG_INVALID;
            self.event(&on, p.is_error(), reason, &p.to_string()).await;
        }
    }
}
