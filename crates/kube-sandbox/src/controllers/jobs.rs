//! The Job controller, as provisioners see it: pods from the template (standard labels,
//! controller ownerReference, tracking finalizer), retries up to backoffLimit with a
//! growing delay, activeDeadlineSeconds, podFailurePolicy, the two-step conditions of the
//! real controller (FailureTarget then Failed, SuccessCriteriaMet then Complete), events,
//! and deletion after ttlSecondsAfterFinished.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Feed, Throttle, is_deleting, name_of, ns_of, rid, uid_of};
use crate::api::{Api, DeleteOpts, WriteCtx, set_condition};
use crate::ids;

const COMPONENT: &str = "job-controller";
const TRACKING: &str = "batch.kubernetes.io/job-tracking";
const MAX_BACKOFF: Duration = Duration::from_secs(360);

struct Jobs {
    jobs: usize,
    pods: usize,
    base_backoff: Duration,
    throttle: Throttle,
    /// When each job last saw a pod fail, to delay the replacement.
    last_failure: HashMap<String, (usize, Instant)>,
    /// Per Job uid, when this controller set its `startTime`, to the instant. The stored
    /// `startTime` has whole seconds; the real controller times `activeDeadlineSeconds`
    /// from its own clock reading (its requeue), so a Job never fails up to a second early.
    started: HashMap<String, Instant>,
}

fn condition_true(job: &Value, type_: &str) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

fn phase(p: &Value) -> &str {
    p["status"]["phase"].as_str().unwrap_or_default()
}

fn exit_code(pod: &Value, container: Option<&str>) -> Option<(String, i64)> {
    pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|cs| {
            let name = cs["name"].as_str().unwrap_or_default();
            if container.is_some_and(|c| c != name) {
                return None;
            }
            cs["state"]["terminated"]["exitCode"]
                .as_i64()
                .map(|c| (name.to_owned(), c))
        })
}

fn has_condition(pod: &Value, type_: &str) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

/// What the pod failure policy says of one failed pod.
enum Verdict {
    FailJob(String),
    Ignore,
    Count,
}

fn judge(job: &Value, pod: &Value) -> Verdict {
    let rules = job["spec"]["podFailurePolicy"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        let matched = if let Some(on) = rule.get("onExitCodes").filter(|v| !v.is_null()) {
            let values: Vec<i64> = on["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_i64)
                .collect();
            exit_code(pod, on["containerName"].as_str()).and_then(|(c, code)| {
                let hit = match on["operator"].as_str() {
                    Some("In") => values.contains(&code),
                    Some("NotIn") => code != 0 && !values.contains(&code),
                    _ => false,
                };
                hit.then_some((c, code))
            })
        } else {
            let hit = rule["onPodConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|p| has_condition(pod, p["type"].as_str().unwrap_or_default()));
            hit.then(|| (String::new(), 0))
        };
        let Some((container, code)) = matched else {
            continue;
        };
        return match rule["action"].as_str() {
            Some("FailJob") => Verdict::FailJob(format!(
                "Container {container} for pod {}/{} failed with exit code {code} matching FailJob rule at index {i}",
                ns_of(pod),
                name_of(pod)
            )),
            Some("Ignore") => Verdict::Ignore,
            _ => Verdict::Count,
        };
    }
    Verdict::Count
}

impl Jobs {
    async fn write_status(&self, api: &Api, job: &Value, f: impl Fn(&mut Value)) {
        self.throttle
            .modify(api, self.jobs, ns_of(job), name_of(job), f)
            .await;
    }

    async fn event(&self, api: &Api, job: &Value, type_: &str, reason: &str, message: &str) {
        self.throttle
            .event(api, job, type_, reason, message, COMPONENT)
            .await;
    }

    /// Every tracked or owned pod by its controlling Job's uid, in one pass over the pods:
    /// one scan per batch rather than one per Job keeps a burst of Jobs linear.
    /// Only the pods of `jobs` (uids) are copied.
    fn pods_by_owner(&self, api: &Api, jobs: &HashSet<&str>) -> HashMap<String, Vec<Value>> {
        let owner = |pod: &Value| {
            pod["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["controller"] == true)
                .and_then(|r| r["uid"].as_str())
                .filter(|uid| jobs.contains(uid))
                .map(str::to_owned)
        };
        let mut by_owner: HashMap<String, Vec<Value>> = HashMap::new();
        for pod in api.store.list(self.pods, None, |p| owner(p).is_some()).0 {
            if let Some(uid) = owner(&pod) {
                by_owner.entry(uid).or_default().push(pod);
            }
        }
        by_owner
    }

    async fn release_pod(&self, api: &Api, pod: &Value) {
        let tracked = pod["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == TRACKING));
        if !tracked {
            return;
        }
        self.throttle
            .modify(api, self.pods, ns_of(pod), name_of(pod), |next| {
                if let Some(list) = next["metadata"]["finalizers"].as_array_mut() {
                    list.retain(|f| f != TRACKING);
                }
            })
            .await;
    }

    async fn delete_pod(&self, api: &Api, job: &Value, pod: &Value) {
        let opts = DeleteOpts {
            propagation: Some("Background".into()),
            ..Default::default()
        };
        self.throttle.wait().await;
        if api
            .delete(self.pods, ns_of(pod), name_of(pod), &opts)
            .is_ok()
        {
            self.event(
                api,
                job,
                "Normal",
                "SuccessfulDelete",
                &format!("Deleted pod: {}", name_of(pod)),
            )
            .await;
        }
    }

    /// Adds `first` then `last` as True conditions, in two writes as the real controller does.
    async fn conclude(
        &self,
        api: &Api,
        job: &Value,
        first: &str,
        last: &str,
        reason: &str,
        message: &str,
    ) {
        self.write_status(api, job, |j| {
            set_condition(j, first, "True", Some(reason), Some(message))
        })
        .await;
        self.write_status(api, job, |j| {
            set_condition(j, last, "True", Some(reason), Some(message))
        })
        .await;
    }

    async fn fail_job(&self, api: &Api, job: &Value, reason: &str, message: &str) {
        self.conclude(api, job, "FailureTarget", "Failed", reason, message)
            .await;
        self.event(api, job, "Warning", reason, message).await;
    }

    async fn fail_with(
        &self,
        api: &Api,
        job: &Value,
        active: &[&Value],
        reason: &str,
        message: &str,
    ) {
        for p in active {
            self.delete_pod(api, job, p).await;
        }
        self.fail_job(api, job, reason, message).await;
    }

    async fn complete_job(&self, api: &Api, job: &Value) {
        let message = "Reached expected number of succeeded pods";
        self.write_status(api, job, |j| {
            set_condition(
                j,
                "SuccessCriteriaMet",
                "True",
                Some("CompletionsReached"),
                Some(message),
            )
        })
        .await;
        self.write_status(api, job, |j| {
            set_condition(
                j,
                "Complete",
                "True",
                Some("CompletionsReached"),
                Some(message),
            );
            j["status"]["completionTime"] = json!(ids::now());
        })
        .await;
        self.event(api, job, "Normal", "Completed", "Job completed")
            .await;
    }

    async fn create_pod(&self, api: &Api, job: &Value) {
        let template = &job["spec"]["template"];
        let pod = json!({
            "metadata": {
                "generateName": format!("{}-", name_of(job)),
                "labels": template["metadata"]["labels"],
                "annotations": template["metadata"].get("annotations").cloned().unwrap_or(json!({})),
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name_of(job),
                                     "uid": uid_of(job), "controller": true, "blockOwnerDeletion": true}],
                "finalizers": [TRACKING],
            },
            "spec": template["spec"],
        });
        self.throttle.wait().await;
        let (type_, reason, message) = match api.create(
            self.pods,
            ns_of(job),
            pod,
            &WriteCtx::manager("kube-controller-manager"),
        ) {
            Ok(p) => (
                "Normal",
                "SuccessfulCreate",
                format!("Created pod: {}", name_of(&p)),
            ),
            Err(e) => (
                "Warning",
                "FailedCreate",
                format!("Error creating: {}", e.message),
            ),
        };
        self.event(api, job, type_, reason, &message).await;
    }

    /// `pods`: the pods this Job controls, as the batch began.
    async fn reconcile(&mut self, api: &Api, job: &Value, pods: Vec<Value>) {
        // A Job being deleted lets go of its finished or stopping pods, so the collector
        // can remove them (and then the Job, in foreground deletion).
        if is_deleting(job) {
            for p in pods
                .iter()
                .filter(|p| matches!(phase(p), "Succeeded" | "Failed") || is_deleting(p))
            {
                self.release_pod(api, p).await;
            }
            return;
        }
        if job["spec"]["suspend"] == true {
            return;
        }
        let finished = condition_true(job, "Complete") || condition_true(job, "Failed");
        if finished {
            for p in &pods {
                if matches!(phase(p), "Succeeded" | "Failed") || is_deleting(p) {
                    self.release_pod(api, p).await;
                }
            }
            self.expire(api, job).await;
            return;
        }
        if job["status"]["startTime"].is_null() {
            self.started.insert(uid_of(job).to_owned(), Instant::now());
            self.write_status(api, job, |j| j["status"]["startTime"] = json!(ids::now()))
                .await;
        }
        let succeeded = pods.iter().filter(|p| phase(p) == "Succeeded").count();
        let mut failed_jobs_verdict = None;
        let mut failed = 0;
        for p in pods.iter().filter(|p| phase(p) == "Failed") {
            match judge(job, p) {
                Verdict::FailJob(m) => {
                    failed += 1;
                    failed_jobs_verdict.get_or_insert(m);
                }
                Verdict::Ignore => {}
                Verdict::Count => failed += 1,
            }
        }
        let active: Vec<&Value> = pods
            .iter()
            .filter(|p| !matches!(phase(p), "Succeeded" | "Failed") && !is_deleting(p))
            .collect();
        let uid = uid_of(job).to_owned();
        let entry = self
            .last_failure
            .entry(uid.clone())
            .or_insert((0, Instant::now()));
        if failed > entry.0 {
            *entry = (failed, Instant::now());
        }
        let last_failure = *entry;
        let completions = job["spec"]["completions"].as_u64().unwrap_or(1) as usize;
        let backoff_limit = job["spec"]["backoffLimit"].as_u64().unwrap_or(6) as usize;
        let deadline = job["spec"]["activeDeadlineSeconds"].as_f64();
        let started = match self.started.get(&uid) {
            Some(at) => at.elapsed().as_secs_f64(),
            None => ids::seconds_since(job["status"]["startTime"].as_str().unwrap_or_default())
                .unwrap_or(0.0),
        };
        let counted_failed = failed;
        self.write_status(api, job, |j| {
            let s = &mut j["status"];
            for (k, v) in [
                ("active", active.len()),
                ("succeeded", succeeded),
                ("failed", counted_failed),
            ] {
                if v == 0 {
                    if let Some(m) = s.as_object_mut() {
                        m.remove(k);
                    }
                } else {
                    s[k] = json!(v);
                }
            }
            s["ready"] = json!(0);
            s["terminating"] = json!(0);
            s["uncountedTerminatedPods"] = json!({});
        })
        .await;
        if let Some(message) = failed_jobs_verdict {
            self.fail_with(api, job, &active, "PodFailurePolicy", &message)
                .await;
        } else if failed > backoff_limit {
            self.fail_with(
                api,
                job,
                &active,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
            .await;
        } else if deadline.is_some_and(|d| started >= d) {
            let extra = active.len();
            self.write_status(api, job, |j| {
                let f = j["status"]["failed"].as_u64().unwrap_or(0) as usize + extra;
                j["status"]["failed"] = json!(f.max(1));
                if let Some(m) = j["status"].as_object_mut() {
                    m.remove("active");
                }
            })
            .await;
            self.fail_with(
                api,
                job,
                &active,
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            )
            .await;
        } else if succeeded >= completions {
            self.complete_job(api, job).await;
        } else if active.is_empty() {
            let wait = if failed == 0 {
                Duration::ZERO
            } else {
                (self.base_backoff * 2u32.saturating_pow(failed as u32 - 1)).min(MAX_BACKOFF)
            };
            if last_failure.1.elapsed() >= wait {
                self.create_pod(api, job).await;
            }
        }
        for p in pods
            .iter()
            .filter(|p| matches!(phase(p), "Succeeded" | "Failed"))
        {
            self.release_pod(api, p).await;
        }
    }

    /// Deletes a finished Job (foreground, so its pods go first) once its TTL has passed.
    async fn expire(&self, api: &Api, job: &Value) {
        if expired(job) {
            let opts = DeleteOpts {
                propagation: Some("Foreground".into()),
                ..Default::default()
            };
            self.throttle.wait().await;
            let _ = api.delete(self.jobs, ns_of(job), name_of(job), &opts);
        }
    }
}

/// Whether a finished Job's ttlSecondsAfterFinished has passed.
fn expired(job: &Value) -> bool {
    let Some(ttl) = job["spec"]["ttlSecondsAfterFinished"].as_f64() else {
        return false;
    };
    let finished_at = job["status"]["completionTime"].as_str().or_else(|| {
        job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Failed")
            .and_then(|c| c["lastTransitionTime"].as_str())
    });
    finished_at
        .and_then(ids::seconds_since)
        .is_some_and(|s| s >= ttl)
}

pub async fn run(api: Arc<Api>, base_backoff: Duration, throttle: Throttle) {
    let mut jobs = Jobs {
        jobs: rid("batch", "jobs"),
        pods: rid("", "pods"),
        base_backoff,
        throttle,
        last_failure: HashMap::new(),
        started: HashMap::new(),
    };
    let interests = vec![jobs.jobs, jobs.pods];
    let mut feed = Feed::new(&api, interests, Duration::from_millis(250));
    loop {
        let changes = feed.next().await;
        let api: &Api = &api;
        {
            // Only the touched Jobs are copied; a resync (empty batch) touches them all.
            let uids: HashSet<String> = changes
                .iter()
                .flat_map(|c| {
                    let own = (c.rid == jobs.jobs).then(|| uid_of(&c.object).to_owned());
                    let owners = c.object["metadata"]["ownerReferences"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|r| r["uid"].as_str().map(str::to_owned))
                        .collect::<Vec<_>>();
                    own.into_iter().chain(owners)
                })
                .collect();
            // A resync is for time-based work (backoff, deadline, TTL); a finished Job has
            // none until its TTL has passed, and the changes of its pods touch it when it has
            // work. Copying every finished Job at each resync made a burst's cost grow with
            // the square of its Jobs.
            let resync = changes.is_empty();
            let wanted = |j: &Value| {
                if resync {
                    let finished = condition_true(j, "Complete") || condition_true(j, "Failed");
                    !finished || is_deleting(j) || expired(j)
                } else {
                    uids.contains(uid_of(j))
                }
            };
            let touched: Vec<(String, String, String)> = api.store.pick(jobs.jobs, |j| {
                wanted(j).then(|| {
                    (
                        ns_of(j).to_owned(),
                        name_of(j).to_owned(),
                        uid_of(j).to_owned(),
                    )
                })
            });
            let touched_uids: HashSet<&str> = touched.iter().map(|(_, _, u)| u.as_str()).collect();
            let mut pods = jobs.pods_by_owner(api, &touched_uids);
            for (ns, name, _) in &touched {
                if let Some(current) = api.store.get(jobs.jobs, ns, name) {
                    let owned = pods.remove(uid_of(&current)).unwrap_or_default();
                    jobs.reconcile(api, &current, owned).await;
                }
            }
            let live: HashSet<String> = api
                .store
                .pick(jobs.jobs, |j| Some(uid_of(j).to_owned()))
                .into_iter()
                .collect();
            // Pods whose Job is gone are not tracked by anyone any more.
            let (orphans, _) = api.store.list(jobs.pods, None, |p| {
                p["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == TRACKING))
                    && !p["metadata"]["ownerReferences"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| {
                            r["controller"] == true
                                && r["uid"].as_str().is_some_and(|u| live.contains(u))
                        })
            });
            for p in &orphans {
                jobs.release_pod(api, p).await;
            }
            jobs.last_failure.retain(|k, _| live.contains(k));
            jobs.started.retain(|k, _| live.contains(k));
        }
    }
}
