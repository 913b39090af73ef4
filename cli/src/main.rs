//! `recorder`: inspect, filter and produce JFR recordings (files of chunks or chunk repositories).
//!
//! `main` only decides exit codes: 0 ok, 1 problems found (reserved), 2 error. A closed stdout
//! (`recorder print rec.jfr | head`) is success.

mod args;
mod commands;
mod demo_workload;
mod firefox;
mod fold;
mod frames;
mod json;
mod otlp;
mod pprof;
mod profile;
mod render;
mod selection;
mod source;
mod spans;
mod time;
mod timeline;

use clap::{CommandFactory, FromArgMatches};
use std::process::ExitCode;

fn main() -> ExitCode {
    let matches = args::Cli::command().get_matches();
    let cli = match args::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match run(cli, &matches) {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", error_text(&err));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes as one line, each said once. Library errors often include their
/// cause's text in their own (`cannot be used: No such file or directory`) and also return it as
/// `source()`; a context may repeat what the error under it says (`writing x.jfr` over `writing
/// x.jfr failed: ...`). A message contained in a kept outer one, or contained in an inner one, is
/// dropped.
fn error_text(err: &anyhow::Error) -> String {
    let messages: Vec<String> = err.chain().map(ToString::to_string).filter(|m| !m.is_empty()).collect();
    let mut kept: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let said_outside = kept.iter().any(|k| k.contains(m.as_str()));
        let said_inside = messages[i + 1..].iter().any(|inner| inner.contains(m.as_str()));
        if !said_outside && !said_inside {
            kept.push(m);
        }
    }
    kept.join(": ")
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

fn run(cli: args::Cli, matches: &clap::ArgMatches) -> anyhow::Result<ExitCode> {
    let outcome = match cli.command {
        // CMD's exit status is ours.
        args::Command::Record(a) => return commands::record::run(&a),
        args::Command::Summary(a) => commands::summary::run(&a.into_config())?,
        args::Command::Print(a) => commands::print::run(&a.into_config())?,
        args::Command::Dump(a) => commands::dump::run(&a.into_config(matches)?)?,
        args::Command::Diff(a) => commands::diff::run(&a)?,
        args::Command::Top(a) => commands::top::run(&a.into_config()?)?,
        args::Command::Demo(a) => commands::demo::run(&a)?,
        args::Command::Repair(a) => commands::repair::run(&a)?,
        args::Command::Push(a) => commands::push::run(a)?,
        args::Command::View(a) => commands::view::run(&a)?,
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

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn each_message_of_an_error_chain_is_said_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        // A library error whose text includes its source, which it also returns as source().
        #[derive(Debug)]
        struct Repo(std::io::Error);
        impl std::fmt::Display for Repo {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "repository /x cannot be used: {}", self.0)
            }
        }
        impl std::error::Error for Repo {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let err = anyhow::Error::new(Repo(io())).context("starting the recording");
        assert_eq!(error_text(&err), format!("starting the recording: repository /x cannot be used: {}", io()));
        // A context that the error under it repeats.
        let err = anyhow::anyhow!("writing /x.jfr failed: denied").context("writing /x.jfr");
        assert_eq!(error_text(&err), "writing /x.jfr failed: denied");
        // Distinct messages are all kept.
        let err = anyhow::anyhow!("denied").context("/x.jfr");
        assert_eq!(error_text(&err), "/x.jfr: denied");
    }
}
