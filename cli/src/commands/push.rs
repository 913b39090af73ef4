//! `recorder push`: posts finished chunks to Grafana Pyroscope with the library's uploader
//! (`recorder::push`), the same one a recording process runs with `RecorderBuilder::push`.

use crate::args::PushArgs;
use crate::Outcome;
use recorder::push::{push_path, PushError, PushEvent, PushOptions, PushTarget};
use std::io::Write;

pub fn run(args: PushArgs) -> anyhow::Result<Outcome> {
    let mut target = PushTarget::pyroscope(args.pyroscope).app_name(args.app).samples_only(args.samples_only);
    for (k, v) in args.labels {
        target = target.label(k, v);
    }
    if let Some(t) = args.tenant {
        target = target.tenant(t);
    }
    if let Some(user) = args.basic_auth_user {
        let password = std::env::var("RECORDER_PUSH_PASSWORD")
            .map_err(|_| anyhow::anyhow!("--basic-auth-user needs the password in RECORDER_PUSH_PASSWORD"))?;
        target = target.basic_auth(user, password);
    }
    let follow = args.follow.is_some();
    let path = args.follow.or(args.path).expect("clap requires PATH or --follow");
    let max_attempts = match (args.max_attempts, follow) {
        (Some(0), _) => anyhow::bail!("--max-attempts must be at least 1"),
        (Some(n), _) => Some(n),
        (None, true) => None,
        (None, false) => Some(5),
    };
    let on_event = |e: &PushEvent<'_>| {
        // Progress on stdout, problems on stderr; a closed stdout does not stop the uploads.
        let mut out = std::io::stdout().lock();
        match e {
            PushEvent::Posted { chunk, part, parts, jfr_bytes, body_bytes, samples, sample_rate, status } => {
                let part = if *parts > 1 { format!(" [{part}/{parts}]") } else { String::new() };
                let rate = sample_rate.map_or_else(|| "server default".to_owned(), |r| format!("{r} Hz"));
                let _ = writeln!(
                    out,
                    "posted   {chunk}{part}: {samples} samples at {rate}, {jfr_bytes} B of JFR as {body_bytes} B (HTTP {status})"
                );
            }
            PushEvent::NothingToPost { chunk } => {
                let _ = writeln!(out, "skipped  {chunk}: no samples Pyroscope reads");
            }
            PushEvent::Rejected { chunk, part, parts, error } => {
                eprintln!("rejected {chunk} [{part}/{parts}]: {error} (not retried)")
            }
            PushEvent::Unreadable { chunk, error } => eprintln!("skipped  {chunk}: {error}"),
            PushEvent::Failing { chunk, error } => eprintln!("failing  {chunk}: {error}; retrying with backoff"),
            PushEvent::Recovered { retries } => eprintln!("recovered after {retries} failed attempts"),
            PushEvent::Lost { chunk } => eprintln!("lost     {chunk}: deleted before it was posted"),
            PushEvent::Refused { error } => eprintln!("refused  {error}"),
            _ => {}
        }
    };
    let stats = match push_path(&target, &path, PushOptions { follow, max_attempts }, on_event) {
        Ok(stats) => stats,
        Err(PushError::Stopped { reason, stats }) => {
            anyhow::bail!(
                "uploads stopped: {reason}; {} uploads were posted before, the rest stays for the next run",
                stats.uploads
            )
        }
        Err(e) => return Err(e.into()),
    };
    println!(
        "{} chunks posted in {} uploads ({} B of JFR as {} B), {} without samples, {} rejected, {} retries",
        stats.chunks_posted,
        stats.uploads,
        stats.jfr_bytes,
        stats.bytes_sent,
        stats.chunks_without_profile,
        stats.rejected,
        stats.retries
    );
    Ok(if stats.rejected > 0 { Outcome::Damaged } else { Outcome::Clean })
}
