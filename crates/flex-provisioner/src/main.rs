//! Entry point: parse the command line, set up logging, dispatch.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use flex_provisioner::cli::{Cli, Command, RenderAction, VolumeCommand};
use flex_provisioner::offline::{RenderInput, SnapshotJob, check_files, render_files};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line with the whole cause chain; these are user errors, not crashes.
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// SIGTERM (what the kubelet sends at a rollout or drain) or Ctrl-C.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down: the controller stops acting and releases its lease");
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            // One thread: a profile of a 100-claim burst on a real control plane showed a
            // fifth of the controller's CPU in handing watch data and replies between the
            // thread that polled the controllers and the runtime's workers (futex wake-ups,
            // context switches). The work is I/O-bound; rendering runs on the blocking pool
            // and the Lease on a thread of its own (`leader.rs`), so nothing here waits on a
            // busy worker. See docs/architecture.md, "Where the CPU goes".
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(async {
                let config = kube::Config::infer()
                    .await
                    .context("cannot reach the Kubernetes API (set KUBECONFIG, or run in a pod)")?;
                if args.kube_api_burst < args.kube_api_qps {
                    anyhow::bail!(
                        "--kube-api-burst ({}) must be at least --kube-api-qps ({})",
                        args.kube_api_burst,
                        args.kube_api_qps
                    );
                }
                let limits = flex_controller::throttle::Limits {
                    qps: args.kube_api_qps,
                    burst: args.kube_api_burst,
                };
                // The lease thread connects on its own (see `leader::Holder`).
                let lease_connection = config.clone();
                let mut config = config;
                if !args.no_leader_elect {
                    // A write passes the fence before its connection is made: a connection
                    // slower than the margin between the renew deadline and the lease's end
                    // fails, rather than landing once another instance may lead.
                    let margin = std::time::Duration::from_secs(
                        args.lease_seconds
                            .saturating_sub(args.renew_deadline_seconds),
                    );
                    config.connect_timeout =
                        Some(config.connect_timeout.map_or(margin, |t| t.min(margin)));
                }
                let client = flex_controller::throttle::client(config)
                    .context("cannot build the Kubernetes API client")?;
                let secs = std::time::Duration::from_secs;
                let leader =
                    (!args.no_leader_elect).then(|| flex_controller::leader::LeaderOptions {
                        lease_duration: secs(args.lease_seconds),
                        renew_deadline: secs(args.renew_deadline_seconds),
                        retry_period: secs(args.retry_period_seconds),
                        connection: Some(lease_connection),
                        ..flex_controller::leader::LeaderOptions::new(
                            &args.namespace,
                            "flex-provisioner",
                            &unique_identity(&args.instance),
                        )
                    });
                if let Some(l) = &leader {
                    l.validate()
                        .map_err(|e| anyhow::anyhow!("leader election timings: {e}"))?;
                }
                let opts = flex_controller::controller::Options {
                    provisioner_name: args.common.provisioner_name,
                    config_namespaces: args.config_namespaces,
                    controller_namespace: args.namespace,
                    controller_service_account: args.service_account,
                    job_ttl_seconds: args.job_ttl,
                    retry_base: std::time::Duration::from_secs(args.retry_base_seconds),
                    instance: args.instance,
                    metrics_addr: Some(args.metrics_addr),
                    leader,
                    api_limits: Some(limits),
                    snapshot_api_recheck: flex_controller::controller::SNAPSHOT_API_RECHECK,
                };
                flex_controller::controller::run_until(client, opts, shutdown_signal())
                    .await
                    .context("the controller stopped")
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Volume(VolumeCommand::Source(args)) => {
            match flex_provisioner::volume_source::field(&args.volume, args.field) {
                Ok(value) => {
                    println!("{value}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(why) => Ok(image_failure(&format!("volume source: {why}"), 2)),
            }
        }
        Command::Volume(VolumeCommand::Create(args)) => {
            let runtime =
                tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            Ok(runtime.block_on(volume_create(args)))
        }
        Command::Render(args) => {
            let out = render_files(&RenderInput {
                config: args.config,
                class: args.class,
                claim: args.claim,
                node: args.node,
                provisioner_name: args.common.provisioner_name,
                attempt: args.attempt,
                ttl_seconds: args.job_ttl,
                expand_to: (args.action == flex_provisioner::cli::RenderAction::Expand)
                    .then_some(args.size)
                    .flatten(),
                snapshot: match args.action {
                    RenderAction::Snapshot => Some(SnapshotJob::Take),
                    RenderAction::DeleteSnapshot => Some(SnapshotJob::Delete),
                    _ => None,
                },
            })
            .context("render failed")?;
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "sandbox")]
        Command::Sandbox(args) => {
            let runtime =
                tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            runtime
                .block_on(flex_provisioner::sandbox_cmd::run(&args))
                .context("sandbox failed")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check(args) => {
            let report = check_files(&args.files, &args.classes, &args.common.provisioner_name);
            for line in &report.lines {
                println!("{line}");
            }
            println!("{}", report.summary());
            let failed = report.errors > 0 || (args.strict && report.warnings > 0);
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

/// Exit codes follow the image contract: 0 done, 2 permanent, 1 transient.
async fn volume_create(args: flex_provisioner::cli::VolumeCreateArgs) -> ExitCode {
    use flex_provisioner::volume_create::{VolumeCreateError, build, create, report};
    let termination_log = termination_log();
    if args.pv_creator == "controller" {
        return match build(&args.template, &args.source)
            .and_then(|_| report(&args.source, &termination_log))
        {
            Ok(()) => {
                println!("volume source reported; the provisioner creates the PersistentVolume");
                ExitCode::SUCCESS
            }
            Err(e) => image_failure(
                &format!("volume create: {e}"),
                if e.permanent() { 2 } else { 1 },
            ),
        };
    }
    let result = async {
        let pv = build(&args.template, &args.source)?;
        let client = kube::Client::try_default()
            .await
            .map_err(VolumeCreateError::Api)?;
        let name = pv.metadata.name.clone().unwrap_or_default();
        create(client, &pv).await.map(|created| (name, created))
    }
    .await;
    match result {
        Ok((name, true)) => {
            println!("persistentvolume/{name} created");
            ExitCode::SUCCESS
        }
        Ok((name, false)) => {
            println!("persistentvolume/{name} already exists for this claim");
            ExitCode::SUCCESS
        }
        Err(e) => image_failure(
            &format!("volume create: {e}"),
            if e.permanent() { 2 } else { 1 },
        ),
    }
}

/// Where an image's message for users goes (`$TERMINATION_LOG`, else the kubelet's default).
fn termination_log() -> String {
    std::env::var("TERMINATION_LOG")
        .unwrap_or_else(|_| flex_core::names::TERMINATION_MESSAGE_PATH.to_owned())
}

/// A helper run inside an image failed: the message goes to stderr and to the termination
/// log (what users read in events), and the exit code says permanent (2) or transient (1).
fn image_failure(message: &str, code: u8) -> ExitCode {
    eprintln!("{message}");
    let _ = std::fs::write(termination_log(), message);
    ExitCode::from(code)
}

/// The leader identity: the instance name plus a random suffix, as client-go's hostname plus
/// a UUID. Two processes with the same instance name (no `POD_NAME` set) must never both
/// believe they hold the Lease.
fn unique_identity(instance: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    format!("{instance}_{:016x}", h.finish())
}
