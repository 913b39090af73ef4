//! Allocation profiles through the CLI: `dump --type alloc` weighs stacks by
//! estimated bytes, `dump --live` shows what is still allocated (a leak on top; nothing for a
//! program that frees everything), `summary` the estimated bytes allocated and the live set. The
//! recordings are made by this test binary with the sampling allocator installed.

mod common;

use common::*;
use recorder::alloc::SamplingAllocator;
use recorder::Recorder;
use std::path::Path;
use std::sync::Mutex;

#[global_allocator]
static GLOBAL: SamplingAllocator = SamplingAllocator::new();

/// What `leak_site` leaked: kept until the process exits.
static LEAKED: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

#[inline(never)]
fn leak_site(n: usize) {
    let mut kept = LEAKED.lock().unwrap();
    for i in 0..n {
        kept.push(std::hint::black_box(vec![i as u8; 4096]));
    }
}

#[inline(never)]
fn churn_site(n: usize) -> usize {
    let mut sum = 0;
    for i in 0..n {
        let v = std::hint::black_box(vec![i as u8; 4096]);
        sum += v[0] as usize;
    }
    sum
}

/// Records `work` with the live set tracked (16 KiB interval); returns the repository.
fn record(dir: &Path, work: impl FnOnce()) -> std::path::PathBuf {
    let rec = Recorder::builder()
        .repository(dir)
        .no_sampling()
        .allocation_sampling(16 * 1024)
        .allocation_live_set(true)
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    work();
    let report = rec.stop_with_report().unwrap();
    let a = report.allocation.expect("allocation statistics");
    assert_eq!(a.taken, a.written + a.lost + a.failed, "{a:?}");
    repo
}

/// (stack, weight) lines of `dump --format collapsed`, heaviest first.
fn collapsed(args: &[&str]) -> Vec<(String, u64)> {
    let out = recorder_ok(args);
    let mut lines: Vec<(String, u64)> = out
        .lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("stack weight");
            (stack.to_owned(), n.parse().expect("a weight"))
        })
        .collect();
    lines.sort_by_key(|l| std::cmp::Reverse(l.1));
    lines
}

fn weight_of(lines: &[(String, u64)], function: &str) -> u64 {
    lines.iter().filter(|(s, _)| s.contains(function)).map(|l| l.1).sum()
}

#[test]
fn live_shows_the_leaking_site_on_top_and_alloc_weighs_by_bytes() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let repo = record(dir.path(), || {
        leak_site(2_000); // 8 MiB still allocated at the end
        churn_site(20_000); // 80 MiB allocated and freed
    });
    let repo = repo.to_str().unwrap();

    let live = collapsed(&["dump", repo, "--format", "collapsed", "--live"]);
    assert!(!live.is_empty(), "the live set holds the leak");
    assert!(live[0].0.contains("leak_site"), "the leak is the heaviest live stack: {:?}", &live[..live.len().min(3)]);
    assert_eq!(weight_of(&live, "churn_site"), 0, "freed blocks are not live: {live:?}");
    let leaked = weight_of(&live, "leak_site") as f64;
    let truth = 2_000.0 * 4096.0;
    assert!((leaked / truth - 1.0).abs() < 0.3, "estimated live bytes {leaked} vs {truth}");

    let alloc = collapsed(&["dump", repo, "--format", "collapsed", "--type", "alloc"]);
    let (leak, churn) = (weight_of(&alloc, "leak_site") as f64, weight_of(&alloc, "churn_site") as f64);
    assert!(churn > 5.0 * leak, "allocated bytes: churn {churn} vs leak {leak} (10x the bytes)");
    let truth = 20_000.0 * 4096.0;
    assert!((churn / truth - 1.0).abs() < 0.2, "estimated churn bytes {churn} vs {truth}");

    // OTLP: the same bytes, as the alloc_space and live_space profiles.
    let pb = dir.path().join("out.pb");
    recorder_ok(&["dump", repo, "--format", "otlp", "-o", pb.to_str().unwrap()]);
    let profiles = otlp_judge(&pb, false)["profiles"].clone();
    let sum_of = |name: &str| profiles.as_array().unwrap().iter().find(|p| p["type"] == name).map(|p| p["sum"].clone());
    assert_eq!(sum_of("alloc_space"), Some(alloc.iter().map(|l| l.1).sum::<u64>().into()), "{profiles}");
    assert_eq!(sum_of("live_space"), Some(live.iter().map(|l| l.1).sum::<u64>().into()), "{profiles}");

    let svg = dir.path().join("live.svg");
    recorder_ok(&["dump", repo, "--format", "flamegraph", "--live", "-o", svg.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&svg).unwrap().contains("leak_site"));

    // `recorder view`'s live bytes are `--live`'s, its allocated bytes `--type alloc`'s.
    let page = recorder_ok(&["view", repo]);
    let open = "<script id=\"data\" type=\"application/json\">";
    let start = page.find(open).expect("the page's data") + open.len();
    let data: serde_json::Value =
        serde_json::from_str(&page[start..start + page[start..].find("</script>").unwrap()]).unwrap();
    let page_total = |kind: &str| -> u64 {
        let k = data["kinds"].as_array().unwrap().iter().find(|k| k["id"] == kind).expect(kind);
        k["entries"].as_array().unwrap().chunks(5).map(|e| e[3].as_u64().unwrap()).sum()
    };
    assert_eq!(page_total("live"), live.iter().map(|l| l.1).sum::<u64>(), "live bytes");
    assert_eq!(page_total("alloc"), alloc.iter().map(|l| l.1).sum::<u64>(), "allocated bytes");

    let summary = recorder_ok(&["summary", repo]);
    assert!(summary.contains("Allocation samples:"), "{summary}");
    assert!(summary.contains("estimated bytes allocated:"), "{summary}");
    assert!(summary.contains("Live set at the last snapshot:"), "{summary}");
}

#[test]
fn a_program_that_frees_everything_has_an_empty_live_set() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let repo = record(dir.path(), || {
        churn_site(20_000);
        let kept: Vec<Vec<u8>> = (0..500).map(|i| vec![i as u8; 8192]).collect();
        drop(std::hint::black_box(kept));
    });
    let repo = repo.to_str().unwrap();
    let out = recorder(&["dump", repo, "--format", "collapsed", "--live"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "nothing sampled is live: {}", String::from_utf8_lossy(&out.stdout));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no sampled allocation"));
    let summary = recorder_ok(&["summary", repo]);
    assert!(summary.contains("Live set at the last snapshot: 0 sampled allocations"), "{summary}");
    // The allocations themselves were sampled.
    let alloc = collapsed(&["dump", repo, "--format", "collapsed", "--type", "alloc"]);
    assert!(weight_of(&alloc, "churn_site") > 0);
}

#[test]
fn live_without_a_live_set_names_the_setting() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().allocation_sampling(64 * 1024).start().unwrap();
    let repo = rec.repository_dir().to_owned();
    churn_site(1_000);
    rec.stop().unwrap();
    let out = recorder(&["dump", repo.to_str().unwrap(), "--format", "collapsed", "--live"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("allocation_live_set"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = recorder(&["dump", repo.to_str().unwrap(), "--format", "jfr", "--live", "-o", "/dev/null"]);
    assert!(!out.status.success(), "--live is for collapsed and flamegraph");
}
