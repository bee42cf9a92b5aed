//! Prometheus metrics: the sig-storage library's names and the CSI snapshotter's (so
//! existing dashboards work), and our own under `flex_provisioner_`. Labels are bounded: class names and error categories,
//! never object names or messages.

use flex_core::names::{ANN_STORAGE_CLASS, LABEL_ACTION, annotation, label};
use flex_core::plan::NoticeKind;
use k8s_openapi::api::batch::v1::Job;
use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry};

pub struct Metrics {
    pub registry: Registry,
    pub provision_total: IntCounterVec,
    pub provision_failed_total: IntCounterVec,
    pub provision_duration: HistogramVec,
    pub delete_total: IntCounterVec,
    pub delete_failed_total: IntCounterVec,
    pub delete_duration: HistogramVec,
    pub active_jobs: IntGaugeVec,
    pub config_errors_total: IntCounterVec,
    pub reconcile_errors_total: IntCounterVec,
    pub reconciles_total: IntCounterVec,
    pub snapshot_calls: HistogramVec,
    /// The `driver_name` of `snapshot_calls`: the provisioner's name, which snapshot classes
    /// name as their driver.
    driver: String,
}

fn registered<T: prometheus::core::Collector + Clone + 'static>(registry: &Registry, m: T) -> T {
    registry
        .register(Box::new(m.clone()))
        .expect("unique metric");
    m
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registered(registry, c)
}

fn histogram(registry: &Registry, name: &str, help: &str) -> HistogramVec {
    let buckets = vec![1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0];
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), &["class"])
        .expect("valid metric");
    registered(registry, h)
}

/// The CSI snapshotter's operation histogram, with its buckets (csi-lib-utils), so its
/// dashboards and alerts read ours.
fn snapshot_calls(registry: &Registry) -> HistogramVec {
    let buckets = vec![
        0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
    ];
    let help = "Snapshot and delete-snapshot Jobs, as the CSI snapshotter's calls, by gRPC status";
    let opts = HistogramOpts::new("csi_sidecar_operations_seconds", help).buckets(buckets);
    let labels = ["driver_name", "method_name", "grpc_status_code"];
    registered(
        registry,
        HistogramVec::new(opts, &labels).expect("valid metric"),
    )
}

impl Metrics {
    /// The metrics of the provisioner called `driver`.
    pub fn new(driver: &str) -> Self {
        let registry = Registry::new();
        let help = "Provisioning and deprovisioning Jobs running now";
        let active_jobs = IntGaugeVec::new(
            Opts::new("flex_provisioner_active_jobs", help),
            &["class", "action"],
        );
        let active_jobs = registered(&registry, active_jobs.expect("valid metric"));
        Metrics {
            provision_total: counter(
                &registry,
                "controller_persistentvolumeclaim_provision_total",
                "Volumes provisioned",
                &["class"],
            ),
            provision_failed_total: counter(
                &registry,
                "controller_persistentvolumeclaim_provision_failed_total",
                "Failed provisioning attempts",
                &["class"],
            ),
            provision_duration: histogram(
                &registry,
                "controller_persistentvolumeclaim_provision_duration_seconds",
                "From claim creation to a verified volume",
            ),
            delete_total: counter(
                &registry,
                "controller_persistentvolume_delete_total",
                "Volumes deprovisioned",
                &["class"],
            ),
            delete_failed_total: counter(
                &registry,
                "controller_persistentvolume_delete_failed_total",
                "Failed deprovisioning attempts",
                &["class"],
            ),
            delete_duration: histogram(
                &registry,
                "controller_persistentvolume_delete_duration_seconds",
                "From the first deprovision Job to the storage gone",
            ),
            config_errors_total: counter(
                &registry,
                "flex_provisioner_config_errors_total",
                "Configuration problems reported on ConfigMaps",
                &["class"],
            ),
            reconcile_errors_total: counter(
                &registry,
                "flex_provisioner_reconcile_errors_total",
                "Reconcile errors by category",
                &["category"],
            ),
            reconciles_total: counter(
                &registry,
                "flex_provisioner_reconciles_total",
                "Reconciles finished (or failed), by object: claim or volume",
                &["object"],
            ),
            active_jobs,
            snapshot_calls: snapshot_calls(&registry),
            driver: driver.to_owned(),
            registry,
        }
    }
}

/// Seconds from `since` until now; never negative (the API server's clock may run ahead).
fn seconds_since(since: jiff::Timestamp) -> f64 {
    let d = jiff::Timestamp::now().duration_since(since);
    d.as_secs_f64().max(0.0)
}

/// Every metric moves here, through these methods.
impl Metrics {
    /// A notice told for the first time, counted by its kind; a success is also timed from
    /// `created` (the claim's creation), a snapshot Job's end from the Job's creation. Timed before counted, and both before the event
    /// is published: a scrape that sees the count sees its duration too.
    pub fn count_notice(&self, kind: NoticeKind, class: &str, created: Option<jiff::Timestamp>) {
        let counter = match kind {
            NoticeKind::Provisioned => {
                if let Some(t) = created {
                    let duration = self.provision_duration.with_label_values(&[class]);
                    duration.observe(seconds_since(t));
                }
                &self.provision_total
            }
            NoticeKind::ProvisionFailed => &self.provision_failed_total,
            NoticeKind::DeleteFailed => &self.delete_failed_total,
            NoticeKind::SnapshotCall(call) => {
                let labels = [self.driver.as_str(), call.method(), call.status.grpc_code()];
                if let Some(seconds) = call.seconds(jiff::Timestamp::now()) {
                    self.snapshot_calls
                        .with_label_values(&labels)
                        .observe(seconds);
                }
                return;
            }
            NoticeKind::Other => return,
        };
        counter.with_label_values(&[class]).inc();
    }

    /// A volume's storage is gone: timed from `since` (its first deprovision Job), when
    /// there is one, then counted, in that order for the reason `count_notice` gives.
    pub fn count_deleted(&self, class: &str, since: Option<jiff::Timestamp>) {
        if let Some(t) = since {
            let duration = self.delete_duration.with_label_values(&[class]);
            duration.observe(seconds_since(t));
        }
        self.delete_total.with_label_values(&[class]).inc();
    }

    /// The errors found in a version of a class's ConfigMap.
    pub fn count_config_errors(&self, class: &str, errors: usize) {
        let errors = u64::try_from(errors).unwrap_or(u64::MAX);
        self.config_errors_total
            .with_label_values(&[class])
            .inc_by(errors);
    }

    /// A failed reconcile, by the bounded category of its error.
    pub fn count_reconcile_error(&self, category: &str) {
        self.reconcile_errors_total
            .with_label_values(&[category])
            .inc();
    }

    pub fn count_reconcile(&self, object: &str) {
        self.reconciles_total.with_label_values(&[object]).inc();
    }

    /// Sets the active-Jobs gauge from every Job of ours, by class and action.
    pub fn count_active_jobs(&self, jobs: &[std::sync::Arc<Job>]) {
        self.active_jobs.reset();
        for job in jobs {
            if flex_core::job::outcome(job, &[]) != flex_core::job::JobOutcome::Running {
                continue;
            }
            let meta = &job.metadata;
            let class = annotation(meta, ANN_STORAGE_CLASS).unwrap_or_default();
            let action = label(meta, LABEL_ACTION).unwrap_or_default();
            self.active_jobs.with_label_values(&[class, action]).inc();
        }
    }

    /// The text exposition format for `/metrics`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let encoder = prometheus::TextEncoder::new();
        let _ = encoder.encode_utf8(&self.registry.gather(), &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flex_core::plan::snapshot_call::{CallStatus, SnapshotCall};

    #[test]
    fn a_snapshot_jobs_end_is_the_csi_snapshotters_series() {
        let m = Metrics::new("flex.example.com/hostpath");
        let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(3);
        let call = |delete, status| {
            NoticeKind::SnapshotCall(SnapshotCall {
                delete,
                status,
                started: Some(started),
                ended: None,
            })
        };
        m.count_notice(call(false, CallStatus::Ok), "fast", None);
        m.count_notice(call(false, CallStatus::DeadlineExceeded), "fast", None);
        m.count_notice(call(true, CallStatus::Ok), "", None);
        let text = m.render();
        let series = |method: &str, code: &str| {
            format!(
                "csi_sidecar_operations_seconds_count{{driver_name=\"flex.example.com/hostpath\",grpc_status_code=\"{code}\",method_name=\"/csi.v1.Controller/{method}\"}} 1"
            )
        };
        for (method, code) in [
            ("CreateSnapshot", "OK"),
            ("CreateSnapshot", "DeadlineExceeded"),
            ("DeleteSnapshot", "OK"),
        ] {
            assert!(
                text.contains(&series(method, code)),
                "{method} {code}:\n{text}"
            );
        }
        // Timed from the Job's creation: three seconds ago falls in the 5 s bucket, not 2.5.
        let bucket = |le: &str| {
            format!(
                "csi_sidecar_operations_seconds_bucket{{driver_name=\"flex.example.com/hostpath\",grpc_status_code=\"OK\",method_name=\"/csi.v1.Controller/CreateSnapshot\",le=\"{le}\"}}"
            )
        };
        assert!(text.contains(&format!("{} 0", bucket("2.5"))), "{text}");
        assert!(text.contains(&format!("{} 1", bucket("5"))), "{text}");
        // Not a provisioning count.
        assert!(!text.contains("controller_persistentvolumeclaim_provision_total{"));
    }
}
