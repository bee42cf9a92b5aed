//! PersistentVolume and PersistentVolumeClaim validation through the real kube client: the
//! same 422 Invalid answers, field paths and messages kube-apiserver (v1.36) gives.
//!
//! The recorded real-cluster answers (../shared/conformance/real-k8s-1.36.2.json) hold no
//! PV or PVC validation error; where they hold something related (a valid PV's create, a
//! status write), the recorded value is quoted below. The expected error texts come from
//! Kubernetes' pkg/apis/core/validation and pkg/volume/validation, rendered the way
//! apimachinery's field errors and `NewInvalid` render them.

use crate::common;

use common::sandbox::{api_error, eventually, invalid, start, status_of};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::{Value, json};

fn pv(name: &str, spec: Value) -> PersistentVolume {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn claim(name: &str, spec: Value) -> PersistentVolumeClaim {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn host_path_spec(path: &str) -> Value {
    json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
           "hostPath": {"path": path}})
}

/// `(field, message)` of each cause, in order.
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

/// A claim bound to a pre-bound 2Gi volume; its request is 1Gi, its status capacity 2Gi.
async fn bound_claim(c: &kube::Client, name: &str) -> PersistentVolumeClaim {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    pvs.create(
        &PostParams::default(),
        &pv(
            &format!("pv-{name}"),
            json!({"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"],
                   "storageClassName": "manual", "hostPath": {"path": format!("/data/{name}")},
                   "claimRef": {"namespace": "default", "name": name}}),
        ),
    )
    .await
    .unwrap();
    claims
        .create(
            &PostParams::default(),
            &claim(
                name,
                json!({"storageClassName": "manual", "accessModes": ["ReadWriteOnce"],
                       "resources": {"requests": {"storage": "1Gi"}}}),
            ),
        )
        .await
        .unwrap();
    eventually(20, "the claim to bind", || async {
        let c = claims.get(name).await.ok()?;
        let status = c.status.as_ref()?;
        (status.phase.as_deref() == Some("Bound") && status.capacity.is_some()).then_some(c)
    })
    .await
}

#[tokio::test]
async fn host_path_volume_with_mount_options() {
    let sb = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    // Kubernetes checks mount options where volume plugins are asked about them: the
    // mount-options annotation, refused for every type without mount support (hostPath
    // among them).
    let mut annotated = pv("pv-mount-ann", host_path_spec("/data/a"));
    annotated.metadata.annotations = Some(
        [(
            "volume.beta.kubernetes.io/mount-options".to_owned(),
            "ro,noatime".to_owned(),
        )]
        .into(),
    );
    let s = invalid(
        pvs.create(&PostParams::default(), &annotated).await,
        "PersistentVolume \"pv-mount-ann\" is invalid: metadata.annotations.volume.beta.kubernetes.io/mount-options: Forbidden: may not specify mount options for this volume type",
    );
    let d = s.details.as_ref().unwrap();
    assert_eq!(
        (d.name.as_str(), d.kind.as_str()),
        ("pv-mount-ann", "PersistentVolume")
    );
    assert_eq!(d.causes[0].reason, "FieldValueForbidden");
    // The same annotation is fine on a type that mounts with options.
    let mut nfs = pv(
        "pv-mount-nfs",
        json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"],
               "nfs": {"server": "10.0.0.1", "path": "/exports"}}),
    );
    nfs.metadata.annotations = annotated.metadata.annotations.clone();
    pvs.create(&PostParams::default(), &nfs).await.unwrap();
    // spec.mountOptions is not validated by kube-apiserver for any volume type (they are
    // handed to the mount as they are), so a hostPath volume with them is accepted there
    // and here.
    let mut spec = host_path_spec("/data/b");
    spec["mountOptions"] = json!(["ro"]);
    pvs.create(&PostParams::default(), &pv("pv-mount-spec", spec))
        .await
        .unwrap();
    // Adding the annotation later is refused as well.
    let patch =
        json!({"metadata": {"annotations": {"volume.beta.kubernetes.io/mount-options": "ro"}}});
    invalid(
        pvs.patch(
            "pv-mount-spec",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await,
        "PersistentVolume \"pv-mount-spec\" is invalid: metadata.annotations.volume.beta.kubernetes.io/mount-options: Forbidden: may not specify mount options for this volume type",
    );
}

#[tokio::test]
async fn volume_without_capacity() {
    let sb = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let spec = json!({"accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}});
    // Without a storage key the capacity is also an unsupported map; Go prints the nil map.
    let s = invalid(
        pvs.create(&PostParams::default(), &pv("pv-nocap", spec))
            .await,
        "PersistentVolume \"pv-nocap\" is invalid: [spec.capacity: Required value, spec.capacity: Unsupported value: core.ResourceList(nil): supported values: \"storage\"]",
    );
    assert_eq!(
        causes(&s),
        [
            ("spec.capacity".into(), "Required value".into()),
            (
                "spec.capacity".into(),
                "Unsupported value: core.ResourceList(nil): supported values: \"storage\"".into()
            ),
        ]
    );
    assert_eq!(
        s.details.as_ref().unwrap().causes[1].reason,
        "FieldValueNotSupported"
    );
    // An empty map prints as such.
    let spec =
        json!({"capacity": {}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}});
    invalid(
        pvs.create(&PostParams::default(), &pv("pv-emptycap", spec))
            .await,
        "PersistentVolume \"pv-emptycap\" is invalid: [spec.capacity: Required value, spec.capacity: Unsupported value: core.ResourceList{}: supported values: \"storage\"]",
    );
    // A storage capacity must be more than zero.
    let mut spec = host_path_spec("/data");
    spec["capacity"]["storage"] = json!("0");
    invalid(
        pvs.create(&PostParams::default(), &pv("pv-zero", spec))
            .await,
        "PersistentVolume \"pv-zero\" is invalid: spec.capacity[storage]: Invalid value: \"0\": must be greater than zero",
    );
    // One the decoder cannot read fails the request before validation, with 400.
    let mut spec = host_path_spec("/data");
    spec["capacity"]["storage"] = json!("1GB");
    let s = status_of(
        pvs.create(&PostParams::default(), &pv("pv-bad", spec))
            .await,
    );
    assert_eq!((s.code, s.reason.as_str()), (400, "BadRequest"));
    assert_eq!(
        s.message,
        "PersistentVolume in version \"v1\" cannot be handled as a PersistentVolume: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    );
}

#[tokio::test]
async fn volume_access_modes() {
    let sb = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let mut spec = host_path_spec("/data");
    spec["accessModes"] = json!([]);
    invalid(
        pvs.create(&PostParams::default(), &pv("pv-nomodes", spec))
            .await,
        "PersistentVolume \"pv-nomodes\" is invalid: spec.accessModes: Required value",
    );
    let mut spec = host_path_spec("/data");
    spec["accessModes"] = json!(["ReadWriteSometimes"]);
    invalid(
        pvs.create(&PostParams::default(), &pv("pv-badmode", spec))
            .await,
        "PersistentVolume \"pv-badmode\" is invalid: spec.accessModes: Unsupported value: \"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"",
    );
}

#[tokio::test]
async fn volume_with_two_sources() {
    let sb = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let mut spec = host_path_spec("/data");
    spec["nfs"] = json!({"server": "10.0.0.1", "path": "/exports"});
    // The first source in the API's own order counts; each later one is refused.
    let s = invalid(
        pvs.create(&PostParams::default(), &pv("pv-two", spec))
            .await,
        "PersistentVolume \"pv-two\" is invalid: spec.nfs: Forbidden: may not specify more than 1 volume type",
    );
    assert_eq!(
        s.details.as_ref().unwrap().causes[0].reason,
        "FieldValueForbidden"
    );
    let mut spec = host_path_spec("/data");
    spec["local"] = json!({"path": "/mnt/disk"});
    spec["csi"] = json!({"driver": "csi.example.com", "volumeHandle": "v1"});
    invalid(
        pvs.create(&PostParams::default(), &pv("pv-three", spec))
            .await,
        "PersistentVolume \"pv-three\" is invalid: [spec.local: Forbidden: may not specify more than 1 volume type, spec.csi: Forbidden: may not specify more than 1 volume type]",
    );
}

#[tokio::test]
async fn volume_without_source() {
    let sb = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let spec = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]});
    let s = invalid(
        pvs.create(&PostParams::default(), &pv("pv-nosource", spec))
            .await,
        "PersistentVolume \"pv-nosource\" is invalid: spec: Required value: must specify a volume type",
    );
    assert_eq!(
        causes(&s),
        [(
            "spec".into(),
            "Required value: must specify a volume type".into()
        )]
    );
    assert_eq!(
        api_error(pvs.get("pv-nosource").await),
        (404, "NotFound".into())
    );
}

#[tokio::test]
async fn volume_source_fields() {
    let sb = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    let base = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"]});
    let with = |source: Value| {
        let mut spec = base.clone();
        for (k, v) in source.as_object().unwrap() {
            spec[k] = v.clone();
        }
        spec
    };
    let cases = [
        (
            json!({"local": {"path": "/mnt/disk"}}),
            "spec.nodeAffinity: Required value: Local volume requires node affinity",
        ),
        (
            json!({"hostPath": {"path": "/data/../etc"}}),
            "spec.hostPath.path: Invalid value: \"/data/../etc\": must not contain '..'",
        ),
        (
            json!({"nfs": {"server": "10.0.0.1", "path": "exports"}}),
            "spec.nfs.path: Invalid value: \"exports\": must be an absolute path",
        ),
        (
            json!({"csi": {"driver": "csi.example.com"}}),
            "spec.csi.volumeHandle: Required value",
        ),
        (
            json!({"hostPath": {"path": "/data"}, "nodeAffinity": {"required": {"nodeSelectorTerms": []}}}),
            "spec.nodeAffinity.required.nodeSelectorTerms: Required value: must have at least one node selector term",
        ),
    ];
    for (i, (source, expected)) in cases.into_iter().enumerate() {
        let name = format!("pv-src-{i}");
        invalid(
            pvs.create(&PostParams::default(), &pv(&name, with(source)))
                .await,
            &format!("PersistentVolume \"{name}\" is invalid: {expected}"),
        );
    }
}

#[tokio::test]
async fn volume_updates() {
    let sb = start().await;
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    pvs.create(
        &PostParams::default(),
        &pv("pv-upd", host_path_spec("/data/u")),
    )
    .await
    .unwrap();
    // Updates run the create rules twice (strategy, then update validation): the causes
    // hold each error twice, the message once.
    let patch = json!({"spec": {"capacity": null}});
    let s = invalid(
        pvs.patch("pv-upd", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
        "PersistentVolume \"pv-upd\" is invalid: [spec.capacity: Required value, spec.capacity: Unsupported value: core.ResourceList(nil): supported values: \"storage\"]",
    );
    assert_eq!(causes(&s).len(), 4, "{s:?}");
    // The source is fixed once written (the real message goes on with a Go diff).
    let patch = json!({"spec": {"hostPath": {"path": "/data/elsewhere"}}});
    invalid(
        pvs.patch("pv-upd", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
        "PersistentVolume \"pv-upd\" is invalid: spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation",
    );
    // Server-side apply goes through the same checks.
    let applied = json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pv-upd"}, "spec": {"nfs": {"server": "10.0.0.1", "path": "/x"}}});
    invalid(
        pvs.patch(
            "pv-upd",
            &PatchParams::apply("validation-test").force(),
            &Patch::Apply(&applied),
        )
        .await,
        "PersistentVolume \"pv-upd\" is invalid: [spec.nfs: Forbidden: may not specify more than 1 volume type, spec.persistentvolumesource: Forbidden: spec.persistentvolumesource is immutable after creation]",
    );
    // What may change does.
    let patch = json!({"metadata": {"labels": {"tier": "gold"}},
                       "spec": {"persistentVolumeReclaimPolicy": "Delete", "capacity": {"storage": "2Gi"}}});
    pvs.patch("pv-upd", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn claim_create_rules() {
    let sb = start().await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    invalid(
        claims
            .create(
                &PostParams::default(),
                &claim(
                    "c-nomodes",
                    json!({"resources": {"requests": {"storage": "1Gi"}}}),
                ),
            )
            .await,
        "PersistentVolumeClaim \"c-nomodes\" is invalid: spec.accessModes: Required value: at least 1 access mode is required",
    );
    invalid(
        claims
            .create(
                &PostParams::default(),
                &claim("c-nosize", json!({"accessModes": ["ReadWriteOnce"]})),
            )
            .await,
        "PersistentVolumeClaim \"c-nosize\" is invalid: spec.resources[storage]: Required value",
    );
    invalid(
        claims
            .create(
                &PostParams::default(),
                &claim(
                    "c-zero",
                    json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "0Gi"}}}),
                ),
            )
            .await,
        "PersistentVolumeClaim \"c-zero\" is invalid: spec.resources[storage]: Invalid value: \"0\": must be greater than zero",
    );
    let s = invalid(
        claims
            .create(&PostParams::default(), &claim("c-empty", json!({})))
            .await,
        "PersistentVolumeClaim \"c-empty\" is invalid: [spec.accessModes: Required value: at least 1 access mode is required, spec.resources[storage]: Required value]",
    );
    let d = s.details.as_ref().unwrap();
    assert_eq!(
        (d.name.as_str(), d.kind.as_str(), d.group.as_str()),
        ("c-empty", "PersistentVolumeClaim", "")
    );
    assert_eq!(
        d.causes
            .iter()
            .map(|c| c.reason.as_str())
            .collect::<Vec<_>>(),
        ["FieldValueRequired", "FieldValueRequired"]
    );
}

/// Data source errors take their place in ValidatePersistentVolumeClaimSpec's order: after
/// the volume mode, before the volume attributes class. A stored claim that names an API
/// group is no longer held to the group syntax (AllowInvalidAPIGroupInDataSourceOrRef): only
/// the immutability of its spec is reported.
#[tokio::test]
async fn claim_data_source_errors_in_order() {
    let sb = start().await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let s = invalid(
        claims
            .create(
                &PostParams::default(),
                &claim(
                    "c-order",
                    json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                           "volumeMode": "Raw", "volumeAttributesClassName": "Bad_Class",
                           "dataSourceRef": {"kind": "ConfigMap", "name": "cm"}}),
                ),
            )
            .await,
        "PersistentVolumeClaim \"c-order\" is invalid: [spec.volumeMode: Unsupported value: \"Raw\": supported values: \"Block\", \"Filesystem\", spec.dataSource: Invalid value: \"ConfigMap\": must be 'PersistentVolumeClaim' when referencing the default apiGroup, spec.dataSourceRef: Invalid value: \"ConfigMap\": must be 'PersistentVolumeClaim' when referencing the default apiGroup, spec.volumeAttributesClassName: Invalid value: \"Bad_Class\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')]",
    );
    assert_eq!(causes(&s).len(), 4);

    // The group of a populator is checked on create only.
    let populator = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                           "dataSourceRef": {"apiGroup": "example.com", "kind": "Thing", "name": "t"}});
    claims
        .create(&PostParams::default(), &claim("c-populated", populator))
        .await
        .unwrap();
    let patch = json!({"spec": {"dataSourceRef": {"apiGroup": "Example_Com"}, "dataSource": {"apiGroup": "Example_Com"}}});
    let s = invalid(
        claims
            .patch(
                "c-populated",
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await,
        "PersistentVolumeClaim \"c-populated\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims",
    );
    assert_eq!(causes(&s).len(), 1);
}

#[tokio::test]
async fn bound_claim_access_modes_are_immutable() {
    let sb = start().await;
    let c = sb.client().unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let bound = bound_claim(&c, "c-modes").await;
    // The real message goes on with "\n" and a Go diff of the two specs.
    let expected = "PersistentVolumeClaim \"c-modes\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";
    let patch = json!({"spec": {"accessModes": ["ReadWriteMany"]}});
    let s = invalid(
        claims
            .patch("c-modes", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
        expected,
    );
    assert_eq!(
        s.details.as_ref().unwrap().causes[0].reason,
        "FieldValueForbidden"
    );
    // A full replace and a server-side apply say the same.
    let mut replaced = bound.clone();
    replaced.spec.as_mut().unwrap().access_modes = Some(vec!["ReadOnlyMany".into()]);
    invalid(
        claims
            .replace("c-modes", &PostParams::default(), &replaced)
            .await,
        expected,
    );
    let applied = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "c-modes"}, "spec": {"accessModes": ["ReadWriteMany"]}});
    invalid(
        claims
            .patch(
                "c-modes",
                &PatchParams::apply("validation-test").force(),
                &Patch::Apply(&applied),
            )
            .await,
        expected,
    );
    // Metadata stays writable, and a replace that keeps the spec passes.
    let patch = json!({"metadata": {"labels": {"app": "db"}}});
    claims
        .patch("c-modes", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let current = claims.get("c-modes").await.unwrap();
    claims
        .replace("c-modes", &PostParams::default(), &current)
        .await
        .unwrap();
}

#[tokio::test]
async fn bound_claim_cannot_shrink_below_its_capacity() {
    let sb = start().await;
    let c = sb.client().unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let bound = bound_claim(&c, "c-shrink").await;
    let capacity = bound.status.unwrap().capacity.unwrap();
    assert_eq!(capacity["storage"].0, "2Gi");
    let patch = json!({"spec": {"resources": {"requests": {"storage": "500Mi"}}}});
    let s = invalid(
        claims
            .patch("c-shrink", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
        "PersistentVolumeClaim \"c-shrink\" is invalid: spec.resources.requests.storage: Forbidden: field can not be less than status.capacity",
    );
    assert_eq!(
        causes(&s),
        [(
            "spec.resources.requests.storage".into(),
            "Forbidden: field can not be less than status.capacity".into()
        )]
    );
    // The same amount written another way is no change.
    let patch = json!({"spec": {"resources": {"requests": {"storage": "1024Mi"}}}});
    claims
        .patch("c-shrink", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test]
async fn unbound_claims_keep_their_spec_but_take_a_volume_name_once() {
    let sb = start().await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let spec = json!({"storageClassName": "nowhere", "accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "1Gi"}}});
    claims
        .create(&PostParams::default(), &claim("c-pending", spec))
        .await
        .unwrap();
    let expected = "PersistentVolumeClaim \"c-pending\" is invalid: spec: Forbidden: spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims";
    // Requests are only open to change once bound.
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    invalid(
        claims
            .patch("c-pending", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
        expected,
    );
    let patch = json!({"spec": {"volumeName": "pv-somewhere"}});
    claims
        .patch("c-pending", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let patch = json!({"spec": {"volumeName": "pv-elsewhere"}});
    invalid(
        claims
            .patch("c-pending", &PatchParams::default(), &Patch::Merge(&patch))
            .await,
        expected,
    );
}

#[tokio::test]
async fn status_writes_do_not_validate_the_spec() {
    let sb = start().await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let spec = json!({"storageClassName": "nowhere", "accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "1Gi"}}});
    let created = claims
        .create(&PostParams::default(), &claim("c-status", spec))
        .await
        .unwrap();
    // Recorded on the real cluster ("status-subresource" probe, pvc.patch_status_invalid_phase):
    // a status patch with a phase no controller would write answers 200.
    let patch = json!({"status": {"phase": "NoSuchPhase"}});
    claims
        .patch_status("c-status", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    // A status replace ignores the spec it carries, even one that would be refused.
    let mut body = claims.get("c-status").await.unwrap();
    body.spec.as_mut().unwrap().access_modes = None;
    body.status.as_mut().unwrap().phase = Some("Pending".into());
    let written = claims
        .replace_status("c-status", &PostParams::default(), &body)
        .await
        .unwrap();
    assert_eq!(
        written.spec.unwrap().access_modes,
        created.spec.unwrap().access_modes
    );
}

#[tokio::test]
async fn valid_volumes_and_claims_pass() {
    let sb = start().await;
    let c = sb.client().unwrap();
    let pvs: Api<PersistentVolume> = Api::all(c.clone());
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), "default");
    let affinity = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a"]}]}]}});
    let specs = [
        json!({"hostPath": {"path": "/data/x", "type": "DirectoryOrCreate"}}),
        json!({"nfs": {"server": "10.0.0.1", "path": "/exports"}, "mountOptions": ["nfsvers=4.1"]}),
        json!({"local": {"path": "/mnt/disks/ssd1"}, "nodeAffinity": affinity}),
        json!({"csi": {"driver": "csi.example.com", "volumeHandle": "vol-1",
                       "nodePublishSecretRef": {"name": "s", "namespace": "default"}}}),
        json!({"iscsi": {"targetPortal": "10.0.0.2:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": 0}}),
    ];
    for (i, source) in specs.into_iter().enumerate() {
        let mut spec = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                              "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "fast"});
        for (k, v) in source.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let created = pvs
            .create(&PostParams::default(), &pv(&format!("pv-ok-{i}"), spec))
            .await
            .unwrap();
        // Recorded on the real cluster ("pv-immediate" probe, a.pv.create): a new volume
        // is Pending with the pv-protection finalizer.
        assert_eq!(
            created.status.unwrap().phase.as_deref(),
            Some("Pending"),
            "pv-ok-{i}"
        );
        assert_eq!(
            created.metadata.finalizers.unwrap(),
            ["kubernetes.io/pv-protection"]
        );
    }
    let created = claims
        .create(
            &PostParams::default(),
            &claim(
                "c-ok",
                json!({"accessModes": ["ReadWriteOncePod"], "storageClassName": "fast",
                       "resources": {"requests": {"storage": "1.5Gi"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        created.spec.unwrap().volume_mode.as_deref(),
        Some("Filesystem")
    );
    // A replace that leaves out a defaulted field is defaulted again, not a change.
    let mut current = claims.get("c-ok").await.unwrap();
    current.spec.as_mut().unwrap().volume_mode = None;
    claims
        .replace("c-ok", &PostParams::default(), &current)
        .await
        .unwrap();
    let mut spec =
        json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}});
    spec["accessModes"] = json!(["ReadWriteOncePod", "ReadWriteOnce"]);
    invalid(
        claims
            .create(&PostParams::default(), &claim("c-mixed", spec))
            .await,
        "PersistentVolumeClaim \"c-mixed\" is invalid: spec.accessModes: Forbidden: may not use ReadWriteOncePod with other access modes",
    );
}
