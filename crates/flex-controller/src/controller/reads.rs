//! What a plan asks the API server for (`flex_core::plan::Ask`), and the objects the caches
//! keep cut short, read whole: every read a decision rests on, in one place.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::caches::{claim_ref_of, trim_meta};
use super::context::Context;
use super::slim::Slim;
use flex_core::names::{LABEL_ACTION, LABEL_CLAIM_UID, LABEL_RECORD, LABEL_VOLUME};
use flex_core::plan::orphan::Confirmed;

/// The claim `namespace/name`.
pub(super) async fn claim(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> crate::Result<Option<PersistentVolumeClaim>> {
    Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(crate::Error::read(format!("claim {namespace}/{name}")))
}

/// The PV `name`.
pub(super) async fn volume(ctx: &Context, name: &str) -> crate::Result<Option<PersistentVolume>> {
    ctx.apply
        .volumes()
        .get_opt(name)
        .await
        .map_err(crate::Error::read(format!("PersistentVolume {name}")))
}

/// The node `name`.
pub(super) async fn node(ctx: &Context, name: &str) -> crate::Result<Option<Node>> {
    Api::<Node>::all(ctx.client.clone())
        .get_opt(name)
        .await
        .map_err(crate::Error::read(format!("Node {name}")))
}

/// A claim the cache keeps cut short (`caches::trim_claim`), read whole (`None`: it is gone,
/// or another claim has its name now).
pub(super) async fn claim_whole(
    ctx: &Context,
    cut: &PersistentVolumeClaim,
) -> crate::Result<Option<Arc<PersistentVolumeClaim>>> {
    let whole = claim(ctx, &cut.namespace().unwrap_or_default(), &cut.name_any()).await?;
    Ok(same_object(whole, cut))
}

/// A PV the cache keeps cut short (`caches::trim_volume`), read whole (`None`: it is gone,
/// or another has its name now).
pub(super) async fn volume_whole(
    ctx: &Context,
    cut: &PersistentVolume,
) -> crate::Result<Option<Arc<PersistentVolume>>> {
    Ok(same_object(volume(ctx, &cut.name_any()).await?, cut))
}

fn same_object<K: Resource>(whole: Option<K>, cut: &K) -> Option<Arc<K>> {
    whole
        .filter(|w| w.meta().uid == cut.meta().uid)
        .map(|mut w| {
            trim_meta(&mut w);
            Arc::new(w)
        })
}

/// The PV's deprovision record: in the config namespaces alone, which only the controller
/// and kube admins can write. From the cache when it holds it (a record is written before
/// its PV exists, and never changed); asked of the API server when it does not, since a
/// record written a moment ago may not have reached the cache yet.
pub(super) async fn record(
    ctx: &Context,
    pv: &PersistentVolume,
) -> crate::Result<Option<ConfigMap>> {
    let name = flex_core::record::record_name(pv.metadata.uid.as_deref().unwrap_or_default());
    let cached = (ctx.opts.config_namespaces.iter().zip(&ctx.caches.records))
        .find_map(|(ns, s)| s.get(&ObjectRef::new(&name).within(ns))?.full());
    if cached.is_some() {
        return Ok(cached);
    }
    for ns in &ctx.opts.config_namespaces {
        if let Some(cm) = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
            .get_opt(&name)
            .await
            .map_err(crate::Error::read(format!("record {ns}/{name}")))?
        {
            return Ok(Some(cm));
        }
    }
    Ok(None)
}

/// A snapshot's record, or its attempts' (`flex-snapshot-<uid>`,
/// `flex-snapshot-attempt-<uid>`), from the API server: they decide what a delete removes
/// and what a restore copies.
pub(super) async fn snapshot_record(ctx: &Context, name: &str) -> crate::Result<Option<ConfigMap>> {
    for ns in &ctx.opts.config_namespaces {
        let found = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
            .get_opt(name)
            .await
            .map_err(crate::Error::read(format!("snapshot record {ns}/{name}")))?;
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// The pods of the claim's Jobs in `namespace`, as the pod cache keeps them.
pub(super) async fn claims_pods(
    ctx: &Context,
    namespace: &str,
    uid: &str,
) -> crate::Result<Vec<Pod>> {
    if namespace.is_empty() {
        return Ok(Vec::new());
    }
    let selector = format!("{LABEL_CLAIM_UID}={uid}");
    let list = Api::<Slim<Pod>>::namespaced(ctx.client.clone(), namespace)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(crate::Error::read(format!(
            "the pods of claim uid {uid} in {namespace}"
        )))?;
    let mut pods: Vec<Pod> = list.items.into_iter().map(|s| s.0).collect();
    pods.iter_mut().for_each(trim_meta);
    Ok(pods)
}

/// Whether a claim holds `pv` against deprovisioning (`plan::volume::claim_holds`): the
/// claim at the claimRef (re-created under its name), the claim the record says the volume
/// was verified for, and those the cache shows naming it.
pub(super) async fn held_by_claim(
    ctx: &Context,
    pv: &PersistentVolume,
    at: Option<&(String, String)>,
    record: Option<&ConfigMap>,
    cached: &[(String, String)],
) -> crate::Result<bool> {
    let mut candidates: Vec<(String, String)> = cached.to_vec();
    candidates.extend(record.and_then(flex_core::record::record_claim));
    candidates.extend(at.cloned());
    candidates.sort();
    candidates.dedup();
    for (ns, n) in candidates {
        let found = claim(ctx, &ns, &n).await?;
        if found.is_some_and(|c| flex_core::plan::volume::claim_holds(pv, &c)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// What still names a provisioning Job's storage: its claim, a PV, a deprovision Job and a
/// record under its volume name.
pub(super) async fn orphan_traces(
    ctx: &Context,
    job: &Job,
    claim_uid: &str,
    volume_name: &str,
) -> crate::Result<Confirmed> {
    let what = || format!("the claim and volume of Job {}", job.name_any());
    let at = claim_ref_of(job.meta().annotations.as_ref());
    let leaving = match at {
        Some(r) => claim(ctx, r.namespace.as_deref().unwrap_or_default(), &r.name).await?,
        None => None,
    };
    let pv = volume(ctx, volume_name).await?;
    let ns = job.namespace().unwrap_or_default();
    let by = |selector: String| ListParams::default().labels(&selector);
    let deprovisions = Api::<Job>::namespaced(ctx.client.clone(), &ns)
        .list_metadata(&by(format!(
            "{LABEL_ACTION}=deprovision,{LABEL_VOLUME}={volume_name}"
        )))
        .await
        .map_err(crate::Error::read(what()))?;
    let records = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
        .list_metadata(&by(format!(
            "{LABEL_RECORD}=true,{LABEL_VOLUME}={volume_name}"
        )))
        .await
        .map_err(crate::Error::read(what()))?;
    Ok(Confirmed {
        claim_leaving: leaving.is_none_or(|c| {
            c.uid().as_deref() != Some(claim_uid) || c.metadata.deletion_timestamp.is_some()
        }),
        pv_exists: pv.is_some(),
        deprovisioned: !deprovisions.items.is_empty(),
        recorded: !records.items.is_empty(),
    })
}
