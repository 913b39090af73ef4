//! `recorder`: inspect, filter and produce JFR recordings (files of chunks or chunk repositories).
//!
//! `main` only decides exit codes: 0 ok, 1 problems found (reserved), 2 error. A closed stdout
//! (`recorder print rec.jfr | head`) is success.

mod args;
mod commands;
mod demo_workload;
mod fold;
mod json;
mod render;
mod source;
mod time;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run(args::Cli::parse()) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

/// What a command found: everything was read, or some input was damaged (already reported on
/// stderr, one line per problem).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// All input was read.
    Clean,
    /// Part of the input could not be read; the rest was processed.
    Damaged,
}

fn run(cli: args::Cli) -> anyhow::Result<ExitCode> {
    let outcome = match cli.command {
        args::Command::Summary(a) => commands::summary::run(&a.into_config())?,
        args::Command::Print(a) => commands::print::run(&a.into_config())?,
        args::Command::Dump(a) => commands::dump::run(&a.into_config()?)?,
        args::Command::Top(a) => commands::top::run(&a.into_config()?)?,
        args::Command::Demo(a) => commands::demo::run(&a)?,
        args::Command::Repair(a) => commands::repair::run(&a)?,
    };
    Ok(match outcome {
        Outcome::Clean => ExitCode::SUCCESS,
        Outcome::Damaged => ExitCode::from(2),
    })
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}
