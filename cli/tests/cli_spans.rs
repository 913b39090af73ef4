//! `dump --by-span`, `top --by-span`, `dump --weight self-time` and the JSON scope tree, on a
//! recording this test makes with CPU-bound spans and scopes.

mod common;

use common::*;
use recorder::scope::Weight;
use recorder::tracing::RecorderLayer;
use recorder::Recorder;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

struct Made {
    file: PathBuf,
    /// The library's report of the same recording.
    scopes: recorder::ScopeReport,
}

/// CPU-bound spans (`request` > `parse` and `request` > `render`) sampled every millisecond, and
/// scopes inside them.
fn made() -> &'static Made {
    static MADE: OnceLock<Made> = OnceLock::new();
    MADE.get_or_init(|| {
        let _serial = serial();
        let dir = scratch_dir().join("spans");
        let _ = std::fs::remove_dir_all(&dir);
        // The layer before the recorder (the README's order): the recording's first written
        // sample decides whether samples carry `spanId`, and a flush may come soon after `start`
        // (CI: a busy machine delayed a layer created after `start` past it, and no sample had
        // its span).
        let subscriber = tracing_subscriber::registry().with(RecorderLayer::new());
        let rec = Recorder::builder().repository(&dir).sampling_period(Duration::from_millis(1)).start().unwrap();
        rec.register_current_thread().unwrap();
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..3 {
                let _r = tracing::info_span!("request").entered();
                {
                    let _p = tracing::info_span!("parse").entered();
                    recorder::scope!("tokenize");
                    spin_cpu(Duration::from_millis(40));
                }
                {
                    let _p = tracing::info_span!("render").entered();
                    spin_cpu(Duration::from_millis(60));
                }
            }
        });
        spin_cpu(Duration::from_millis(30)); // outside any span
        let file = dir.join("spans.jfr");
        rec.dump(&file).unwrap();
        let scopes = rec.scope_report();
        rec.stop().unwrap();
        Made { file, scopes }
    })
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn lines(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("no count: {l}"));
            (stack.to_owned(), n.parse().unwrap_or_else(|_| panic!("bad count: {l}")))
        })
        .collect()
}

/// `--by-span`: every sample once, under its span path; inferno reads it and counts the samples.
#[test]
fn collapsed_by_span_prefixes_the_span_path_and_inferno_counts_every_sample() {
    let m = made();
    let samples = jfr_summary_counts(&m.file)["jdk.ExecutionSample"];
    let text = recorder_ok(&["dump", s(&m.file), "--format", "collapsed", "--by-span"]);
    let parsed = lines(&text);
    let total: u64 = parsed.iter().map(|(_, n)| n).sum();
    assert_eq!(total, samples);
    let under = |prefix: &str| parsed.iter().filter(|(st, _)| st.starts_with(prefix)).map(|(_, n)| n).sum::<u64>();
    let parse = under("span:request;span:parse;");
    let render = under("span:request;span:render;");
    // 120 ms and 180 ms of CPU time: how many samples that gives depends on the sampling source
    // (a CPU timer is capped near the kernel's tick rate) and the load, not on us: some.
    assert!(parse > 0 && render > 0, "parse {parse}, render {render} of {samples}: {text}");
    // Without --by-span no line has a span frame.
    let plain = recorder_ok(&["dump", s(&m.file), "--format", "collapsed"]);
    // (A span frame is `span:NAME`; function names such as `tracing::span::Span::enter` are not.)
    let span_frame = |f: &str| f.starts_with("span:") && !f.starts_with("span::");
    assert!(!plain.lines().any(|l| l.split(';').any(span_frame)), "{plain}");
    // inferno reads it, and its root counts every sample.
    let mut svg = Vec::new();
    let mut options = inferno::flamegraph::Options::default();
    inferno::flamegraph::from_lines(&mut options, text.lines(), &mut svg).expect("inferno reads it");
    let svg = String::from_utf8(svg).unwrap();
    assert!(svg.contains(&format!("all ({samples} samples, 100%)")), "root total");
    assert!(svg.contains("span:render"));
}

/// `top --by-span`: the hottest spans by CPU samples.
#[test]
fn top_by_span_lists_the_hottest_spans() {
    let m = made();
    let text = recorder_ok(&["top", s(&m.file), "--once", "--by-span", "--window", "1h"]);
    let row = |name: &str| {
        text.lines().find(|l| l.ends_with(&format!("  {name}"))).unwrap_or_else(|| panic!("no row {name}: {text}"))
    };
    let pct =
        |line: &str, i: usize| line.split_whitespace().nth(i).unwrap().trim_end_matches('%').parse::<f64>().unwrap();
    let (request, render, parse) = (row("request"), row("render"), row("parse"));
    // request is the innermost span only between its children; every span sample is under it.
    assert!(pct(request, 0) < 5.0, "{text}");
    assert!(pct(request, 1) >= pct(render, 1) + pct(parse, 1) - 0.2, "{text}");
    assert!(pct(render, 0) > 0.0 && pct(parse, 0) > 0.0, "{text}");
    assert!(text.contains("[no span]"), "{text}");
}

/// `--weight self-time`: the scope tree in ns of self time, as the library reports it; a flame
/// graph of it; `--format json` carries the tree as its last line.
#[test]
fn self_time_weight_and_json_tree_follow_the_scope_tree() {
    let m = made();
    let text = recorder_ok(&["dump", s(&m.file), "--format", "collapsed", "--weight", "self-time"]);
    let mut ours: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut library: Vec<String> = m.scopes.collapsed(Weight::SelfTime).lines().map(str::to_owned).collect();
    ours.sort();
    library.sort();
    assert_eq!(ours, library);
    assert!(ours.iter().any(|l| l.starts_with("request;parse;tokenize ")), "{text}");
    let svg = recorder_ok(&["dump", s(&m.file), "--format", "flamegraph", "--weight", "self-time"]);
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    roxmltree::Document::parse_with_options(&svg, options).expect("well-formed SVG");
    assert!(svg.contains("tokenize") && svg.contains(" ns"), "{}", &svg[..svg.len().min(2000)]);
    let json = recorder_ok(&["dump", s(&m.file), "--format", "json"]);
    let last: serde_json::Value = serde_json::from_str(json.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "recorder.ScopeTree");
    let roots = last["values"]["roots"].as_array().unwrap();
    let request = roots.iter().find(|r| r["name"] == "request").unwrap();
    assert_eq!(request["calls"], 3);
    assert_eq!(request["children"].as_array().unwrap().len(), 2);
}

/// No scope entered: `--weight self-time` gives an empty collapsed file and a valid, empty flame
/// graph, not an error. Misused flags are clear errors.
#[test]
fn no_scopes_give_an_empty_profile_and_bad_flags_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = {
        let _serial = serial();
        let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();
        let file = dir.path().join("empty.jfr");
        rec.dump(&file).unwrap();
        rec.stop().unwrap();
        file
    };
    assert_eq!(recorder_ok(&["dump", s(&file), "--format", "collapsed", "--weight", "self-time"]), "");
    let svg = recorder_ok(&["dump", s(&file), "--format", "flamegraph", "--weight", "self-time"]);
    roxmltree::Document::parse(&svg).expect("a valid SVG");
    let json = recorder_ok(&["dump", s(&file), "--format", "json"]);
    assert!(!json.contains("recorder.ScopeTree"));
    for args in [
        vec!["dump", s(&file), "--format", "json", "--by-span"],
        vec!["dump", s(&file), "--format", "collapsed", "--weight", "self-time", "--by-span"],
        vec!["dump", s(&file), "--format", "pprof", "--by-span", "-o", "/dev/null"],
    ] {
        let out = recorder(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--by-span") || err.contains("--weight"), "{args:?}: {err}");
    }
}

/// Every reader counts every CPU sample of a recording with spans, and those that read fields by
/// name see each sample's span: our reader, the JDK (`jfr print --json`), the `jfrs` crate, and a
/// reader that decodes the JDK's fields by position (as async-profiler's converter does), which
/// the context block after those fields must not lead off the event grid (docs/jfr-format.md,
/// "Context ids on samples").
#[test]
fn every_reader_counts_every_sample_with_its_span() {
    let m = made();
    let ours: Vec<i64> = read_events(&m.file, "jdk.ExecutionSample").iter().map(|s| s.field_i64("spanId")).collect();
    let in_spans = ours.iter().filter(|&&id| id != 0).count();
    assert!(in_spans > 0 && in_spans < ours.len(), "{in_spans} of {} samples in spans", ours.len());
    let sorted = |mut v: Vec<i64>| {
        v.sort_unstable();
        v
    };

    let json: serde_json::Value =
        serde_json::from_str(&jfr_ok(&["print", "--json", "--events", "jdk.ExecutionSample", s(&m.file)])).unwrap();
    let jdk: Vec<i64> = json["recording"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["values"]["spanId"].as_i64().unwrap_or_else(|| panic!("no spanId: {e}")))
        .collect();
    assert_eq!(sorted(jdk), sorted(ours.clone()), "the JDK's samples and spans");

    let mut jfrs = Vec::new();
    let mut reader = jfrs::reader::JfrReader::new(std::fs::File::open(&m.file).unwrap());
    for chunk in reader.chunks() {
        let (mut cr, chunk) = chunk.expect("jfrs reads the chunk");
        for event in cr.events(&chunk) {
            let event = event.expect("jfrs reads the event");
            if event.class.name() == "jdk.ExecutionSample" {
                let span = event.value().get_field("spanId").map(|a| i64::try_from(a.value));
                jfrs.push(span.expect("jfrs sees spanId").expect("a long"));
            }
        }
    }
    assert_eq!(sorted(jfrs), sorted(ours.clone()), "jfrs's samples and spans");

    assert_eq!(positional_reader_counts(&m.file).get("jdk.ExecutionSample").copied(), Some(ours.len() as u64));
}
