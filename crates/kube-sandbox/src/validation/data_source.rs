//! A claim's `dataSource` and `dataSourceRef`: how the API server shapes them before storing
//! (pkg/api/persistentvolumeclaim: dropped, filled from one another) and the rules they must
//! then follow (pkg/apis/core/validation: validateDataSource, validateDataSourceRef and the
//! agreement of the two).

use super::*;

const CLAIM_KIND: &str = "PersistentVolumeClaim";
const SNAPSHOT_KIND: &str = "VolumeSnapshot";
const SNAPSHOT_GROUP: &str = "snapshot.storage.k8s.io";

/// How Go prints the `*field.Path` given as the bad value of the two agreement errors: with
/// `%#v` of the dereferenced struct, whose parent pointer is a heap address. The address
/// changes from one request to the next on a real server; this one is fixed.
const DATA_SOURCE_PATH_SHOWN: &str =
    "field.Path{name:\"dataSource\", index:\"\", parent:(*field.Path)(0xc000a1e2a0)}";

/// A reference as the Go types hold it: `apiGroup` a pointer (absent and null are nil, ""
/// is not), kind and name plain strings.
struct Ref<'a> {
    group: Option<&'a str>,
    kind: &'a str,
    name: &'a str,
    namespace: Option<&'a str>,
}

impl<'a> Ref<'a> {
    fn read(v: &'a Value) -> Ref<'a> {
        Ref {
            group: present(v, "apiGroup").and_then(Value::as_str),
            kind: text(v, "kind"),
            name: text(v, "name"),
            namespace: present(v, "namespace").and_then(Value::as_str),
        }
    }

    fn has_namespace(&self) -> bool {
        self.namespace.is_some_and(|n| !n.is_empty())
    }

    /// The JSON the real server writes back: `apiGroup` always there (null when unset),
    /// `namespace` only when set, nothing else.
    fn render(&self, with_namespace: bool) -> Value {
        let mut out = json!({"apiGroup": self.group, "kind": self.kind, "name": self.name});
        if with_namespace && let Some(ns) = self.namespace {
            out["namespace"] = json!(ns);
        }
        out
    }

    fn is_claim_or_snapshot(&self) -> bool {
        let group = self.group.unwrap_or_default();
        (self.kind == CLAIM_KIND && group.is_empty())
            || (self.kind == SNAPSHOT_KIND && group == SNAPSHOT_GROUP)
    }
}

fn spec_ref<'a>(spec: Option<&'a Value>, key: &str) -> Option<Ref<'a>> {
    spec.and_then(|s| present(s, key)).map(Ref::read)
}

/// The claim spec strategy steps of a create (`old` None) or a spec update, in the real
/// order: DropDisabledFields (CrossNamespaceVolumeDataSource is off: a namespaced
/// `dataSourceRef` is dropped unless the stored claim has one),
/// EnforceDataSourceBackwardsCompatibility (a `dataSource` other than a claim or a
/// VolumeSnapshot is dropped when nothing else names a source), then NormalizeDataSources
/// (each field filled from the other; a namespaced `dataSourceRef` is not copied back).
pub fn shape_claim_data_sources(obj: &mut Value, old: Option<&Value>) {
    let old_spec = old.and_then(|o| o.get("spec"));
    let old_has_ref = spec_ref(old_spec, "dataSourceRef").is_some();
    let old_has_any = old_has_ref || spec_ref(old_spec, "dataSource").is_some();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let as_value = |m: &Map<String, Value>, key: &str| m.get(key).filter(|v| !v.is_null()).cloned();
    let mut source = as_value(spec, "dataSource").map(|v| Ref::read(&v).render(false));
    let mut reference = as_value(spec, "dataSourceRef").map(|v| Ref::read(&v).render(true));

    if reference
        .as_ref()
        .is_some_and(|r| Ref::read(r).has_namespace())
        && !old_has_ref
    {
        reference = None;
    }
    if !old_has_any
        && reference.is_none()
        && source
            .as_ref()
            .is_some_and(|s| !Ref::read(s).is_claim_or_snapshot())
    {
        source = None;
    }
    match (&source, &reference) {
        (Some(s), None) => reference = Some(Ref::read(s).render(false)),
        (None, Some(r)) if !Ref::read(r).has_namespace() => {
            source = Some(Ref::read(r).render(false));
        }
        _ => {}
    }
    for (key, value) in [("dataSource", source), ("dataSourceRef", reference)] {
        match value {
            Some(v) => {
                spec.insert(key.into(), v);
            }
            None => {
                spec.remove(key);
            }
        }
    }
}

/// Whether the stored claim names an API group in either field (even ""): then the group's
/// syntax is no longer checked, so that an old object stays writable.
pub(super) fn allows_any_group(old: &Value) -> bool {
    let spec = old.get("spec");
    ["dataSource", "dataSourceRef"]
        .iter()
        .any(|k| spec_ref(spec, k).is_some_and(|r| r.group.is_some()))
}

/// The fields common to validateDataSource and validateDataSourceRef.
fn reference_errors(errs: &mut Errs, path: &str, r: &Ref, any_group: bool) {
    if r.name.is_empty() {
        errs.required(format!("{path}.name"), "");
    }
    if r.kind.is_empty() {
        errs.required(format!("{path}.kind"), "");
    }
    let group = r.group.unwrap_or_default();
    if group.is_empty() && r.kind != CLAIM_KIND {
        errs.invalid(
            path,
            Bad::Str(r.kind.to_owned()),
            "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
        );
    }
    if !group.is_empty() && !any_group {
        for msg in dns_subdomain_errors(group) {
            errs.invalid(format!("{path}.apiGroup"), Bad::Str(group.to_owned()), &msg);
        }
    }
}

/// The data-source part of ValidatePersistentVolumeClaimSpec, in its order.
pub(super) fn data_source_errors(errs: &mut Errs, spec: &Value, any_group: bool) {
    let source = spec_ref(Some(spec), "dataSource");
    let reference = spec_ref(Some(spec), "dataSourceRef");
    if let Some(s) = &source {
        reference_errors(errs, "spec.dataSource", s, any_group);
    }
    if let Some(r) = &reference {
        reference_errors(errs, "spec.dataSourceRef", r, any_group);
        if let Some(ns) = r.namespace.filter(|n| !n.is_empty()) {
            for msg in dns_label_errors(ns) {
                errs.invalid(
                    "spec.dataSourceRef.namespace",
                    Bad::Str(ns.to_owned()),
                    &msg,
                );
            }
        }
    }
    let shown = || Bad::Raw(DATA_SOURCE_PATH_SHOWN.to_owned());
    match (&source, &reference) {
        (Some(_), Some(r)) if r.has_namespace() => errs.invalid(
            "spec",
            shown(),
            "may not be specified when dataSourceRef.namespace is specified",
        ),
        (Some(s), Some(r)) if (s.group, s.kind, s.name) != (r.group, r.kind, r.name) => {
            errs.invalid("spec", shown(), "must match dataSourceRef")
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shaped(spec: Value, old: Option<Value>) -> Value {
        let mut obj = json!({ "spec": spec });
        shape_claim_data_sources(&mut obj, old.as_ref());
        obj["spec"].clone()
    }

    #[test]
    fn a_clone_source_is_copied_into_the_reference() {
        let spec = shaped(
            json!({"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}),
            None,
        );
        let want = json!({"apiGroup": null, "kind": "PersistentVolumeClaim", "name": "src"});
        assert_eq!(spec["dataSource"], want);
        assert_eq!(spec["dataSourceRef"], want);
    }

    #[test]
    fn a_populator_reference_is_copied_back_without_its_namespace() {
        let spec = shaped(
            json!({"dataSourceRef": {"apiGroup": "example.com", "kind": "Thing", "name": "t"}}),
            None,
        );
        assert_eq!(
            spec["dataSource"],
            json!({"apiGroup": "example.com", "kind": "Thing", "name": "t"})
        );
        let spec = shaped(
            json!({"dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "x", "namespace": "other"}}),
            None,
        );
        assert!(
            spec.get("dataSourceRef").is_none(),
            "the gate is off: dropped"
        );
        assert!(spec.get("dataSource").is_none());
    }

    #[test]
    fn a_legacy_source_of_another_kind_is_dropped() {
        let spec = shaped(
            json!({"dataSource": {"apiGroup": "example.com", "kind": "Thing", "name": "t"}}),
            None,
        );
        assert!(spec.get("dataSource").is_none());
        assert!(spec.get("dataSourceRef").is_none());
        // Kept when the stored claim already had one.
        let old = json!({"spec": {"dataSource": {"apiGroup": "example.com", "kind": "Thing", "name": "t"}}});
        let spec = shaped(
            json!({"dataSource": {"apiGroup": "example.com", "kind": "Thing", "name": "t"}}),
            Some(old),
        );
        assert_eq!(spec["dataSourceRef"]["kind"], "Thing");
    }

    #[test]
    fn mismatches_and_bad_groups_are_reported() {
        let mut errs = Errs::default();
        let spec = json!({
            "dataSource": {"apiGroup": null, "kind": "PersistentVolumeClaim", "name": "a"},
            "dataSourceRef": {"apiGroup": "Bad_Group", "kind": "", "name": "a"},
        });
        data_source_errors(&mut errs, &spec, false);
        let fields: Vec<&str> = errs.0.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.dataSourceRef.kind",
                "spec.dataSourceRef.apiGroup",
                "spec"
            ]
        );
        assert!(errs.0[2].message.ends_with(": must match dataSourceRef"));
    }
}
