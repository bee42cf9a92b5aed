//! The API verbs over the store, with the semantics controllers depend on: conflicts on
//! stale versions, finalizers and deletionTimestamp, status subresources, field ownership,
//! delete propagation. The HTTP front end and the simulated controllers both use these.

use serde_json::{Value, json};

use super::admission;
use super::claim_resize;
use super::events;
use super::ids;
use super::managed;
use super::patch;
use super::resources::{self, Resource, Rid};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult, Cause, success_status};
use super::store::{Store, Write, same_but_version};

/// Who is writing, and whether for real.
#[derive(Debug, Clone, Default)]
pub struct WriteCtx {
    pub manager: String,
    /// Whether the client named the manager (`fieldManager`); apply requires it.
    pub manager_given: bool,
    pub dry_run: bool,
    pub force: bool,
    /// Set for server-side apply, whose ownership is computed by `managed::apply`.
    pub apply: bool,
}

impl WriteCtx {
    pub fn manager(name: &str) -> Self {
        WriteCtx {
            manager: name.to_owned(),
            ..Default::default()
        }
    }
}

/// Options of a delete (query parameters or a DeleteOptions body).
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub propagation: Option<String>,
    pub orphan_dependents: Option<bool>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub grace_period: Option<i64>,
    pub dry_run: bool,
}

/// What a successful delete answers, plus warnings for the `Warning` header.
pub struct Deleted {
    pub body: Value,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct ListOpts {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

pub struct Api {
    pub store: Store,
}

fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj["metadata"][key].as_str().unwrap_or_default()
}

/// The object as a client of resource `r` sees it (events.k8s.io converts).
pub fn view(r: &Resource, stored: &Value) -> Value {
    view_ref(r, stored).into_owned()
}

/// `view` without a copy where the stored form is what the client sees.
fn view_ref<'a>(r: &Resource, stored: &'a Value) -> std::borrow::Cow<'a, Value> {
    if r.storage_of.is_some() {
        std::borrow::Cow::Owned(events::to_new(stored))
    } else {
        std::borrow::Cow::Borrowed(stored)
    }
}

fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse::<u64>().map_err(|_| {
        ApiError::internal(format!(
            "strconv.ParseUint: parsing \"{s}\": invalid syntax"
        ))
    })
}

fn has_finalizers(obj: &Value) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

impl Api {
    pub fn new(history_window: usize) -> Self {
        let store = Store::new(resources::RESOURCES.len(), history_window);
        super::controllers::add_indexes(&store);
        Api { store }
    }

    fn check_namespace(&self, r: &Resource, ns: &str) -> ApiResult<()> {
        if !r.namespaced {
            return Ok(());
        }
        let nsr = resources::find("", "v1", "namespaces").unwrap_or_default();
        // Read in place: every create in a namespace asks.
        let terminating = |n: &Value| n["metadata"].get("deletionTimestamp").is_some();
        match self.store.peek(nsr, "", ns, terminating) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(true) => Err(ApiError::new(
                403,
                Some("Forbidden"),
                format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    r.plural, ""
                ),
            )),
            Some(false) => Ok(()),
        }
    }

    /// The ServiceAccount admission: a pod's service account must exist in its namespace.
    fn check_service_account(&self, ns: &str, pod: &Value) -> ApiResult<()> {
        let sa = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        let sas = resources::find("", "v1", "serviceaccounts").unwrap_or_default();
        if self.store.peek(sas, ns, sa, |_| ()).is_some() {
            return Ok(());
        }
        let shown = match meta_str(pod, "generateName") {
            "" => meta_str(pod, "name").to_owned(),
            prefix => prefix.to_owned(),
        };
        Err(ApiError::new(
            403,
            Some("Forbidden"),
            format!("pods \"{shown}\" is forbidden: error looking up service account {ns}/{sa}: serviceaccount \"{sa}\" not found"),
        )
        .with_details(json!({"name": shown, "kind": "pods"})))
    }

    pub fn get(&self, rid: Rid, ns: &str, name: &str) -> ApiResult<Value> {
        let r = resources::get(rid);
        self.store
            .get(r.storage(), ns, name)
            .map(|v| view(r, &v))
            .ok_or_else(|| ApiError::not_found(r, name))
    }

    pub fn list(&self, rid: Rid, ns: Option<&str>, opts: &ListOpts) -> ApiResult<Value> {
        let r = resources::get(rid);
        let labels = LabelSelector::parse(opts.label_selector.as_deref().unwrap_or_default())?;
        let fields = FieldSelector::parse(opts.field_selector.as_deref().unwrap_or_default(), r)?;
        let rv = opts.resource_version.as_deref().filter(|s| !s.is_empty());
        let rv_match = opts
            .resource_version_match
            .as_deref()
            .filter(|s| !s.is_empty());
        let list_invalid = |msg: &str| {
            ApiError::new(
                422,
                Some("Invalid"),
                format!("ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: {msg}"),
            )
            .with_details(json!({"group": "meta.k8s.io", "kind": "ListOptions",
                "causes": [{"reason": "FieldValueForbidden", "field": "resourceVersionMatch", "message": msg}]}))
        };
        match (rv, rv_match) {
            (None, Some(_)) => {
                return Err(list_invalid(
                    "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            (Some("0"), Some("Exact")) => {
                return Err(list_invalid(
                    "Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
            _ => {}
        }
        if let Some(v) = rv.filter(|v| *v != "0") {
            let wanted = v.parse::<u64>().map_err(|_| {
                ApiError::internal(format!("resourceVersion: Invalid value: \"{v}\": strconv.ParseUint: parsing \"{v}\": invalid syntax"))
            })?;
            let current = self.store.current_rv();
            if wanted > current {
                let mut e = ApiError::new(
                    504,
                    Some("Timeout"),
                    format!("Timeout: Too large resource version: {wanted}, current: {current}"),
                )
                .with_details(json!({"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]}));
                e.retry_after = Some(1);
                return Err(e);
            }
            if rv_match == Some("Exact") && wanted < self.store.compacted_rv() {
                return Err(ApiError::gone(format!(
                    "too old resource version: {wanted} ({})",
                    self.store.compacted_rv()
                )));
            }
        }
        let ns = ns.or(fields.namespace());
        let start_after = match &opts.continue_token {
            Some(t) if !t.is_empty() => {
                let key = decode_continue(t)?;
                // Namespaces hold no '/', so the first one splits the key exactly.
                let (k_ns, k_name) = key.split_once('/').unwrap_or(("", key.as_str()));
                Some((k_ns.to_owned(), k_name.to_owned()))
            }
            _ => None,
        };
        let limit = opts.limit.filter(|l| *l > 0);
        let unselected = labels.is_empty()
            && opts
                .field_selector
                .as_deref()
                .unwrap_or_default()
                .is_empty();
        let (items, rest, list_rv) = self.store.list_page_counting(
            r.storage(),
            ns,
            start_after.as_ref(),
            limit,
            |obj| {
                let v = view_ref(r, obj);
                labels.matches_object(&v) && fields.matches(&v)
            },
            unselected,
        );
        let mut items: Vec<Value> = items
            .into_iter()
            .map(|o| match view_ref(r, &o) {
                std::borrow::Cow::Owned(v) => v,
                std::borrow::Cow::Borrowed(_) => o,
            })
            .collect();
        let mut meta = json!({"resourceVersion": list_rv.to_string()});
        if let Some(limit) = limit
            && rest > 0
        {
            meta["continue"] = json!(encode_continue(list_rv, &object_key(&items[limit - 1])));
            if unselected {
                meta["remainingItemCount"] = json!(rest);
            }
        }
        for item in &mut items {
            if let Some(m) = item.as_object_mut() {
                m.remove("kind");
                m.remove("apiVersion");
            }
        }
        Ok(
            json!({"kind": r.list_kind(), "apiVersion": r.api_version(), "metadata": meta, "items": items}),
        )
    }

    pub fn create(&self, rid: Rid, ns: &str, body: Value, ctx: &WriteCtx) -> ApiResult<Value> {
        self.create_with_fields(rid, ns, body, ctx, None)
    }

    /// Create; `fields` presets managedFields (server-side apply owns what it created).
    fn create_with_fields(
        &self,
        rid: Rid,
        ns: &str,
        body: Value,
        ctx: &WriteCtx,
        fields: Option<Value>,
    ) -> ApiResult<Value> {
        let r = resources::get(rid);
        let mut obj = body;
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request was in an unknown format",
            ));
        }
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if r.storage_of.is_some() {
            events::validate_new(&obj, &name)?;
            obj = events::to_core(&obj);
        }
        if !obj["metadata"].is_object() {
            obj["metadata"] = json!({});
        }
        if r.namespaced {
            match obj["metadata"]["namespace"].as_str() {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => obj["metadata"]["namespace"] = json!(ns),
            }
            self.check_namespace(r, ns)?;
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        let mut name = name;
        if name.is_empty()
            && let Some(prefix) = obj["metadata"]["generateName"].as_str()
        {
            name = format!("{prefix}{}", ids::name_suffix());
            obj["metadata"]["name"] = json!(name);
        }
        let storage = resources::get(r.storage());
        obj["apiVersion"] = json!(storage.api_version());
        obj["kind"] = json!(storage.kind);
        let meta = obj["metadata"]
            .as_object_mut()
            .expect("made an object above");
        for k in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        ] {
            meta.remove(k);
        }
        meta.insert("uid".into(), json!(ids::uid()));
        meta.insert("creationTimestamp".into(), json!(ids::now()));
        admission::prepare_create(storage, &mut obj)?;
        if storage.group.is_empty() && storage.plural == "pods" {
            self.check_service_account(ns, &obj)?;
        }
        match fields {
            Some(f) => obj["metadata"]["managedFields"] = f,
            None => managed::record_update(
                None,
                &mut obj,
                &ctx.manager,
                None,
                &storage.api_version(),
                &ids::now(),
            ),
        }
        if storage.create_only || ctx.dry_run {
            return Ok(view(r, &obj));
        }
        let ns_key = if r.namespaced { ns } else { "" };
        let stored = self
            .store
            .write_shared(r.storage(), ns_key, &name, |current, _| {
                if current.is_some() {
                    return Err(ApiError::already_exists(r, &name));
                }
                Ok(Write::Put(obj))
            })?;
        if storage.group.is_empty() && storage.plural == "namespaces" {
            super::controllers::namespaces::populate(self, &name);
        }
        Ok(view(r, &stored))
    }

    /// PUT: replace the object (or its status with `sub == Some("status")`).
    pub fn update(
        &self,
        rid: Rid,
        ns: &str,
        name: &str,
        body: Value,
        sub: Option<&str>,
        ctx: &WriteCtx,
    ) -> ApiResult<Value> {
        let r = resources::get(rid);
        let body_name = meta_str(&body, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let body_ns = meta_str(&body, "namespace");
        if r.namespaced && !body_ns.is_empty() && body_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let expected_rv = match meta_str(&body, "resourceVersion") {
            "" => None,
            s => Some(parse_rv(s)?),
        };
        self.replace(r, ns, name, sub, ctx, expected_rv, move |_| Ok(body))
    }

    /// The shared update path: `make` turns the current object (as the client sees it) into
    /// the requested one; everything after that is the API server's.
    #[allow(clippy::too_many_arguments)]
    fn replace(
        &self,
        r: &Resource,
        ns: &str,
        name: &str,
        sub: Option<&str>,
        ctx: &WriteCtx,
        expected_rv: Option<u64>,
        make: impl FnOnce(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Value> {
        let storage = resources::get(r.storage());
        let ns_key = if r.namespaced { ns } else { "" };
        let dry_run = ctx.dry_run;
        let mut dry_result = None;
        // The claim resize plugin reads StorageClasses; the store is locked while the update
        // is decided, so they are read first.
        let resized_claim =
            sub.is_none() && storage.group.is_empty() && storage.plural == "persistentvolumeclaims";
        let classes = if resized_claim {
            let sc = resources::find("storage.k8s.io", "v1", "storageclasses").unwrap_or_default();
            self.store.list(sc, None, |_| true).0
        } else {
            Vec::new()
        };
        let stored = self.store.write(r.storage(), ns_key, name, |current, _| {
            let old = current.ok_or_else(|| ApiError::not_found(r, name))?;
            let old_rv = meta_str(old, "resourceVersion")
                .parse::<u64>()
                .unwrap_or_default();
            if expected_rv.is_some_and(|e| e != old_rv) {
                return Err(ApiError::conflict(r, name));
            }
            let requested = make(&view(r, old))?;
            // A patch or update that carries another version than the stored one is stale.
            if let Some(rv) = requested["metadata"]["resourceVersion"].as_str()
                && !rv.is_empty()
                && rv != meta_str(old, "resourceVersion")
            {
                return Err(ApiError::conflict(r, name));
            }
            let client_fields = requested["metadata"].get("managedFields").cloned();
            let mut new = if r.storage_of.is_some() {
                events::to_core(&requested)
            } else {
                requested
            };
            new["apiVersion"] = json!(storage.api_version());
            new["kind"] = json!(storage.kind);
            if !new["metadata"].is_object() {
                new["metadata"] = json!({});
            }
            new["metadata"]["name"] = json!(name);
            if r.namespaced {
                new["metadata"]["namespace"] = json!(ns);
            }
            if storage.status {
                if sub == Some("status") {
                    let mut merged = old.clone();
                    merged["metadata"] = new["metadata"].clone();
                    merged["status"] = new.get("status").cloned().unwrap_or(json!({}));
                    new = merged;
                } else {
                    match old.get("status") {
                        Some(s) => new["status"] = s.clone(),
                        None => {
                            if let Some(m) = new.as_object_mut() {
                                m.remove("status");
                            }
                        }
                    }
                }
            }
            admission::prepare_update(storage, old, &mut new, sub)?;
            if resized_claim {
                claim_resize::admit(name, old, &new, &classes)?;
            }
            // Ownership: an apply has set it already; a client may rewrite it on purpose
            // (kubectl does, when moving from client-side to server-side apply); otherwise
            // the writer takes over the fields it changed.
            let old_fields = old["metadata"].get("managedFields").cloned();
            let rewritten = client_fields.is_some() && client_fields != old_fields;
            if !ctx.apply && !rewritten {
                match &old_fields {
                    Some(f) => new["metadata"]["managedFields"] = f.clone(),
                    None => {
                        if let Some(m) = new["metadata"].as_object_mut() {
                            m.remove("managedFields");
                        }
                    }
                }
            }
            // An update that changes nothing keeps the version (and its watchers quiet).
            if same_but_version(&new, old) {
                return Ok(Write::Unchanged(old.clone()));
            }
            if !ctx.apply && !rewritten {
                managed::record_update(
                    Some(old),
                    &mut new,
                    &ctx.manager,
                    sub,
                    &storage.api_version(),
                    &ids::now(),
                );
            }
            if dry_run {
                dry_result = Some(new);
                return Ok(Write::Unchanged(old.clone()));
            }
            if old["metadata"].get("deletionTimestamp").is_some() && !has_finalizers(&new) {
                return Ok(Write::Delete(old.clone()));
            }
            Ok(Write::Put(new))
        })?;
        Ok(view(r, &dry_result.unwrap_or(stored)))
    }

    /// PATCH with one of the four patch types (apply creates when the object is missing).
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        rid: Rid,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        sub: Option<&str>,
        ctx: &WriteCtx,
    ) -> ApiResult<(u16, Value)> {
        let r = resources::get(rid);
        let ctype = content_type.split(';').next().unwrap_or_default().trim();
        let parse_json = || -> ApiResult<Value> {
            serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))
        };
        match ctype {
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                return self.apply(r, ns, name, body, sub, ctx);
            }
            "application/merge-patch+json"
            | "application/json-patch+json"
            | "application/strategic-merge-patch+json" => {}
            _ => {
                return Err(ApiError::new(
                    415,
                    Some("UnsupportedMediaType"),
                    "415: Unsupported Media Type",
                )
                .with_details(json!({})));
            }
        }
        let p = parse_json()?;
        let expected_rv = match p
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
        {
            Some(s) if !s.is_empty() && ctype != "application/json-patch+json" => {
                Some(parse_rv(s)?)
            }
            _ => None,
        };
        let ctype = ctype.to_owned();
        let obj = self.replace(r, ns, name, sub, ctx, expected_rv, move |current| {
            let mut doc = current.clone();
            match ctype.as_str() {
                "application/merge-patch+json" => patch::merge_patch(&mut doc, &p),
                "application/json-patch+json" => patch::json_patch(&mut doc, &p)?,
                _ => patch::strategic_merge(&mut doc, &p),
            }
            Ok(doc)
        })?;
        Ok((200, obj))
    }

    fn apply(
        &self,
        r: &Resource,
        ns: &str,
        name: &str,
        body: &[u8],
        sub: Option<&str>,
        ctx: &WriteCtx,
    ) -> ApiResult<(u16, Value)> {
        if !ctx.manager_given || ctx.manager.is_empty() {
            return Err(ApiError::new(
                422,
                Some("Invalid"),
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            )
            .with_details(json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                {"reason": "FieldValueRequired", "field": "fieldManager", "message": "Required value: is required for apply patch"}]})));
        }
        let config: Value = serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        let api_version = config["apiVersion"].as_str().unwrap_or_default();
        let kind = config["kind"].as_str().unwrap_or_default();
        if api_version != r.api_version() || kind != r.kind {
            let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            return Err(ApiError::bad_request(format!(
                "invalid object type: {g}/{v}, Kind={kind}"
            )));
        }
        let expected_rv = match meta_str(&config, "resourceVersion") {
            "" => None,
            s => Some(parse_rv(s)?),
        };
        let conflicts_error = |conflicts: Vec<managed::Conflict>| {
            let n = conflicts.len();
            let message = if n == 1 {
                format!(
                    "Apply failed with 1 conflict: conflict with \"{}\": {}",
                    conflicts[0].manager, conflicts[0].field
                )
            } else {
                let lines: Vec<String> = conflicts
                    .iter()
                    .map(|c| format!("conflict with \"{}\": {}", c.manager, c.field))
                    .collect();
                format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
            };
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| json!({"reason": "FieldManagerConflict", "field": c.field, "message": format!("conflict with \"{}\"", c.manager)}))
                .collect();
            ApiError::new(409, Some("Conflict"), message).with_details(json!({"causes": causes}))
        };
        let ns_key = if r.namespaced { ns } else { "" };
        let exists = self.store.get(r.storage(), ns_key, name).is_some();
        if !exists {
            if expected_rv.is_some() {
                return Err(ApiError::not_found(r, name));
            }
            let created = managed::apply(
                &json!({"metadata": {}}),
                &config,
                &ctx.manager,
                ctx.force,
                &r.api_version(),
                &ids::now(),
            )
            .map_err(conflicts_error)?;
            let mut body = created;
            let fields = body["metadata"]
                .as_object_mut()
                .and_then(|m| m.remove("managedFields"));
            body["metadata"]["name"] = json!(name);
            let obj = self.create_with_fields(r_id(r), ns, body, ctx, fields)?;
            return Ok((201, obj));
        }
        let manager = ctx.manager.clone();
        let force = ctx.force;
        let api_version = r.api_version();
        let mut conflicts = None;
        let apply_ctx = WriteCtx {
            apply: true,
            ..ctx.clone()
        };
        let result = self.replace(r, ns, name, sub, &apply_ctx, expected_rv, |current| {
            let attempt = |force| {
                managed::apply(current, &config, &manager, force, &api_version, &ids::now())
            };
            match attempt(force) {
                Ok(v) => Ok(v),
                // Fields a client-side apply recorded in last-applied-configuration
                // pass to the server-side applier, as kubectl's upgrade expects.
                Err(c) if c.iter().all(|x| in_last_applied(current, x)) => {
                    attempt(true).map_err(|c| {
                        conflicts = Some(c);
                        ApiError::internal("apply conflict")
                    })
                }
                Err(c) => {
                    conflicts = Some(c);
                    Err(ApiError::internal("apply conflict"))
                }
            }
        });
        match (result, conflicts) {
            (_, Some(c)) => Err(conflicts_error(c)),
            (result, None) => result.map(|obj| (200, obj)),
        }
    }

    pub fn delete(&self, rid: Rid, ns: &str, name: &str, opts: &DeleteOpts) -> ApiResult<Deleted> {
        let r = resources::get(rid);
        let invalid_opts = |cause: Cause| {
            ApiError::new(422, Some("Invalid"), format!("DeleteOptions.meta.k8s.io \"\" is invalid: {}: {}", cause.field, cause.message))
                .with_details(json!({"group": "meta.k8s.io", "kind": "DeleteOptions",
                    "causes": [{"reason": cause.reason, "field": cause.field, "message": cause.message}]}))
        };
        if let Some(p) = &opts.propagation {
            if !["Foreground", "Background", "Orphan"].contains(&p.as_str()) {
                return Err(invalid_opts(Cause::new(
                    "FieldValueNotSupported",
                    "propagationPolicy",
                    format!(
                        "Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
                    ),
                )));
            }
            if opts.orphan_dependents.is_some() {
                return Err(invalid_opts(Cause::new(
                    "FieldValueInvalid",
                    "propagationPolicy",
                    format!(
                        "Invalid value: \"{p}\": orphanDependents and deletionPropagation cannot be both set"
                    ),
                )));
            }
        }
        let mut warnings = Vec::new();
        let policy = match (&opts.propagation, opts.orphan_dependents) {
            (Some(p), _) => p.clone(),
            (None, Some(true)) => "Orphan".into(),
            (None, Some(false)) => "Background".into(),
            (None, None) if r.group == "batch" && r.plural == "jobs" => {
                warnings.push("child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning".into());
                "Orphan".into()
            }
            (None, None) => "Background".into(),
        };
        let ns_key = if r.namespaced { ns } else { "" };
        let is_pod = r.group.is_empty() && r.plural == "pods";
        let is_namespace = r.group.is_empty() && r.plural == "namespaces";
        let mut removed = false;
        let stored = self.store.write(r.storage(), ns_key, name, |current, _| {
            let cur = current.ok_or_else(|| ApiError::not_found(r, name))?;
            if let Some(uid) = &opts.precondition_uid
                && uid != meta_str(cur, "uid")
            {
                return Err(ApiError::precondition(r, name, &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                    meta_str(cur, "uid")
                )));
            }
            if let Some(rv) = &opts.precondition_rv
                && rv != meta_str(cur, "resourceVersion")
            {
                return Err(ApiError::precondition(r, name, &format!(
                    "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                    meta_str(cur, "resourceVersion")
                )));
            }
            if opts.dry_run {
                return Ok(Write::Unchanged(cur.clone()));
            }
            if cur["metadata"].get("deletionTimestamp").is_some() && !(is_pod && opts.grace_period == Some(0)) {
                return Ok(Write::Unchanged(cur.clone()));
            }
            let mut next = cur.clone();
            let mut add_finalizer = |f: &str| {
                let list = next["metadata"]
                    .as_object_mut()
                    .map(|m| m.entry("finalizers").or_insert_with(|| json!([])));
                if let Some(Value::Array(l)) = list
                    && !l.iter().any(|x| x == f)
                {
                    l.push(json!(f));
                }
            };
            match policy.as_str() {
                "Foreground" => add_finalizer("foregroundDeletion"),
                "Orphan" => add_finalizer("orphan"),
                _ => {}
            }
            if is_namespace {
                next["metadata"]["deletionTimestamp"] = json!(ids::now());
                next["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                next["status"]["phase"] = json!("Terminating");
                return Ok(Write::Put(next));
            }
            let pod_running = is_pod
                && cur.pointer("/spec/nodeName").is_some_and(|n| !n.is_null())
                && !matches!(cur.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
            let grace = opts.grace_period.unwrap_or_else(|| {
                cur.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30)
            });
            if has_finalizers(&next) || (pod_running && grace > 0) {
                if next["metadata"].get("deletionTimestamp").is_none() {
                    next["metadata"]["deletionTimestamp"] = json!(ids::now());
                    next["metadata"]["deletionGracePeriodSeconds"] = json!(if pod_running { grace } else { 0 });
                }
                return Ok(Write::Put(next));
            }
            removed = true;
            Ok(Write::Delete(cur.clone()))
        })?;
        let body = if removed || (opts.dry_run && !has_finalizers(&stored)) {
            success_status(r, name, meta_str(&stored, "uid"))
        } else {
            view(r, &stored)
        };
        Ok(Deleted { body, warnings })
    }

    /// The binding subresource: what the scheduler posts to place a pod.
    pub fn bind_pod(&self, ns: &str, name: &str, node: &str) -> ApiResult<Value> {
        let pods = resources::find("", "v1", "pods").unwrap_or_default();
        let r = resources::get(pods);
        let stored = self.store.write(pods, ns, name, |current, _| {
            let cur = current.ok_or_else(|| ApiError::not_found(r, name))?;
            if cur
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            {
                return Err(ApiError::conflict(r, name));
            }
            let mut next = cur.clone();
            next["spec"]["nodeName"] = json!(node);
            set_condition(&mut next, "PodScheduled", "True", None, None);
            Ok(Write::Put(next))
        })?;
        Ok(stored)
    }
}

/// Whether a conflict is the hand-over from client-side apply: the field is in the object's
/// last-applied-configuration, and the manager it conflicts with is the one that wrote that
/// annotation (the real server forgives exactly those).
fn in_last_applied(obj: &Value, conflict: &managed::Conflict) -> bool {
    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
    let Some(text) = obj["metadata"]["annotations"][LAST_APPLIED].as_str() else {
        return false;
    };
    let Ok(last) = serde_json::from_str::<Value>(text) else {
        return false;
    };
    let annotation_path: Vec<String> = ["metadata", "annotations", LAST_APPLIED]
        .map(str::to_owned)
        .to_vec();
    let wrote_annotation = managed::read(obj)
        .iter()
        .any(|e| e.manager == conflict.manager && e.paths.contains(&annotation_path));
    let path: Vec<String> = conflict
        .field
        .trim_start_matches('.')
        .split('.')
        .map(str::to_owned)
        .collect();
    wrote_annotation && managed::leaf_paths(&last, false).contains(&path)
}

fn r_id(r: &Resource) -> Rid {
    resources::find(r.group, r.version, r.plural).unwrap_or_default()
}

/// `namespace/name` (or `name`), the order lists come in and continue tokens point into.
fn object_key(obj: &Value) -> String {
    format!("{}/{}", meta_str(obj, "namespace"), meta_str(obj, "name"))
}

fn encode_continue(rv: u64, key: &str) -> String {
    use base64::Engine;
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": key}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> ApiResult<String> {
    use base64::Engine;
    let bad = |c: char| {
        ApiError::bad_request(format!(
            "invalid continue token: continue key is not valid: invalid character '{c}' looking for beginning of value"
        ))
    };
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    // Lenient like Go's decoder: garbage decodes to bytes, and JSON reports the first one.
    let lenient = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let first = token.chars().next().unwrap_or(' ');
    let bytes = lenient.decode(token).map_err(|_| bad(first))?;
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|_| bad(bytes.first().map_or(' ', |b| *b as char)))?;
    v["start"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| bad(first))
}

/// Sets a status condition (type, status, reason, message), keeping its transition time
/// when the status does not change.
pub fn set_condition(
    obj: &mut Value,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
) {
    if !obj["status"].is_object() {
        obj["status"] = json!({});
    }
    let conditions = obj["status"]
        .as_object_mut()
        .expect("made an object above")
        .entry("conditions")
        .or_insert_with(|| json!([]));
    let Value::Array(list) = conditions else {
        return;
    };
    let mut c = json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": ids::now()});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    match list.iter_mut().find(|x| x["type"] == type_) {
        Some(existing) => {
            if existing["status"] == status {
                c["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = c;
        }
        None => list.push(c),
    }
}
