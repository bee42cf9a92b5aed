//! The resources the sandbox API server serves, and its discovery documents.

use serde_json::{Value, json};

/// How a resource behaves; one static entry per group/version/plural.
#[derive(Debug)]
pub struct Resource {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// Has a `/status` subresource: writes to the main resource ignore status and back.
    pub status: bool,
    /// Keeps `metadata.generation`, bumped on spec changes.
    pub generation: bool,
    /// Only `create` (reviews): nothing is stored.
    pub create_only: bool,
    /// Field selectors beyond metadata.name/namespace; `None` means the generic error text.
    pub field_labels: Option<&'static [&'static str]>,
    /// Shares storage with another resource (events.k8s.io events are core events).
    pub storage_of: Option<&'static str>,
}

const NONE: &[&str] = &[];

const fn r(
    group: &'static str,
    plural: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Resource {
    Resource {
        group,
        version: "v1",
        plural,
        singular,
        kind,
        namespaced,
        short_names: NONE,
        categories: NONE,
        status: false,
        generation: false,
        create_only: false,
        field_labels: None,
        storage_of: None,
    }
}

const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];
const NEW_EVENT_FIELDS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
];
const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];

pub static RESOURCES: &[Resource] = &[
    Resource {
        short_names: &["ns"],
        status: true,
        field_labels: Some(&["status.phase"]),
        ..r("", "namespaces", "namespace", "Namespace", false)
    },
    Resource {
        short_names: &["cm"],
        ..r("", "configmaps", "configmap", "ConfigMap", true)
    },
    Resource {
        field_labels: Some(&["type"]),
        ..r("", "secrets", "secret", "Secret", true)
    },
    Resource {
        short_names: &["sa"],
        ..r(
            "",
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            true,
        )
    },
    Resource {
        short_names: &["svc"],
        status: true,
        categories: &["all"],
        ..r("", "services", "service", "Service", true)
    },
    Resource {
        short_names: &["no"],
        status: true,
        field_labels: Some(&["spec.unschedulable"]),
        ..r("", "nodes", "node", "Node", false)
    },
    Resource {
        short_names: &["po"],
        categories: &["all"],
        status: true,
        field_labels: Some(POD_FIELDS),
        ..r("", "pods", "pod", "Pod", true)
    },
    Resource {
        short_names: &["pvc"],
        status: true,
        ..r(
            "",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            true,
        )
    },
    Resource {
        short_names: &["pv"],
        status: true,
        ..r(
            "",
            "persistentvolumes",
            "persistentvolume",
            "PersistentVolume",
            false,
        )
    },
    Resource {
        short_names: &["ev"],
        field_labels: Some(CORE_EVENT_FIELDS),
        ..r("", "events", "event", "Event", true)
    },
    Resource {
        categories: &["all"],
        status: true,
        generation: true,
        field_labels: Some(&["status.successful"]),
        ..r("batch", "jobs", "job", "Job", true)
    },
    Resource {
        short_names: &["cj"],
        categories: &["all"],
        status: true,
        generation: true,
        ..r("batch", "cronjobs", "cronjob", "CronJob", true)
    },
    Resource {
        short_names: &["sc"],
        ..r(
            "storage.k8s.io",
            "storageclasses",
            "storageclass",
            "StorageClass",
            false,
        )
    },
    Resource {
        status: true,
        ..r(
            "storage.k8s.io",
            "volumeattachments",
            "volumeattachment",
            "VolumeAttachment",
            false,
        )
    },
    r(
        "storage.k8s.io",
        "csidrivers",
        "csidriver",
        "CSIDriver",
        false,
    ),
    r("storage.k8s.io", "csinodes", "csinode", "CSINode", false),
    Resource {
        short_names: &["ev"],
        field_labels: Some(NEW_EVENT_FIELDS),
        storage_of: Some("events"),
        ..r("events.k8s.io", "events", "event", "Event", true)
    },
    r("coordination.k8s.io", "leases", "lease", "Lease", true),
    Resource {
        short_names: &["pdb"],
        status: true,
        generation: true,
        ..r(
            "policy",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            "PodDisruptionBudget",
            true,
        )
    },
    Resource {
        short_names: &["deploy"],
        categories: &["all"],
        status: true,
        generation: true,
        ..r("apps", "deployments", "deployment", "Deployment", true)
    },
    Resource {
        short_names: &["rs"],
        categories: &["all"],
        status: true,
        generation: true,
        ..r("apps", "replicasets", "replicaset", "ReplicaSet", true)
    },
    Resource {
        short_names: &["ds"],
        categories: &["all"],
        status: true,
        generation: true,
        ..r("apps", "daemonsets", "daemonset", "DaemonSet", true)
    },
    Resource {
        short_names: &["sts"],
        categories: &["all"],
        status: true,
        generation: true,
        ..r("apps", "statefulsets", "statefulset", "StatefulSet", true)
    },
    r("rbac.authorization.k8s.io", "roles", "role", "Role", true),
    r(
        "rbac.authorization.k8s.io",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        true,
    ),
    r(
        "rbac.authorization.k8s.io",
        "clusterroles",
        "clusterrole",
        "ClusterRole",
        false,
    ),
    r(
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
    ),
    // Stored and served; their CEL is not evaluated (docs/sandbox-known-differences.md).
    Resource {
        status: true,
        generation: true,
        ..r(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicies",
            "validatingadmissionpolicy",
            "ValidatingAdmissionPolicy",
            false,
        )
    },
    Resource {
        generation: true,
        ..r(
            "admissionregistration.k8s.io",
            "validatingadmissionpolicybindings",
            "validatingadmissionpolicybinding",
            "ValidatingAdmissionPolicyBinding",
            false,
        )
    },
    Resource {
        create_only: true,
        ..r(
            "authentication.k8s.io",
            "selfsubjectreviews",
            "selfsubjectreview",
            "SelfSubjectReview",
            false,
        )
    },
    Resource {
        create_only: true,
        ..r(
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "selfsubjectaccessreview",
            "SelfSubjectAccessReview",
            false,
        )
    },
];

/// Index into `RESOURCES`.
pub type Rid = usize;

impl Resource {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The id of the resource whose storage holds these objects.
    pub fn storage(&self) -> Rid {
        let plural = self.storage_of.unwrap_or(self.plural);
        let group = if self.storage_of.is_some() {
            ""
        } else {
            self.group
        };
        find(group, self.version, plural).unwrap_or_default()
    }
}

pub fn find(group: &str, version: &str, plural: &str) -> Option<Rid> {
    RESOURCES
        .iter()
        .position(|r| r.group == group && r.version == version && r.plural == plural)
}

pub fn by_kind(api_version: &str, kind: &str) -> Option<Rid> {
    RESOURCES
        .iter()
        .position(|r| r.api_version() == api_version && r.kind == kind && r.storage_of.is_none())
}

pub fn get(rid: Rid) -> &'static Resource {
    &RESOURCES[rid]
}

fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&str> = Vec::new();
    for r in RESOURCES.iter().filter(|r| !r.group.is_empty()) {
        if !groups.contains(&r.group) {
            groups.push(r.group);
        }
    }
    groups
}

pub fn version() -> Value {
    json!({
        "major": "1", "minor": "36", "gitVersion": "v1.36.2-kube-sandbox",
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "", "compiler": "rustc", "platform": "linux/amd64"
    })
}

pub fn api_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
}

pub fn api_group_list() -> Value {
    let groups: Vec<Value> = groups()
        .into_iter()
        .map(|g| {
            let gv = json!({"groupVersion": format!("{g}/v1"), "version": "v1"});
            json!({"name": g, "versions": [gv.clone()], "preferredVersion": gv})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn api_group(group: &str) -> Option<Value> {
    groups().contains(&group).then(|| {
        let gv = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
        json!({"kind": "APIGroup", "apiVersion": "v1", "name": group,
               "versions": [gv.clone()], "preferredVersion": gv})
    })
}

fn verbs(r: &Resource) -> Vec<&'static str> {
    if r.create_only {
        return vec!["create"];
    }
    let mut v = vec![
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ];
    if r.plural == "namespaces" {
        v.retain(|x| *x != "deletecollection");
    }
    v
}

fn resource_entries(r: &Resource) -> Vec<Value> {
    let mut main = json!({
        "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced,
        "kind": r.kind, "verbs": verbs(r),
        "storageVersionHash": format!("{:012x}", crate::wellknown::fnv1a32(r.plural.as_bytes())),
    });
    if !r.short_names.is_empty() {
        main["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        main["categories"] = json!(r.categories);
    }
    let sub = |name: &str, kind: &str, verbs: &[&str]| {
        json!({"name": format!("{}/{name}", r.plural), "singularName": "", "namespaced": r.namespaced,
               "kind": kind, "verbs": verbs})
    };
    let mut out = vec![main];
    if r.status {
        out.push(sub("status", r.kind, &["get", "patch", "update"]));
    }
    match r.plural {
        "pods" if r.group.is_empty() => {
            out.push(sub("log", "Pod", &["get"]));
            out.push(sub("binding", "Binding", &["create"]));
            let mut ev = sub("eviction", "Eviction", &["create"]);
            ev["group"] = json!("policy");
            ev["version"] = json!("v1");
            out.push(ev);
        }
        "serviceaccounts" => {
            let mut t = sub("token", "TokenRequest", &["create"]);
            t["group"] = json!("authentication.k8s.io");
            t["version"] = json!("v1");
            out.push(t);
        }
        _ => {}
    }
    out
}

/// `/api/v1` or `/apis/<group>/v1`.
pub fn resource_list(group: &str) -> Option<Value> {
    let entries: Vec<Value> = RESOURCES
        .iter()
        .filter(|r| r.group == group)
        .flat_map(resource_entries)
        .collect();
    if entries.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        "v1".to_owned()
    } else {
        format!("{group}/v1")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": entries}),
    )
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2`), which kubectl asks for first.
pub fn aggregated(core: bool) -> Value {
    let group_names: Vec<&str> = if core { vec![""] } else { groups() };
    let items: Vec<Value> = group_names
        .into_iter()
        .map(|g| {
            let resources: Vec<Value> = RESOURCES
                .iter()
                .filter(|r| r.group == g)
                .map(|r| {
                    let mut v = json!({
                        "resource": r.plural, "singularResource": r.singular,
                        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
                        "responseKind": {"group": g, "version": "v1", "kind": r.kind},
                        "verbs": verbs(r),
                    });
                    if !r.short_names.is_empty() {
                        v["shortNames"] = json!(r.short_names);
                    }
                    if !r.categories.is_empty() {
                        v["categories"] = json!(r.categories);
                    }
                    if r.status {
                        v["subresources"] = json!([{"subresource": "status",
                            "responseKind": {"group": g, "version": "v1", "kind": r.kind},
                            "verbs": ["get", "patch", "update"]}]);
                    }
                    v
                })
                .collect();
            json!({"metadata": {"name": g, "creationTimestamp": null},
                   "versions": [{"version": "v1", "resources": resources, "freshness": "Current"}]})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
           "metadata": {}, "items": items})
}
