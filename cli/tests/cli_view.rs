//! `recorder view`: the self-contained HTML page. Its embedded data (the JSON in the
//! `<script id="data">` element, which the page's own script reads) holds one lane per sampled
//! thread with its name, and exactly the samples `recorder summary` counts; names are escaped so
//! no markup of theirs reaches the page; a truncated file gives the page of what was readable,
//! flagged truncated, and exit code 2.

mod common;

use common::*;
use recorder::Recorder;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A thread name that would run a script if the page put it into markup.
const HOSTILE_NAME: &str = "</script><script>window.pwned=1</script>";

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A recording with two sampled threads, one named [`HOSTILE_NAME`]; returns (dir, file).
fn recording() -> (tempfile::TempDir, PathBuf) {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder()
        .repository(dir.path().join("repo"))
        .sampling_period(Duration::from_millis(1))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    std::thread::scope(|s| {
        for name in ["view-worker", HOSTILE_NAME] {
            let rec = &rec;
            std::thread::Builder::new()
                .name(name.into())
                .spawn_scoped(s, move || {
                    rec.register_current_thread().unwrap();
                    spin_cpu(Duration::from_millis(150));
                })
                .unwrap();
        }
    });
    rec.stop().unwrap();
    let file = dir.path().join("rec.jfr");
    recorder_ok(&["dump", s(&repo), "-o", s(&file)]);
    (dir, file)
}

/// The page's embedded data.
fn page_data(page: &str) -> serde_json::Value {
    let open = "<script id=\"data\" type=\"application/json\">";
    let start = page.find(open).expect("the data element") + open.len();
    let len = page[start..].find("</script>").expect("the data element's end");
    serde_json::from_str(&page[start..start + len]).expect("the data is JSON")
}

fn sample_count(path: &Path) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&recorder_ok(&["summary", "--json", s(path)])).unwrap();
    v["events"]["jdk.ExecutionSample"]["count"].as_u64().unwrap_or(0)
}

#[test]
fn the_page_holds_every_sample_per_named_thread_and_fetches_nothing() {
    let (dir, file) = recording();
    let out = dir.path().join("view.html");
    recorder_ok(&["view", s(&file), "-o", s(&out)]);
    let page = std::fs::read_to_string(&out).unwrap();
    // Self-contained: nothing is loaded from elsewhere.
    for outside in ["http://", "https://", " src=", "@import", "url("] {
        assert!(!page.contains(outside), "the page refers to something outside it: {outside}");
    }
    let data = page_data(&page);
    let threads: Vec<&str> = data["threads"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert!(threads.contains(&"view-worker") && threads.contains(&HOSTILE_NAME), "lanes: {threads:?}");
    let samples = data["samples"].as_array().unwrap();
    assert_eq!(samples.len() % 3, 0);
    let count = (samples.len() / 3) as u64;
    assert!(count > 0);
    assert_eq!(count, sample_count(&file), "the page's samples are summary's");
    // Each sample is of a lane, within the recording, with a stack of the page.
    let (lanes, stacks, duration) =
        (threads.len() as u64, data["stacks"].as_array().unwrap().len() as u64, data["durationNs"].as_i64().unwrap());
    let mut per_thread: BTreeMap<u64, u64> = BTreeMap::new();
    for triple in samples.chunks(3) {
        let (t, at, stack) = (triple[0].as_u64().unwrap(), triple[1].as_i64().unwrap(), triple[2].as_u64().unwrap());
        assert!(t < lanes && stack < stacks && (0..=duration).contains(&at), "sample {triple:?}");
        *per_thread.entry(t).or_default() += 1;
    }
    assert_eq!(per_thread.len() as u64, lanes, "every lane has samples");
    // The name is data, never markup: the only script elements are the page's two.
    assert!(!page.contains("<script>window.pwned"));
    assert_eq!(page.matches("<script").count(), 2, "no script element comes from the data");
    // stdout gives the same page, and so does `dump --format html`.
    let to_stdout = recorder_ok(&["view", s(&file)]);
    assert_eq!(to_stdout, page);
    assert_eq!(recorder_ok(&["dump", "--format", "html", s(&file)]), page);
    // `dump --thread` narrows it to that thread's lane and samples.
    let worker = threads.iter().position(|t| *t == "view-worker").unwrap() as u64;
    let narrowed = page_data(&recorder_ok(&["dump", "--format", "html", "--thread", "view-worker", s(&file)]));
    assert_eq!(narrowed["threads"], serde_json::json!(["view-worker"]));
    assert_eq!((narrowed["samples"].as_array().unwrap().len() / 3) as u64, per_thread[&worker]);
}

#[test]
fn a_recording_without_samples_gives_an_empty_page() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path().join("repo")).start().unwrap();
    let repo = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let page = recorder_ok(&["view", s(&repo)]);
    let data = page_data(&page);
    assert_eq!(data["samples"].as_array().unwrap().len(), 0);
    assert_eq!(data["truncated"], false);
}

#[test]
fn a_truncated_file_gives_the_readable_part_flagged_and_exit_code_2() {
    let (dir, file) = recording();
    let bytes = std::fs::read(&file).unwrap();
    // The recording whole, then the first half of a copy of its first chunk.
    let (_, first_size) = chunk_spans(&bytes)[0];
    let truncated = dir.path().join("cut.jfr");
    std::fs::write(&truncated, [&bytes[..], &bytes[..first_size / 2]].concat()).unwrap();
    let out = recorder(&["view", s(&truncated)]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!out.stderr.is_empty(), "the damage is reported");
    let data = page_data(std::str::from_utf8(&out.stdout).unwrap());
    assert_eq!(data["truncated"], true);
    assert!((data["samples"].as_array().unwrap().len() / 3) as u64 >= sample_count(&file), "the whole part is shown");
}

/// Headless Chromium (Debian's `chromium`, installed by `.ci/run`): a missing browser fails the
/// test. Network off: every host resolves to nothing and a dead proxy stands for the rest.
fn chromium(args: &[&str]) -> std::process::Output {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| std::process::Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("headless Chromium is needed (apt-get install chromium; .ci/run installs it)");
    std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--proxy-server=socks5://127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--window-size=1280,900",
        ])
        .args(args)
        .output()
        .expect("running chromium")
}

/// The page's state as the browser left it (its `<pre id="state">`, JSON) after opening `url`.
fn browser_state(url: &str) -> serde_json::Value {
    let out = chromium(&["--dump-dom", url]);
    let dom = String::from_utf8(out.stdout).unwrap();
    let start = dom.find("<pre id=\"state\" hidden=\"\">").unwrap_or_else(|| {
        panic!("the page's script did not run to its end: {dom}\n{}", String::from_utf8_lossy(&out.stderr))
    });
    let text = &dom[start..];
    let text = &text[text.find('>').unwrap() + 1..text.find("</pre>").unwrap()];
    let text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("state {text}: {e}"))
}

#[test]
fn in_chromium_the_page_shows_the_lanes_and_the_flame_graph_of_a_range() {
    let (dir, file) = recording();
    let page = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view.html");
    recorder_ok(&["view", s(&file), "-o", s(&page)]);
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    let url = format!("file://{}", s(&page));
    // The whole recording: every lane, the flame graph's root is every sample summary counts.
    let state = browser_state(&url);
    assert_eq!(state["errors"], serde_json::json!([]), "no error in the page's console");
    assert_eq!(state["lanes"], data["threads"], "one lane per thread, named");
    assert!(state["lanes"].as_array().unwrap().iter().any(|l| l == HOSTILE_NAME), "the name is text in the DOM");
    assert_eq!(state["flameTotal"].as_u64().unwrap(), sample_count(&file));
    // A range: the flame graph's root is the samples taken in it.
    let duration_ms = data["durationNs"].as_f64().unwrap() / 1e6;
    let (from, to) = (format!("{:.3}", duration_ms / 4.0), format!("{:.3}", duration_ms / 2.0));
    let (a, b): (f64, f64) = (from.parse().unwrap(), to.parse().unwrap());
    let in_range = data["samples"]
        .as_array()
        .unwrap()
        .chunks(3)
        .filter(|t| (a..=b).contains(&(t[1].as_f64().unwrap() / 1e6)))
        .count() as u64;
    assert!(in_range > 0 && in_range < sample_count(&file), "the range holds some of the samples: {in_range}");
    let ranged = format!("{url}#range={from},{to}");
    let state = browser_state(&ranged);
    assert_eq!(state["errors"], serde_json::json!([]));
    assert_eq!(state["range"], serde_json::json!([a, b]));
    assert_eq!(state["flameTotal"].as_u64().unwrap(), in_range);
    // For people to look at: target/tmp/cli_view.png.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_view.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(&[&format!("--screenshot={}", s(&shot)), &ranged]);
    assert!(shot.exists(), "a screenshot: {}", String::from_utf8_lossy(&out.stderr));
    drop(dir);
}
