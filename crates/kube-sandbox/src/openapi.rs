//! Minimal OpenAPI documents. kubectl reads the v3 ones to learn that the server validates
//! fields itself (`fieldValidation` on each kind's operations); without that it falls back
//! to downloading protobuf OpenAPI v2. No schemas are served.

use serde_json::{Map, Value, json};

use super::resources::{RESOURCES, Resource};

fn gv_key(r: &Resource) -> String {
    if r.group.is_empty() {
        "api/v1".into()
    } else {
        format!("apis/{}/{}", r.group, r.version)
    }
}

fn operation(r: &Resource, verb: &str) -> Value {
    json!({
        "operationId": format!("{verb}{}", r.kind),
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
        "parameters": [
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        ],
        "responses": {"200": {"description": "OK"}},
    })
}

fn group_version_doc(key: &str) -> Option<Value> {
    let mut paths = Map::new();
    for r in RESOURCES.iter().filter(|r| gv_key(r) == key) {
        let base = format!("/{key}");
        let (collection, item) = if r.namespaced {
            (
                format!("{base}/namespaces/{{namespace}}/{}", r.plural),
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural),
            )
        } else {
            (
                format!("{base}/{}", r.plural),
                format!("{base}/{}/{{name}}", r.plural),
            )
        };
        paths.insert(
            collection,
            json!({"post": operation(r, "post"), "get": operation(r, "list")}),
        );
        paths.insert(
            item,
            json!({"get": operation(r, "get"), "put": operation(r, "put"), "patch": operation(r, "patch"), "delete": operation(r, "delete")}),
        );
    }
    (!paths.is_empty()).then(|| {
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.36.2"},
               "paths": paths, "components": {"schemas": {}}})
    })
}

pub fn document(path: &str) -> Option<Value> {
    match path {
        "v2" => Some(
            json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.36.2"},
                            "paths": {}, "definitions": {}}),
        ),
        "v3" => {
            let mut paths = Map::new();
            for r in RESOURCES {
                let key = gv_key(r);
                paths.insert(
                    key.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{key}")}),
                );
            }
            Some(json!({"paths": paths}))
        }
        p => group_version_doc(p.strip_prefix("v3/")?),
    }
}
