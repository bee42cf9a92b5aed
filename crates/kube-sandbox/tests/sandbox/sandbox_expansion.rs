//! Volume expansion and claim data sources through the real kube client, as Kubernetes
//! v1.36 answers them. The recorded real-cluster answers hold no expansion or data source
//! probe; the expected texts come from Kubernetes' sources: pkg/apis/core/validation
//! (ValidatePersistentVolumeClaimUpdate, ValidatePersistentVolumeClaimStatusUpdate, the
//! data source rules), pkg/api/persistentvolumeclaim (dropping and filling in data sources),
//! plugin/pkg/admission/storage/persistentvolume/resize (PersistentVolumeClaimResize) and
//! pkg/controller/volume/expand (the expand controller's events and annotation).

use crate::common;

use common::sandbox::{eventually, invalid, start, status_of};
use k8s_openapi::api::core::v1::{Event, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

const RESIZE_REFUSED: &str = "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize";

/// Asserts the resize plugin's 403 Forbidden for claim `name`, saying `why`.
fn forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>, name: &str, why: &str) {
    let s = status_of(r);
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");
    assert_eq!(
        s.message,
        format!("persistentvolumeclaims \"{name}\" is forbidden: {why}")
    );
    let d = s.details.unwrap();
    assert_eq!(
        (d.name.as_str(), d.kind.as_str()),
        (name, "persistentvolumeclaims")
    );
}

fn causes(s: &Status) -> Vec<(String, String)> {
    s.details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.field.clone(), c.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn claims(c: &kube::Client) -> Api<PersistentVolumeClaim> {
    Api::namespaced(c.clone(), "default")
}

fn grow(size: &str) -> Value {
    json!({"spec": {"resources": {"requests": {"storage": size}}}})
}

async fn storage_class(c: &kube::Client, name: &str, expandable: Option<bool>) {
    let mut sc = json!({"metadata": {"name": name}, "provisioner": "example.com/hostpath"});
    if let Some(e) = expandable {
        sc["allowVolumeExpansion"] = json!(e);
    }
    Api::<StorageClass>::all(c.clone())
        .create(&PostParams::default(), &serde_json::from_value(sc).unwrap())
        .await
        .unwrap();
}

/// A 1Gi claim of `class` bound to a pre-bound 2Gi volume with `source` (e.g. hostPath);
/// its status capacity is 2Gi.
async fn bound_claim(
    c: &kube::Client,
    name: &str,
    class: &str,
    source: Value,
) -> PersistentVolumeClaim {
    let mut spec = json!({"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
        "storageClassName": class, "claimRef": {"namespace": "default", "name": name}});
    for (k, v) in source.as_object().unwrap() {
        spec[k] = v.clone();
    }
    let pv = json!({"metadata": {"name": format!("pv-{name}")}, "spec": spec});
    Api::<PersistentVolume>::all(c.clone())
        .create(&PostParams::default(), &serde_json::from_value(pv).unwrap())
        .await
        .unwrap();
    let claim = json!({"metadata": {"name": name}, "spec": {"storageClassName": class,
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let api = claims(c);
    api.create(
        &PostParams::default(),
        &serde_json::from_value(claim).unwrap(),
    )
    .await
    .unwrap();
    eventually(20, "the claim to bind", || async {
        let c = api.get(name).await.ok()?;
        let status = c.status.as_ref()?;
        (status.phase.as_deref() == Some("Bound") && status.capacity.is_some()).then_some(c)
    })
    .await
}

fn host_path(name: &str) -> Value {
    json!({"hostPath": {"path": format!("/data/{name}")}})
}

/// (type, reason, message, source component) of the events about claim `name`.
async fn events_of(c: &kube::Client, name: &str) -> Vec<(String, String, String, String)> {
    let events: Api<Event> = Api::namespaced(c.clone(), "default");
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
                e.source.and_then(|s| s.component).unwrap_or_default(),
            )
        })
        .collect()
}

async fn expansion_event(c: &kube::Client, name: &str) -> (String, String, String, String) {
    eventually(20, "the expand controller's event", || async {
        events_of(c, name)
            .await
            .into_iter()
            .find(|e| e.1 == "ExternalExpanding")
    })
    .await
}

fn annotation(claim: &PersistentVolumeClaim, key: &str) -> Option<String> {
    claim.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test]
async fn a_claim_shrinks_only_while_it_stays_above_its_capacity() {
    let sb = start().await;
    let c = sb.client().unwrap();
    storage_class(&c, "grows", Some(true)).await;
    bound_claim(&c, "c-shrink", "grows", host_path("c-shrink")).await;
    let api = claims(&c);
    let p = PatchParams::default();
    let message = "PersistentVolumeClaim \"c-shrink\" is invalid: spec.resources.requests.storage: Forbidden: field can not be less than status.capacity";
    let s = invalid(
        api.patch("c-shrink", &p, &Patch::Merge(&grow("500Mi")))
            .await,
        message,
    );
    assert_eq!(
        causes(&s),
        [(
            "spec.resources.requests.storage".into(),
            "Forbidden: field can not be less than status.capacity".into()
        )]
    );
    // RecoverVolumeExpansionFailure (GA): after growing, the request may come back down as
    // long as it stays above what the volume has (2Gi).
    api.patch("c-shrink", &p, &Patch::Merge(&grow("4Gi")))
        .await
        .unwrap();
    api.patch("c-shrink", &p, &Patch::Merge(&grow("3Gi")))
        .await
        .unwrap();
    for size in ["2Gi", "2048Mi", "1Gi"] {
        invalid(
            api.patch("c-shrink", &p, &Patch::Merge(&grow(size))).await,
            message,
        );
    }
    // A decrease is no growth: the resize plugin has nothing to say about it.
    let now = api.get("c-shrink").await.unwrap();
    assert_eq!(
        now.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
        "3Gi"
    );
}

#[tokio::test]
async fn growth_needs_a_bound_claim_of_an_expandable_class() {
    let sb = start().await;
    let c = sb.client().unwrap();
    storage_class(&c, "fixed", None).await;
    storage_class(&c, "fixed-explicitly", Some(false)).await;
    let api = claims(&c);
    let p = PatchParams::default();
    for (name, class) in [
        ("c-fixed", "fixed"),
        ("c-false", "fixed-explicitly"),
        ("c-no-class-object", "nowhere"),
    ] {
        bound_claim(&c, name, class, host_path(name)).await;
        forbidden(
            api.patch(name, &p, &Patch::Merge(&grow("3Gi"))).await,
            name,
            RESIZE_REFUSED,
        );
        // A full replace is refused the same way.
        let mut replaced = api.get(name).await.unwrap();
        replaced.spec.as_mut().unwrap().resources =
            Some(serde_json::from_value(json!({"requests": {"storage": "3Gi"}})).unwrap());
        forbidden(
            api.replace(name, &PostParams::default(), &replaced).await,
            name,
            RESIZE_REFUSED,
        );
    }
    // Field validation comes first: an unbound claim's request is immutable (422), so the
    // plugin's "Only bound persistent volume claims can be expanded" is never reached.
    let pending = json!({"metadata": {"name": "c-pending"}, "spec": {"storageClassName": "fixed",
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    api.create(
        &PostParams::default(),
        &serde_json::from_value(pending).unwrap(),
    )
    .await
    .unwrap();
    invalid(
        api.patch("c-pending", &p, &Patch::Merge(&grow("3Gi")))
            .await,
        "PersistentVolumeClaim \"c-pending\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
    );
}

#[tokio::test]
async fn growth_is_handed_to_an_external_resizer() {
    let sb = start().await;
    let c = sb.client().unwrap();
    storage_class(&c, "grows", Some(true)).await;
    let api = claims(&c);
    let p = PatchParams::default();

    // A volume without CSI (hostPath) and a CSI volume: no plugin of the controller
    // expands either, so it says so with a Warning and leaves the claim to the resizer.
    let csi = json!({"csi": {"driver": "csi.example.com", "volumeHandle": "vol-1"}});
    for (name, source) in [("c-host", host_path("c-host")), ("c-csi", csi)] {
        bound_claim(&c, name, "grows", source).await;
        assert!(
            events_of(&c, name)
                .await
                .iter()
                .all(|e| e.1 != "ExternalExpanding")
        );
        let grown = api
            .patch(name, &p, &Patch::Merge(&grow("3Gi")))
            .await
            .unwrap();
        assert_eq!(
            grown.spec.unwrap().resources.unwrap().requests.unwrap()["storage"].0,
            "3Gi"
        );
        let event = expansion_event(&c, name).await;
        assert_eq!(
            event,
            (
                "Warning".into(),
                "ExternalExpanding".into(),
                "waiting for an external controller to expand this PVC".into(),
                "volume_expand".into()
            )
        );
        let now = api.get(name).await.unwrap();
        assert_eq!(
            annotation(&now, "volume.kubernetes.io/storage-resizer"),
            None
        );
    }

    // The resizer grows the volume and reports it in the claim's status: nothing more is
    // said, and the event is not repeated.
    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    let bigger = json!({"spec": {"capacity": {"storage": "3Gi"}}});
    pvs.patch("pv-c-host", &p, &Patch::Merge(&bigger))
        .await
        .unwrap();
    let done = json!({"status": {"capacity": {"storage": "3Gi"},
        "allocatedResources": {"storage": "3Gi"}}});
    api.patch_status("c-host", &p, &Patch::Merge(&done))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let repeats: Vec<_> = events_of(&c, "c-host")
        .await
        .into_iter()
        .filter(|e| e.1 == "ExternalExpanding")
        .collect();
    assert_eq!(repeats.len(), 1, "{repeats:?}");
}

#[tokio::test]
async fn migrated_in_tree_volumes_name_their_csi_resizer() {
    let sb = start().await;
    let c = sb.client().unwrap();
    storage_class(&c, "grows", Some(true)).await;
    let api = claims(&c);
    let gce = json!({"gcePersistentDisk": {"pdName": "disk-1"}});
    bound_claim(&c, "c-gce", "grows", gce).await;
    api.patch(
        "c-gce",
        &PatchParams::default(),
        &Patch::Merge(&grow("3Gi")),
    )
    .await
    .unwrap();
    let event = expansion_event(&c, "c-gce").await;
    assert_eq!(
        event,
        (
            "Normal".into(),
            "ExternalExpanding".into(),
            "CSI migration enabled for kubernetes.io/gce-pd; waiting for external resizer to expand the pvc".into(),
            "volume_expand".into()
        )
    );
    let annotated = eventually(20, "the resizer annotation", || async {
        let now = api.get("c-gce").await.ok()?;
        annotation(&now, "volume.kubernetes.io/storage-resizer")
    })
    .await;
    assert_eq!(annotated, "pd.csi.storage.gke.io");
}

#[tokio::test]
async fn expansion_status_is_written_through_the_status_subresource() {
    let sb = start().await;
    let c = sb.client().unwrap();
    storage_class(&c, "grows", Some(true)).await;
    bound_claim(&c, "c-status", "grows", host_path("c-status")).await;
    let api = claims(&c);
    let p = PatchParams::default();
    let progress = json!({"status": {
        "allocatedResources": {"storage": "3Gi"},
        "allocatedResourceStatuses": {"storage": "ControllerResizeInProgress"},
        "conditions": [{"type": "Resizing", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    let written = api
        .patch_status("c-status", &p, &Patch::Merge(&progress))
        .await
        .unwrap();
    let status = written.status.unwrap();
    assert_eq!(status.allocated_resources.unwrap()["storage"].0, "3Gi");
    assert_eq!(
        status.allocated_resource_statuses.unwrap()["storage"],
        "ControllerResizeInProgress"
    );
    assert_eq!(status.conditions.unwrap()[0].type_, "Resizing");

    // Every value a resizer or kubelet writes is accepted, and so is any condition type:
    // the real server checks none.
    for (value, condition) in [
        ("ControllerResizeInfeasible", "ControllerResizeError"),
        ("NodeResizePending", "FileSystemResizePending"),
        ("NodeResizeInProgress", "Resizing"),
        ("NodeResizeInfeasible", "NodeResizeError"),
    ] {
        let patch = json!({"status": {"allocatedResourceStatuses": {"storage": value},
            "conditions": [{"type": condition, "status": "True"}]}});
        api.patch_status("c-status", &p, &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    let bad_status = json!({"status": {"allocatedResourceStatuses": {"storage": "Resizing"}}});
    let s = invalid(
        api.patch_status("c-status", &p, &Patch::Merge(&bad_status))
            .await,
        "PersistentVolumeClaim \"c-status\" is invalid: status.allocatedResourceStatus: Unsupported value: \"storage\": supported values: \"ControllerResizeInProgress\", \"ControllerResizeInfeasible\", \"NodeResizeInProgress\", \"NodeResizeInfeasible\", \"NodeResizePending\"",
    );
    assert_eq!(
        s.details.unwrap().causes[0].reason,
        "FieldValueNotSupported"
    );
    let bad_key = json!({"status": {"allocatedResources": {"cpu": "1"}}});
    invalid(
        api.patch_status("c-status", &p, &Patch::Merge(&bad_key))
            .await,
        "PersistentVolumeClaim \"c-status\" is invalid: status.allocatedResources: Unsupported value: \"cpu\": supported values: \"storage\"",
    );
    let negative = json!({"status": {"allocatedResources": {"storage": "-1Gi"}}});
    invalid(
        api.patch_status("c-status", &p, &Patch::Merge(&negative))
            .await,
        "PersistentVolumeClaim \"c-status\" is invalid: status.allocatedResources[storage]: Invalid value: -1073741824: must be a valid resource quantity",
    );

    // Status through the main resource is ignored, as always.
    let ignored = json!({"status": {"allocatedResourceStatuses": {"storage": "Resizing"}}});
    let after = api
        .patch("c-status", &p, &Patch::Merge(&ignored))
        .await
        .unwrap();
    assert_eq!(
        after.status.unwrap().allocated_resource_statuses.unwrap()["storage"],
        "NodeResizeInfeasible"
    );
}

fn claim_with(name: &str, sources: Value) -> PersistentVolumeClaim {
    let mut spec = json!({"storageClassName": "nowhere", "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}}});
    for (k, v) in sources.as_object().unwrap() {
        spec[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

/// (apiGroup, kind, name) of the claim's dataSource and dataSourceRef.
type Refs = (
    Option<(Option<String>, String, String)>,
    Option<(Option<String>, String, String)>,
);

fn refs(claim: &PersistentVolumeClaim) -> Refs {
    let spec = claim.spec.as_ref().unwrap();
    (
        spec.data_source
            .as_ref()
            .map(|s| (s.api_group.clone(), s.kind.clone(), s.name.clone())),
        spec.data_source_ref
            .as_ref()
            .map(|r| (r.api_group.clone(), r.kind.clone(), r.name.clone())),
    )
}

#[tokio::test]
async fn data_sources_are_filled_in_from_one_another() {
    let sb = start().await;
    let api = claims(&sb.client().unwrap());
    let pp = PostParams::default();
    let clone =
        |g: Option<&str>, k: &str, n: &str| Some((g.map(str::to_owned), k.into(), n.into()));

    // A clone given the old way gets the same dataSourceRef.
    let created = api
        .create(
            &pp,
            &claim_with(
                "c-clone",
                json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}),
            ),
        )
        .await
        .unwrap();
    let want = clone(None, "PersistentVolumeClaim", "src");
    assert_eq!(refs(&created), (want.clone(), want));
    // So does a snapshot.
    let snap = json!({"dataSource": {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "s1"}});
    let created = api.create(&pp, &claim_with("c-snap", snap)).await.unwrap();
    let want = clone(Some("snapshot.storage.k8s.io"), "VolumeSnapshot", "s1");
    assert_eq!(refs(&created), (want.clone(), want));
    // A populator named the new way is copied back into dataSource.
    let populator =
        json!({"dataSourceRef": {"apiGroup": "example.com", "kind": "Thing", "name": "t1"}});
    let created = api
        .create(&pp, &claim_with("c-populator", populator))
        .await
        .unwrap();
    let want = clone(Some("example.com"), "Thing", "t1");
    assert_eq!(refs(&created), (want.clone(), want));
    // Both given and equal: kept.
    let both = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"},
                      "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "src"}});
    api.create(&pp, &claim_with("c-both", both)).await.unwrap();

    // Anything but a claim or a snapshot in dataSource alone is dropped without a word, as
    // before dataSourceRef existed.
    for (name, source) in [
        ("c-secret", json!({"kind": "Secret", "name": "s"})),
        (
            "c-thing",
            json!({"apiGroup": "example.com", "kind": "Thing", "name": "t"}),
        ),
        (
            "c-wrong-group",
            json!({"apiGroup": "example.com", "kind": "PersistentVolumeClaim", "name": "x"}),
        ),
    ] {
        let created = api
            .create(&pp, &claim_with(name, json!({ "dataSource": source })))
            .await
            .unwrap();
        assert_eq!(refs(&created), (None, None), "{name}");
    }
    // A namespace in dataSourceRef needs CrossNamespaceVolumeDataSource (alpha, off): the
    // reference is dropped.
    let other_ns = json!({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "src", "namespace": "other"}});
    let created = api
        .create(&pp, &claim_with("c-other-ns", other_ns))
        .await
        .unwrap();
    assert_eq!(refs(&created), (None, None));
    assert!(created.spec.unwrap().data_source_ref.is_none());
}

#[tokio::test]
async fn data_source_rules() {
    let sb = start().await;
    let api = claims(&sb.client().unwrap());
    let pp = PostParams::default();

    let mismatch = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "a"},
                          "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "b"}});
    let s = status_of(api.create(&pp, &claim_with("c-mismatch", mismatch)).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    let c = causes(&s);
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].0, "spec");
    // The real server shows the field path as a Go struct (with a pointer that varies).
    assert!(
        c[0].1.starts_with(
            "Invalid value: field.Path{name:\"dataSource\", index:\"\", parent:(*field.Path)(0x"
        ),
        "{c:?}"
    );
    assert!(c[0].1.ends_with(")}: must match dataSourceRef"), "{c:?}");
    // A group on one side only is a mismatch too.
    let half = json!({"dataSource": {"apiGroup": "", "kind": "PersistentVolumeClaim", "name": "a"},
                      "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "a"}});
    let s = status_of(api.create(&pp, &claim_with("c-half", half)).await);
    assert!(causes(&s)[0].1.ends_with("must match dataSourceRef"));

    // dataSourceRef is copied into dataSource before validation, so both are reported.
    let secret = json!({"dataSourceRef": {"kind": "Secret", "name": "s"}});
    invalid(
        api.create(&pp, &claim_with("c-secret-ref", secret)).await,
        "PersistentVolumeClaim \"c-secret-ref\" is invalid: [spec.dataSource: Invalid value: \"Secret\": must be 'PersistentVolumeClaim' when referencing the default apiGroup, spec.dataSourceRef: Invalid value: \"Secret\": must be 'PersistentVolumeClaim' when referencing the default apiGroup]",
    );
    let bad_group =
        json!({"dataSourceRef": {"apiGroup": "Example.com", "kind": "Thing", "name": "t"}});
    let s = status_of(api.create(&pp, &claim_with("c-bad-group", bad_group)).await);
    assert_eq!(
        causes(&s).iter().map(|c| c.0.as_str()).collect::<Vec<_>>(),
        ["spec.dataSource.apiGroup", "spec.dataSourceRef.apiGroup"]
    );
    assert!(
        causes(&s)[0]
            .1
            .starts_with("Invalid value: \"Example.com\": a lowercase RFC 1123 subdomain")
    );
    let unnamed = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": ""}});
    invalid(
        api.create(&pp, &claim_with("c-unnamed", unnamed)).await,
        "PersistentVolumeClaim \"c-unnamed\" is invalid: [spec.dataSource.name: Required value, spec.dataSourceRef.name: Required value]",
    );
}

#[tokio::test]
async fn data_sources_are_immutable() {
    let sb = start().await;
    let api = claims(&sb.client().unwrap());
    let p = PatchParams::default();
    let source = json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}});
    api.create(
        &PostParams::default(),
        &claim_with("c-fixed-source", source),
    )
    .await
    .unwrap();
    let immutable = "PersistentVolumeClaim \"c-fixed-source\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";
    let other = json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "other"},
                                "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "other"}}});
    invalid(
        api.patch("c-fixed-source", &p, &Patch::Merge(&other)).await,
        immutable,
    );
    let removed = json!({"spec": {"dataSource": null, "dataSourceRef": null}});
    invalid(
        api.patch("c-fixed-source", &p, &Patch::Merge(&removed))
            .await,
        immutable,
    );
    // A client that knows only dataSource (and so drops dataSourceRef) changes nothing: the
    // server fills the reference in again.
    let old_client = json!({"spec": {"dataSourceRef": null}});
    let kept = api
        .patch("c-fixed-source", &p, &Patch::Merge(&old_client))
        .await
        .unwrap();
    assert_eq!(kept.spec.unwrap().data_source_ref.unwrap().name, "src");
    // A claim made without a source cannot get one.
    api.create(&PostParams::default(), &claim_with("c-empty", json!({})))
        .await
        .unwrap();
    let added = json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}});
    invalid(
        api.patch("c-empty", &p, &Patch::Merge(&added)).await,
        "PersistentVolumeClaim \"c-empty\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
    );
}
