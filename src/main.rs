//! Entry point: parse the command line, set up logging, dispatch.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use flex_provisioner::cli::{Cli, Command};
use flex_provisioner::offline::{RenderInput, check_files, render_files};

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

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Render(args) => {
            let out = render_files(&RenderInput {
                config: args.config,
                class: args.class,
                claim: args.claim,
                node: args.node,
                provisioner_name: args.common.provisioner_name,
                attempt: args.attempt,
                ttl_seconds: args.job_ttl,
            })
            .context("render failed")?;
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Sandbox(args) => {
            let runtime =
                tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            runtime
                .block_on(flex_provisioner::sandbox::cli::run(&args))
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
