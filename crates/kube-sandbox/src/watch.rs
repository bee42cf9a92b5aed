//! Watch streams: replay from a resourceVersion (or an initial listing), then live changes,
//! with selector enter/leave semantics, bookmarks, timeouts and 410 Gone as an ERROR event.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, watch};

use super::api::{Api, view};
use super::resources::{self, Rid};
use super::selector::{FieldSelector, LabelSelector};
use super::status::{ApiError, ApiResult};
use super::store::{Change, EventType};

pub struct WatchParams {
    pub rid: Rid,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub resource_version: Option<String>,
    pub send_initial_events: bool,
    pub bookmarks: bool,
    pub timeout: Option<Duration>,
}

fn line(kind: &str, object: &Value) -> Bytes {
    let mut s = json!({"type": kind, "object": object}).to_string();
    s.push('\n');
    Bytes::from(s)
}

struct Filter {
    rid: Rid,
    storage: Rid,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        let r = resources::get(self.rid);
        let v = view(r, obj);
        self.namespace
            .as_deref()
            .is_none_or(|ns| v["metadata"]["namespace"].as_str() == Some(ns))
            && self.labels.matches_object(&v)
            && self.fields.matches(&v)
    }

    /// The event this watcher sees for a change, if any.
    fn translate(&self, c: &Change) -> Option<(&'static str, Value)> {
        if c.rid != self.storage {
            return None;
        }
        let r = resources::get(self.rid);
        let now = self.matches(&c.object);
        match c.event {
            EventType::Added => now.then(|| ("ADDED", view(r, &c.object))),
            EventType::Deleted => now.then(|| ("DELETED", view(r, &c.object))),
            EventType::Modified => {
                let before = c.old.as_ref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => Some(("MODIFIED", view(r, &c.object))),
                    (false, true) => Some(("ADDED", view(r, &c.object))),
                    (true, false) => {
                        let mut old = view(r, c.old.as_ref().expect("matched above"));
                        old["metadata"]["resourceVersion"] = json!(c.rv.to_string());
                        Some(("DELETED", old))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

/// Starts a watch; errors that happen before the stream opens are returned as such.
pub fn start(
    api: Arc<Api>,
    mut closer: watch::Receiver<u64>,
    p: WatchParams,
) -> ApiResult<mpsc::Receiver<Bytes>> {
    let r = resources::get(p.rid);
    let rv = p.resource_version.clone().filter(|s| !s.is_empty());
    let from = match rv.as_deref() {
        None | Some("0") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            ApiError::internal(format!(
                "resourceVersion: Invalid value: \"{s}\": strconv.ParseUint: parsing \"{s}\": invalid syntax"
            ))
        })?),
    };
    let filter = Filter {
        rid: p.rid,
        storage: r.storage(),
        namespace: p.namespace.clone(),
        labels: p.labels,
        fields: p.fields,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(1024);
    let mut initial: Vec<Bytes> = Vec::new();
    let (mut live, mut last_rv): (broadcast::Receiver<Arc<Change>>, u64) = match from {
        Some(from) if !p.send_initial_events => match api.store.watch_from(from) {
            Ok((replay, live)) => {
                let mut last = from;
                for c in replay {
                    last = c.rv;
                    if let Some((kind, obj)) = filter.translate(&c) {
                        initial.push(line(kind, &obj));
                    }
                }
                (live, last)
            }
            Err(compacted) => {
                let gone =
                    ApiError::gone(format!("too old resource version: {from} ({compacted})"));
                let msg = line("ERROR", &gone.to_status());
                tokio::spawn(async move {
                    let _ = tx.send(msg).await;
                });
                return Ok(rx);
            }
        },
        _ => {
            let (items, at, live) = api
                .store
                .snapshot_and_subscribe(filter.storage, p.namespace.as_deref());
            for obj in items.iter().filter(|o| filter.matches(o)) {
                initial.push(line("ADDED", &view(r, obj)));
            }
            if p.send_initial_events {
                let bookmark = json!({"kind": r.kind, "apiVersion": r.api_version(),
                    "metadata": {"resourceVersion": at.to_string(),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}});
                initial.push(line("BOOKMARK", &bookmark));
            }
            (live, at)
        }
    };
    let bookmark_every = Duration::from_secs(60);
    let timeout = p.timeout;
    let wants_bookmarks = p.bookmarks;
    let kind = r.kind;
    let api_version = r.api_version();
    let store_api = api.clone();
    tokio::spawn(async move {
        for msg in initial {
            if tx.send(msg).await.is_err() {
                return;
            }
        }
        let started = tokio::time::Instant::now();
        let deadline = timeout.map(|t| started + t);
        // The real server sends a bookmark shortly before a timed watch ends.
        let mut next_bookmark = match timeout {
            Some(t) if t > Duration::from_secs(2) => started + t - Duration::from_secs(2),
            _ => started + bookmark_every,
        };
        let closed_at = *closer.borrow_and_update();
        loop {
            let until_deadline = deadline.map_or(Duration::from_secs(3600), |d| {
                d.saturating_duration_since(tokio::time::Instant::now())
            });
            tokio::select! {
                msg = live.recv() => match msg {
                    Ok(c) => {
                        if c.rv <= last_rv {
                            continue;
                        }
                        last_rv = c.rv;
                        if let Some((kind, obj)) = filter.translate(&c)
                            && tx.send(line(kind, &obj)).await.is_err()
                        {
                            return;
                        }
                    }
                    // Fell too far behind: end the stream; the client re-watches from its
                    // last version (or relists after 410), as with a real server.
                    Err(_) => return,
                },
                _ = tokio::time::sleep_until(next_bookmark), if wants_bookmarks => {
                    let rv = store_api.store.current_rv().max(last_rv);
                    let bookmark = json!({"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": rv.to_string()}});
                    if tx.send(line("BOOKMARK", &bookmark)).await.is_err() {
                        return;
                    }
                    next_bookmark += bookmark_every;
                }
                _ = tokio::time::sleep(until_deadline) => {
                    if deadline.is_some() {
                        return;
                    }
                }
                changed = closer.changed() => {
                    if changed.is_err() || *closer.borrow() != closed_at {
                        return;
                    }
                }
            }
        }
    });
    Ok(rx)
}
