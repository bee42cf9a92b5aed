//! The expansion planner, case by case.
use super::*;
use crate::recipe::JobRecipe;
use serde_json::json;
use std::collections::BTreeMap;

const P: &str = "flex-provisioner.io/job";
const NOW: &str = "2026-01-01T00:10:00Z";

fn claim(request: &str, capacity: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "a", "uid": "u1", "resourceVersion": "7"},
        "spec": {"volumeName": "pvc-u1", "resources": {"requests": {"storage": request}}},
        "status": {"phase": "Bound", "capacity": {"storage": capacity},
                   "conditions": [{"type": "Other", "status": "True"}]}}))
    .unwrap()
}

fn pv(capacity: &str, by: &str) -> PersistentVolume {
    serde_json::from_value(json!({
        "metadata": {"name": "pvc-u1", "uid": "pv1", "resourceVersion": "9",
                     "annotations": {"pv.kubernetes.io/provisioned-by": by}},
        "spec": {"capacity": {"storage": capacity}, "claimRef": {"namespace": "a", "name": "data", "uid": "u1"}}}))
    .unwrap()
}

fn record() -> Record {
    let recipe: JobRecipe = serde_json::from_value(json!({"namespace": "cfg", "config": "cfg/c",
        "image": "img:1", "timeoutSeconds": 60, "retries": 0, "permanentExitCodes": [2]}))
    .unwrap();
    Record {
        recipe: recipe.clone(),
        expand: Some(JobRecipe {
            image: "grow:1".into(),
            ..recipe
        }),
        parameters: BTreeMap::from([("dir".into(), "/v/a".into())]),
    }
}

fn job(attempt: u32, bytes: u64, status: Value) -> Job {
    serde_json::from_value(json!({"metadata": {"name": format!("expand-u1-{attempt}"), "uid": format!("j{attempt}"),
        "labels": {"flex-provisioner.io/attempt": attempt.to_string(), "flex-provisioner.io/size": bytes.to_string()}},
        "status": status}))
    .unwrap()
}

const TWO_GI: u64 = 2 << 30;

fn inputs<'a>(
    claim: &'a PersistentVolumeClaim,
    pv: &'a PersistentVolume,
    jobs: Vec<&'a Job>,
    record: Option<Result<Record, crate::record::RecordError>>,
) -> ExpandInputs<'a> {
    ExpandInputs {
        claim,
        pv: Some(pv),
        provisioner_name: P,
        class_allows: true,
        jobs,
        pods: vec![],
        record,
        retry_base: Duration::from_secs(10),
        ttl_seconds: 600,
        now: NOW.parse().unwrap(),
    }
}

/// The plan, where the planner has what it needs.
fn plan_expand(i: ExpandInputs<'_>) -> ExpandPlan {
    super::plan_expand(i).expect("decided without asking")
}

#[test]
fn nothing_to_do_unless_a_bound_claim_of_ours_asks_for_more() {
    let (c, v) = (claim("1Gi", "1Gi"), pv("1Gi", P));
    assert_eq!(
        plan_expand(inputs(&c, &v, vec![], None)).step,
        ExpandStep::Ignore
    );
    let grown = claim("2Gi", "1Gi");
    let theirs = pv("1Gi", "other.io/x");
    assert_eq!(
        plan_expand(inputs(&grown, &theirs, vec![], None)).step,
        ExpandStep::Ignore
    );
    let mut no_switch = inputs(&grown, &v, vec![], None);
    no_switch.class_allows = false;
    assert_eq!(plan_expand(no_switch).step, ExpandStep::Ignore);
}

#[test]
fn a_grown_claim_reads_the_record_then_starts_a_job_and_marks_the_claim() {
    let (c, v) = (claim("2Gi", "1Gi"), pv("1Gi", P));
    assert_eq!(
        super::plan_expand(inputs(&c, &v, vec![], None)),
        Err(Ask::Record)
    );
    let p = plan_expand(inputs(&c, &v, vec![], Some(Ok(record()))));
    let ExpandStep::Start { job, status } = p.step else {
        panic!("a Job: {:?}", p.step)
    };
    let j = serde_json::to_value(&job).unwrap();
    assert_eq!(j["metadata"]["name"], "expand-u1");
    assert_eq!(
        j["metadata"]["labels"]["flex-provisioner.io/size"],
        TWO_GI.to_string()
    );
    let env = &j["spec"]["template"]["spec"]["containers"][0]["env"];
    let var = |n: &str| {
        env.as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .map(|e| e["value"].clone())
    };
    assert_eq!(var("ACTION"), Some(json!("expand")));
    assert_eq!(var("REQUESTED_BYTES"), Some(json!(TWO_GI.to_string())));
    assert_eq!(var("REQUESTED_SIZE"), Some(json!("2Gi")));
    assert_eq!(var("DIR"), Some(json!("/v/a")));
    assert_eq!(
        j["spec"]["template"]["spec"]["containers"][0]["image"],
        "grow:1"
    );
    assert_eq!(status["metadata"]["resourceVersion"], "7");
    assert_eq!(status["status"]["allocatedResources"]["storage"], "2Gi");
    assert_eq!(
        status["status"]["allocatedResourceStatuses"]["storage"],
        RESIZE_IN_PROGRESS
    );
    let types: Vec<&str> = status["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Other", "Resizing"]);
    assert_eq!(p.notices[0].reason, reasons::RESIZING);
}

#[test]
fn a_record_without_an_expansion_recipe_blocks_with_a_warning() {
    let (c, v) = (claim("2Gi", "1Gi"), pv("1Gi", P));
    let mut r = record();
    r.expand = None;
    let p = plan_expand(inputs(&c, &v, vec![], Some(Ok(r))));
    assert_eq!(p.step, ExpandStep::Blocked);
    assert_eq!(p.notices[0].reason, reasons::RESIZE_FAILED);
    assert!(
        p.notices[0].message.contains("no expansion recipe"),
        "{}",
        p.notices[0].message
    );
}

#[test]
fn a_succeeded_job_grows_the_pv_then_finishes_the_claim() {
    let (c, v) = (claim("2Gi", "1Gi"), pv("1Gi", P));
    let done = job(
        1,
        TWO_GI,
        json!({"conditions": [{"type": "Complete", "status": "True"}]}),
    );
    let p = plan_expand(inputs(&c, &v, vec![&done], None));
    let ExpandStep::Finish {
        pv_patch: Some(pv_patch),
        status,
    } = p.step
    else {
        panic!("finish: {:?}", p.step)
    };
    assert_eq!(pv_patch["spec"]["capacity"]["storage"], "2Gi");
    assert_eq!(pv_patch["metadata"]["resourceVersion"], "9");
    assert_eq!(status["status"]["capacity"]["storage"], "2Gi");
    assert_eq!(status["status"]["allocatedResourceStatuses"], Value::Null);
    assert_eq!(
        status["status"]["conditions"],
        json!([{"type": "Other", "status": "True"}])
    );
    assert_eq!(p.notices[0].reason, reasons::RESIZE_SUCCESSFUL);
    // The PV already grown (the claim's status not written yet): only the status.
    let grown = pv("2Gi", P);
    let p = plan_expand(inputs(&c, &grown, vec![&done], None));
    assert!(
        matches!(p.step, ExpandStep::Finish { pv_patch: None, .. }),
        "{:?}",
        p.step
    );
}

#[test]
fn failures_back_off_and_permanent_ones_mark_the_claim_infeasible() {
    let (c, v) = (claim("2Gi", "1Gi"), pv("1Gi", P));
    let failed = |reason: &str| {
        job(
            1,
            TWO_GI,
            json!({"conditions": [{"type": "Failed", "status": "True", "reason": reason,
            "message": "lvextend: no space", "lastTransitionTime": "2026-01-01T00:09:55Z"}]}),
        )
    };
    let transient = failed("BackoffLimitExceeded");
    let p = plan_expand(inputs(&c, &v, vec![&transient], None));
    assert_eq!(p.step, ExpandStep::Wait(Duration::from_secs(5)));
    assert_eq!(p.notices[0].reason, reasons::RESIZE_FAILED);
    assert!(
        p.notices[0].message.contains("lvextend: no space"),
        "{}",
        p.notices[0].message
    );
    let permanent = failed("PodFailurePolicy");
    let p = plan_expand(inputs(&c, &v, vec![&permanent], None));
    let ExpandStep::Fail { status } = p.step else {
        panic!("{:?}", p.step)
    };
    assert_eq!(
        status["status"]["allocatedResourceStatuses"]["storage"],
        RESIZE_INFEASIBLE
    );
    // Once the claim shows it, nothing more is written or started for that size, also
    // after the failed Job is gone.
    let mut marked = claim("2Gi", "1Gi");
    let st = marked.status.as_mut().unwrap();
    st.allocated_resources = Some(BTreeMap::from([(
        "storage".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("2Gi".into()),
    )]));
    st.allocated_resource_statuses = Some(BTreeMap::from([(
        "storage".into(),
        RESIZE_INFEASIBLE.into(),
    )]));
    assert_eq!(
        plan_expand(inputs(&marked, &v, vec![&permanent], None)).step,
        ExpandStep::Ignore
    );
    assert_eq!(
        plan_expand(inputs(&marked, &v, vec![], Some(Ok(record())))).step,
        ExpandStep::Ignore
    );
    // The user lowers the request (still above the capacity): a new attempt at once.
    let lowered = claim("1536Mi", "1Gi");
    let p = plan_expand(inputs(&lowered, &v, vec![&permanent], Some(Ok(record()))));
    let ExpandStep::Start { job, status } = p.step else {
        panic!("{:?}", p.step)
    };
    assert_eq!(job.metadata.name.as_deref(), Some("expand-u1-2"));
    assert_eq!(status["status"]["allocatedResources"]["storage"], "1536Mi");
}

#[test]
fn a_running_job_is_waited_for_whatever_its_size() {
    let (c, v) = (claim("3Gi", "1Gi"), pv("1Gi", P));
    let running = job(1, TWO_GI, json!({"active": 1}));
    assert_eq!(
        plan_expand(inputs(&c, &v, vec![&running], Some(Ok(record())))).step,
        ExpandStep::Wait(RUNNING_RECHECK)
    );
}

#[test]
fn each_failed_pod_is_told_with_its_own_message() {
    let (c, v) = (claim("2Gi", "1Gi"), pv("1Gi", P));
    let running = job(1, TWO_GI, json!({"active": 1}));
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "expand-u1-x", "uid": "p1",
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "expand-u1", "uid": "j1"}]},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "provisioner", "image": "i", "imageID": "",
            "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "message": "grow: pool busy"}}}]}}))
    .unwrap();
    let mut i = inputs(&c, &v, vec![&running], None);
    i.pods = vec![&pod];
    let p = plan_expand(i);
    assert_eq!(p.step, ExpandStep::Wait(RUNNING_RECHECK));
    assert_eq!(p.notices.len(), 1);
    assert_eq!(p.notices[0].reason, reasons::RESIZE_FAILED);
    assert!(
        p.notices[0]
            .message
            .contains("exit code 1: grow: pool busy"),
        "{}",
        p.notices[0].message
    );
}
