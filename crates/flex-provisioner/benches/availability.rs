//! How much hostile claims slow everyone else's: each scenario of `crates/flex-testing/src/hostile.rs`
//! (twenty claims held mid-Job by their authors' finalizers; an attempt of four billion on
//! failing claims, with a standby waiting) times a burst of healthy claims alone and beside
//! the hostile claims, `RUNS` times (default 3), and prints both.
//!
//! The target: beside the hostile claims, the controller's share of the slowest claim's way
//! to Bound (claim to Job, Job completion to PV) is within that share alone plus `SLACK`
//! seconds (default 10); on the sandbox, where the rest of the way is simulated, the whole
//! burst too. On a real control plane the rest is kube-controller-manager's, whose one
//! client the hostile claims' own Jobs share as any user's do: the whole burst is only held
//! to twice the time alone plus 30 s. The benchmark exits non-zero when a run misses it.
//!
//! `cargo bench --bench availability` runs on the sandbox; with `FLEX_E2E_K8S=../shared/k8s`
//! on a real control plane.

use flex_testing as common;

use std::time::Duration;

use common::burst_timing::BurstTimes;
use common::hostile::{Comparison, four_billion_beside_a_standby, twenty_held_mid_job};
use common::provisioning::sandbox;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `beside` is within the target of `alone`, and if not, why.
fn judge(
    real: bool,
    slack: Duration,
    alone: &BurstTimes,
    beside: &BurstTimes,
) -> Result<(), String> {
    if beside.slowest() > alone.slowest() + slack {
        return Err(format!(
            "the controller's share of a claim: up to {:.1?} beside, {:.1?} alone",
            beside.slowest(),
            alone.slowest()
        ));
    }
    let whole = if real {
        alone.wall * 2 + Duration::from_secs(30)
    } else {
        alone.wall + slack
    };
    if beside.wall > whole {
        return Err(format!(
            "all Bound in {:.1?} beside, {:.1?} alone",
            beside.wall, alone.wall
        ));
    }
    Ok(())
}

fn main() {
    let runs = env_number("RUNS", 3);
    let slack = Duration::from_secs(env_number("SLACK", 10));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let mut missed = 0;
    for run in 1..=runs {
        for scenario in ["twenty claims held mid-Job", "an attempt of four billion"] {
            let (real, times): (bool, Comparison) = rt.block_on(async {
                let sb = sandbox().await;
                let times = if scenario.starts_with("twenty") {
                    twenty_held_mid_job(&sb).await
                } else {
                    four_billion_beside_a_standby(&sb).await
                };
                (sb.is_real(), times)
            });
            let verdict = judge(real, slack, &times.alone, &times.beside);
            println!(
                "run {run}, {scenario}:\n  alone:  {}\n  beside: {}\n  {}",
                times.alone,
                times.beside,
                match &verdict {
                    Ok(()) => "within the target".to_owned(),
                    Err(why) => format!("MISSED: {why}"),
                }
            );
            missed += usize::from(verdict.is_err());
        }
    }
    if missed > 0 {
        eprintln!("{missed} of {} runs missed the target", runs * 2);
        std::process::exit(1);
    }
}
