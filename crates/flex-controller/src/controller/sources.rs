//! A pending claim's data source, resolved for its provisioning Job: a clone's source claim
//! from the caches (bound to a volume of ours, its parameters from the volume's record),
//! or an admin's object of a listed kind, read from the API server.

use kube::api::{Api, DynamicObject};

use super::context::Context;
use flex_core::claim::{ClaimRequest, DataSource};
use flex_core::record::read_record;
use flex_core::source::SourceData;

/// What the claim's data source is now; `Unusable` says why it cannot be used (yet).
pub(super) async fn resolve(
    ctx: &Context,
    claim: &ClaimRequest,
    ds: &DataSource,
) -> crate::Result<SourceData> {
    if ds.is_claim() {
        return clone_source(ctx, claim, ds).await;
    }
    let Some(group) = ds.api_group.as_deref() else {
        return Ok(SourceData::Unusable(format!(
            "only PersistentVolumeClaim can be named in the core group, not {}",
            ds.kind
        )));
    };
    let resource = match ctx.discovered.resource(&ctx.client, group, &ds.kind).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return Ok(SourceData::Unusable(format!(
                "the API server serves no kind {} in group {group}",
                ds.kind
            )));
        }
        Err(e) => {
            return Ok(SourceData::Unusable(format!(
                "the API group {group} cannot be read: {e}"
            )));
        }
    };
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &claim.namespace, &resource);
    Ok(match api.get_opt(&ds.name).await {
        Ok(Some(object)) => SourceData::Object(serde_json::to_value(object).unwrap_or_default()),
        Ok(None) => SourceData::Unusable(format!(
            "{} {}/{} does not exist",
            ds.kind, claim.namespace, ds.name
        )),
        // The admin grants the controller `get` on the kinds a class lists.
        Err(kube::Error::Api(s)) if s.code == 403 => SourceData::Unusable(format!(
            "the provisioner may not read it ({}); an admin grants it get on {}",
            s.message,
            ds.kind_key()
        )),
        Err(e) => return Err(crate::Error::read(format!("{} {}", ds.kind, ds.name))(e)),
    })
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
    let record = super::volumes::fetch_record(ctx, pv)
        .await?
        .map(|cm| read_record(&cm, pv));
    Ok(flex_core::source::from_record(pv, record))
}
