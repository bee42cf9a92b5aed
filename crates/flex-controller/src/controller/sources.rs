//! A pending claim's data source, resolved for its provisioning Job: a clone's source claim
//! from the caches (bound to a volume of ours, its parameters from the volume's record),
//! or an admin's object of a listed kind, read from the API server.

use kube::api::{Api, DynamicObject};

use super::context::Context;
use flex_core::claim::{ClaimRequest, DataSource};
use flex_core::quantity::parse_bytes;
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
    let discovered = match kube::discovery::group(&ctx.client, group).await {
        Ok(g) => g,
        Err(e) => {
            return Ok(SourceData::Unusable(format!(
                "the API group {group} cannot be read: {e}"
            )));
        }
    };
    let Some((resource, _)) = discovered.recommended_kind(&ds.kind) else {
        return Ok(SourceData::Unusable(format!(
            "the API server serves no kind {} in group {group}",
            ds.kind
        )));
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
    let unusable = |why: String| Ok(SourceData::Unusable(why));
    let at = format!("{}/{}", claim.namespace, ds.name);
    let Some(source) = ctx.caches.claim(&claim.namespace, &ds.name) else {
        return unusable(format!("the source claim {at} does not exist"));
    };
    let bound = source.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let Some(volume) = source
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|_| bound)
    else {
        return unusable(format!("the source claim {at} is not bound yet"));
    };
    let Some(pv) = ctx.caches.volume(&volume) else {
        return unusable(format!(
            "the source claim's volume {volume} is not seen yet"
        ));
    };
    let bound_back = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.as_deref())
        == source.metadata.uid.as_deref();
    if !bound_back {
        return unusable(format!(
            "the source claim's volume {volume} is not bound back to it"
        ));
    }
    if !flex_core::volume::provisioned_by(&pv, &ctx.opts.provisioner_name) {
        return unusable(format!(
            "the source claim {at} is bound to {volume}, which this provisioner did not make; only its own volumes can be cloned"
        ));
    }
    let capacity = flex_core::volume::storage_capacity(&pv.spec.clone().unwrap_or_default());
    if parse_bytes(&capacity).is_ok_and(|c| c > claim.bytes) {
        return unusable(format!(
            "the clone requests {}, less than its source's {capacity}; request at least that",
            claim.requested
        ));
    }
    let record = match super::volumes::fetch_record(ctx, &pv).await? {
        Some(cm) => read_record(&cm, &pv).map_err(|e| e.to_string()),
        None => Err(format!("the source volume {volume} has no record")),
    };
    Ok(match record {
        Ok(r) => SourceData::Volume {
            pv: Box::new(pv.as_ref().clone()),
            parameters: r.parameters,
        },
        Err(why) => SourceData::Unusable(why),
    })
}
