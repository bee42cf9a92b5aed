//! A pending claim's data source, resolved for its provisioning Job: a clone's source claim
//! from the caches (bound to a volume of ours, its parameters from the volume's record),
//! or an admin's object of a listed kind, read from the API server.

use kube::api::{Api, DynamicObject};

use super::context::Context;
use flex_core::claim::{ClaimRequest, DataSource};
use flex_core::record::read_record;
use flex_core::source::{SourceData, Unreadable, unreadable};

/// What the claim's data source is now; `Unusable` says why it cannot be used (yet).
pub(super) async fn resolve(
    ctx: &Context,
    claim: &ClaimRequest,
    ds: &DataSource,
) -> crate::Result<SourceData> {
    if ds.is_claim() {
        return clone_source(ctx, claim, ds).await;
    }
    if ds.is_snapshot() {
        return snapshot_source(ctx, claim, ds).await;
    }
    let unreadable = |why| Ok(unreadable(ds, &claim.namespace, why));
    let Some(group) = ds.api_group.as_deref() else {
        return unreadable(Unreadable::CoreGroup);
    };
    let resource = match ctx.discovered.resource(&ctx.client, group, &ds.kind).await {
        Ok(Some(r)) => r,
        Ok(None) => return unreadable(Unreadable::KindNotServed),
        Err(e) => return unreadable(Unreadable::GroupUnreadable(e)),
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &claim.namespace, &resource);
    match api.get_opt(&ds.name).await {
        Ok(Some(object)) => Ok(SourceData::Object(
            serde_json::to_value(object).unwrap_or_default(),
        )),
        Ok(None) => unreadable(Unreadable::Missing),
        Err(kube::Error::Api(s)) if s.code == 403 => unreadable(Unreadable::Forbidden(s.message)),
        Err(e) => Err(crate::Error::read(format!("{} {}", ds.kind, ds.name))(e)),
    }
}

async fn clone_source(
    ctx: &Context,
    claim: &ClaimRequest,
    ds: &DataSource,
) -> crate::Result<SourceData> {
    let source = ctx.caches.claim(&claim.namespace, &ds.name);
    let volume = source
        .as_ref()
        .and_then(|s| s.spec.as_ref()?.volume_name.as_deref())
        .and_then(|name| ctx.caches.volume(name));
    let name = &ctx.opts.provisioner_name;
    let (source, volume) = (source.as_deref(), volume.as_deref());
    if let Some(why) = flex_core::source::clone_problem(claim, &ds.name, source, volume, name) {
        return Ok(SourceData::Unusable(why));
    }
    let Some(pv) = volume else {
        return Ok(SourceData::Unusable(
            "the source volume is not seen yet".into(),
        ));
    };
    let record = super::reads::record(ctx, pv)
        .await?
        .map(|cm| read_record(&cm, pv));
    Ok(flex_core::source::from_record(pv, record))
}

/// A restore: the VolumeSnapshot in the claim's namespace, its class and content, and the
/// record written when it was taken, read from the API server (restores are rare, and a
/// snapshot becomes ready moments before a restore names it).
async fn snapshot_source(
    ctx: &Context,
    claim: &ClaimRequest,
    ds: &DataSource,
) -> crate::Result<SourceData> {
    use flex_core::snapshot::{GROUP, VolumeSnapshot, VolumeSnapshotClass, VolumeSnapshotContent};
    match ctx.discovered.resource(&ctx.client, GROUP, &ds.kind).await {
        Ok(Some(_)) => {}
        Ok(None) => return Ok(unreadable(ds, &claim.namespace, Unreadable::KindNotServed)),
        Err(e) => {
            return Ok(unreadable(
                ds,
                &claim.namespace,
                Unreadable::GroupUnreadable(e),
            ));
        }
    }
    let read = |what: String| crate::Error::read(what);
    let snapshot = Api::<VolumeSnapshot>::namespaced(ctx.client.clone(), &claim.namespace)
        .get_opt(&ds.name)
        .await
        .map_err(read(format!(
            "VolumeSnapshot {}/{}",
            claim.namespace, ds.name
        )))?;
    let class_name = (snapshot.as_ref())
        .and_then(|s| s.spec.volume_snapshot_class_name.clone())
        .unwrap_or_default();
    let class = match class_name.as_str() {
        "" => None,
        name => Api::<VolumeSnapshotClass>::all(ctx.client.clone())
            .get_opt(name)
            .await
            .map_err(read(format!("VolumeSnapshotClass {name}")))?,
    };
    let bound = (snapshot.as_ref()).and_then(|s| {
        s.status
            .as_ref()?
            .bound_volume_snapshot_content_name
            .clone()
    });
    let content = match bound {
        Some(name) => Api::<VolumeSnapshotContent>::all(ctx.client.clone())
            .get_opt(&name)
            .await
            .map_err(read(format!("VolumeSnapshotContent {name}")))?,
        None => None,
    };
    let uid = snapshot.as_ref().and_then(|s| s.metadata.uid.clone());
    let record = match uid.filter(|u| !u.is_empty()) {
        Some(uid) => {
            let name = flex_core::snapshot::record::snapshot_record_name(&uid);
            super::reads::snapshot_record(ctx, &name).await?
        }
        None => None,
    };
    Ok(flex_core::source::restore_source(
        &flex_core::source::RestoreFrom {
            claim,
            name: &ds.name,
            snapshot: snapshot.as_ref(),
            class: class.as_ref(),
            content: content.as_ref(),
            record: record.as_ref(),
            provisioner_name: &ctx.opts.provisioner_name,
        },
    ))
}
