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

/// A kind's entries (thread, time from start in ns, stack, weight, state) from the page's data;
/// none if the page has no such kind.
fn entries(data: &serde_json::Value, kind: &str) -> Vec<[i64; 5]> {
    let Some(k) = data["kinds"].as_array().unwrap().iter().find(|k| k["id"] == kind) else { return Vec::new() };
    let flat = k["entries"].as_array().unwrap();
    assert_eq!(flat.len() % 5, 0);
    flat.chunks(5).map(|e| std::array::from_fn(|i| e[i].as_i64().unwrap())).collect()
}

/// The sum of a kind's weights; its lanes' (heat) entries weigh the same.
fn total(data: &serde_json::Value, kind: &str) -> u64 {
    let sum = entries(data, kind).iter().map(|e| e[3] as u64).sum();
    if let Some(k) = data["kinds"].as_array().unwrap().iter().find(|k| k["id"] == kind) {
        let heat = k["heat"].as_array().unwrap();
        assert_eq!(heat.len() % 4, 0);
        assert_eq!(heat.chunks(4).map(|e| e[2].as_u64().unwrap()).sum::<u64>(), sum, "{kind}: the lanes weigh it all");
    }
    sum
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
    let samples = entries(&data, "cpu");
    let count = total(&data, "cpu");
    assert!(count > 0);
    assert_eq!(count, sample_count(&file), "the page's samples are summary's");
    // Each sample is of a lane, within the recording, with a stack of the page.
    let (lanes, stacks, duration) =
        (threads.len() as u64, data["stacks"].as_array().unwrap().len() as u64, data["durationNs"].as_i64().unwrap());
    let mut per_thread: BTreeMap<u64, u64> = BTreeMap::new();
    for e @ [t, at, stack, weight, _] in samples {
        assert!((t as u64) < lanes && (stack as u64) < stacks && (0..=duration).contains(&at), "sample {e:?}");
        *per_thread.entry(t as u64).or_default() += weight as u64;
    }
    // Both sampled threads have samples in their lanes (threads with events only have lanes too).
    for name in ["view-worker", HOSTILE_NAME] {
        let lane = threads.iter().position(|t| *t == name).unwrap() as u64;
        assert!(per_thread.get(&lane).is_some_and(|&n| n > 0), "{name}: {per_thread:?}");
    }
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
    assert_eq!(total(&narrowed, "cpu"), per_thread[&worker]);
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
    assert_eq!(total(&data, "cpu"), 0);
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
    assert!(total(&data, "cpu") >= sample_count(&file), "the whole part is shown");
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
    // A range: the flame graph's root is the samples taken in it. The range is the middle of the
    // samples' times (where they fall in the recording depends on how long its start and stop took).
    let mut times: Vec<f64> = entries(&data, "cpu").iter().map(|e| e[1] as f64 / 1e6).collect();
    times.sort_by(f64::total_cmp);
    let (from, to) = (format!("{:.3}", times[times.len() / 4]), format!("{:.3}", times[times.len() / 2]));
    let (a, b): (f64, f64) = (from.parse().unwrap(), to.parse().unwrap());
    let in_range: u64 =
        entries(&data, "cpu").iter().filter(|e| (a..=b).contains(&(e[1] as f64 / 1e6))).map(|e| e[3] as u64).sum();
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

/// `recorder record --wall --alloc --alloc-live` of `programs/view_mix.c` (threads cruncher,
/// napper, waiter; blocks kept allocated); returns (dir, the recording).
fn recording_of_c_program() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_program("view_mix.c", "gcc", &["-O2", "-pthread", "-fno-omit-frame-pointer"]);
    preload_library();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_recorder"))
        .current_dir(dir.path())
        .args(["record", "--period", "1ms", "--wall", "5ms", "--alloc", "16KiB", "--alloc-live"])
        .args(["--repository", "repo", "-o", "mix.jfr", "--", s(&prog)])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let file = dir.path().join("mix.jfr");
    (dir, file)
}

/// Per thread name and state name, the weight of a kind's entries.
fn by_thread_and_state(data: &serde_json::Value, kind: &str) -> BTreeMap<(String, String), u64> {
    let name = |list: &str, i: i64| data[list][i as usize].as_str().unwrap().to_owned();
    let mut out = BTreeMap::new();
    for [t, _, _, w, state] in entries(data, kind) {
        *out.entry((name("threads", t), name("states", state))).or_default() += w as u64;
    }
    out
}

#[test]
fn the_page_selects_cpu_wall_and_allocation_samples_and_shows_wall_clock_states() {
    let (dir, file) = recording_of_c_program();
    let summary: serde_json::Value = serde_json::from_str(&recorder_ok(&["summary", "--json", s(&file)])).unwrap();
    let page = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view_wall_alloc.html");
    recorder_ok(&["view", s(&file), "-o", s(&page)]);
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    let ids: Vec<&str> = data["kinds"].as_array().unwrap().iter().map(|k| k["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["cpu", "wall", "alloc", "live"], "the kinds the recording has, CPU first");
    // Each kind weighs what `summary` counts: samples, wall-clock periods, estimated bytes.
    assert_eq!(total(&data, "cpu"), sample_count(&file));
    assert_eq!(total(&data, "wall"), summary["wall_samples"]["periods"].as_u64().unwrap());
    assert_eq!(total(&data, "alloc"), summary["allocation_samples"]["estimated_bytes"].as_u64().unwrap());
    assert!(total(&data, "alloc") > 0);
    // Live bytes: what `dump --live` folds (the blocks keep() never freed).
    let live: u64 = recorder_ok(&["dump", "--format", "collapsed", "--live", s(&file)])
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert!(live > 0);
    assert_eq!(total(&data, "live"), live);
    // Wall-clock states: the cruncher runs, the napper sleeps (in nanosleep, 400 ms).
    let states = by_thread_and_state(&data, "wall");
    let of = |t: &str, st: &str| states.get(&(t.to_owned(), st.to_owned())).copied().unwrap_or(0);
    assert!(of("cruncher", "STATE_RUNNABLE") > 0 && of("napper", "STATE_SLEEPING") > 0, "{states:?}");
    assert!(data["wallPeriodNs"].as_i64() == Some(5_000_000), "the wall period from its setting");

    // In the browser: the kind of the fragment is shown, its flame graph's root is its total.
    let url = format!("file://{}", s(&page));
    for kind in ["wall", "alloc", "live"] {
        let state = browser_state(&format!("{url}#kind={kind}"));
        assert_eq!(state["errors"], serde_json::json!([]));
        assert_eq!(state["kind"], kind);
        assert_eq!(state["flameTotal"].as_u64().unwrap(), total(&data, kind), "{kind}");
        assert_eq!(state["lanes"], data["threads"]);
    }
    // A range of the allocation samples.
    let duration_ms = data["durationNs"].as_f64().unwrap() / 1e6;
    let (from, to) = (format!("{:.3}", duration_ms / 3.0), format!("{:.3}", duration_ms * 2.0 / 3.0));
    let (a, b): (f64, f64) = (from.parse().unwrap(), to.parse().unwrap());
    let in_range: u64 =
        entries(&data, "alloc").iter().filter(|e| (a..=b).contains(&(e[1] as f64 / 1e6))).map(|e| e[3] as u64).sum();
    let state = browser_state(&format!("{url}#kind=alloc&range={from},{to}"));
    assert_eq!(state["flameTotal"].as_u64().unwrap(), in_range);
    // A thread selected (its name clicked): the flame graph of its samples only.
    let napper = data["threads"].as_array().unwrap().iter().position(|t| t == "napper").unwrap();
    let napper_wall: u64 = entries(&data, "wall").iter().filter(|e| e[0] == napper as i64).map(|e| e[3] as u64).sum();
    assert!(napper_wall > 0 && napper_wall < total(&data, "wall"));
    let state = browser_state(&format!("{url}#kind=wall&thread={napper}"));
    assert_eq!(state["flameTotal"].as_u64().unwrap(), napper_wall);
    // The function table's callers and callees of `crunch` (CPU samples): what its callers give it
    // is its total, what it gives its callees is its total less its self.
    let state = browser_state(&format!("{url}#fn=crunch"));
    let sum = |v: &serde_json::Value| v.as_object().unwrap().values().map(|w| w.as_u64().unwrap()).sum::<u64>();
    let (fn_total, fn_self) = (state["fnTotal"].as_u64().unwrap(), state["fnSelf"].as_u64().unwrap());
    assert!(fn_total > 0 && state["callers"]["cruncher"].as_u64().is_some_and(|w| w > 0), "{state}");
    assert_eq!(sum(&state["callers"]), fn_total);
    assert_eq!(sum(&state["callees"]) + fn_self, fn_total);
    // For people to look at: the wall-clock view, states under the lanes.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_view_wall_alloc.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(&[&format!("--screenshot={}", s(&shot)), &format!("{url}#kind=wall")]);
    assert!(shot.exists(), "a screenshot: {}", String::from_utf8_lossy(&out.stderr));
    // And the live bytes, with keep()'s callers.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_view_live.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[&format!("--screenshot={}", s(&shot)), &format!("{url}#kind=live&fn=keep")]);
    assert!(shot.exists());
    drop(dir);
}

/// A recording of `tracing` spans (`request` > `parse`, `request` > `render`, three times, on the
/// thread `span-worker`, CPU-bound and sampled every millisecond) and a `tracing` event
/// (`recorder.Log`, an instant) after each request; returns (dir, file).
fn recording_with_spans() -> (tempfile::TempDir, PathBuf) {
    use tracing_subscriber::layer::SubscriberExt;
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let subscriber = tracing_subscriber::registry().with(recorder::tracing::RecorderLayer::new());
    let rec = Recorder::builder()
        .repository(dir.path().join("repo"))
        .sampling_period(Duration::from_millis(1))
        .start()
        .unwrap();
    std::thread::scope(|s| {
        let rec = &rec;
        std::thread::Builder::new()
            .name("span-worker".into())
            .spawn_scoped(s, move || {
                rec.register_current_thread().unwrap();
                tracing::subscriber::with_default(subscriber, || {
                    for i in 0..3 {
                        let _r = tracing::info_span!("request", id = i).entered();
                        {
                            let _p = tracing::info_span!("parse").entered();
                            spin_cpu(Duration::from_millis(30));
                        }
                        {
                            let _p = tracing::info_span!("render").entered();
                            spin_cpu(Duration::from_millis(50));
                        }
                        tracing::info!(request = i, "request done {HOSTILE_NAME}");
                    }
                });
            })
            .unwrap();
    });
    let file = dir.path().join("spans.jfr");
    rec.dump(&file).unwrap();
    rec.stop().unwrap();
    (dir, file)
}

/// The page's embedded events of type `name`: (lane, time, duration, stack, fields).
fn events_of(data: &serde_json::Value, name: &str) -> Vec<(usize, serde_json::Value)> {
    let types = data["eventTypes"].as_array().unwrap();
    let Some(t) = types.iter().position(|t| t["name"] == name) else { return Vec::new() };
    data["events"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .filter(|(_, e)| e[0].as_u64() == Some(t as u64))
        .map(|(i, e)| (i, e.clone()))
        .collect()
}

#[test]
fn spans_are_bars_in_their_lane_and_selecting_one_gives_its_flame_graph() {
    let (dir, file) = recording_with_spans();
    let summary: serde_json::Value = serde_json::from_str(&recorder_ok(&["summary", "--json", s(&file)])).unwrap();
    let page = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view_spans.html");
    recorder_ok(&["view", s(&file), "-o", s(&page)]);
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    // The events table counts every type as summary does.
    for t in data["eventTypes"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        assert_eq!(t["count"], summary["events"][name]["count"], "{name}");
    }
    let lane = data["threads"].as_array().unwrap().iter().position(|t| t == "span-worker").unwrap() as u64;
    let spans = events_of(&data, "recorder.Span");
    let mut names: Vec<&str> = spans.iter().map(|(_, e)| e[5]["name"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["parse", "parse", "parse", "render", "render", "render", "request", "request", "request"]);
    for (_, e) in &spans {
        assert_eq!(e[1].as_u64(), Some(lane), "a span is in its thread's lane: {e}");
        assert!(e[3].as_i64().unwrap() > 0, "a span has a duration: {e}");
    }
    let logs = events_of(&data, "recorder.Log");
    assert_eq!(logs.len(), 3, "the tracing events");
    // Their messages hold markup: data in the page, never elements of it.
    assert!(logs.iter().all(|(_, e)| e[5].to_string().contains(HOSTILE_NAME)), "{logs:?}");
    let text = std::fs::read_to_string(&page).unwrap();
    assert_eq!(text.matches("<script").count(), 2, "no script element comes from the events");
    assert!(logs.iter().all(|(_, e)| e[1].as_u64() == Some(lane) && e[3] == 0), "instants in the lane: {logs:?}");

    // In the browser: the lane holds its events; the second `render` span, selected, shows its
    // fields and the flame graph of its time on its thread.
    let url = format!("file://{}", s(&page));
    let state = browser_state(&url);
    assert_eq!(state["errors"], serde_json::json!([]));
    let in_lane = data["events"].as_array().unwrap().iter().filter(|e| e[1].as_u64() == Some(lane)).count();
    assert!(in_lane >= 12, "the spans and logs, and the thread's other events (its start): {in_lane}");
    assert_eq!(state["laneEvents"]["span-worker"], in_lane);
    for (name, count) in state["eventCounts"].as_object().unwrap() {
        assert_eq!(*count, summary["events"][name]["count"], "{name}");
    }
    let (index, render) =
        spans.iter().filter(|(_, e)| e[5]["name"] == "render").nth(1).cloned().expect("a render span");
    let (from, to) =
        (render[2].as_f64().unwrap() / 1e6, (render[2].as_f64().unwrap() + render[3].as_f64().unwrap()) / 1e6);
    let (from, to) = (format!("{from:.3}"), format!("{to:.3}"));
    let (a, b): (f64, f64) = (from.parse().unwrap(), to.parse().unwrap());
    let in_span: u64 = entries(&data, "cpu")
        .iter()
        .filter(|e| e[0] as u64 == lane && (a..=b).contains(&(e[1] as f64 / 1e6)))
        .map(|e| e[3] as u64)
        .sum();
    assert!(in_span > 0, "CPU samples in the span");
    let selected = format!("{url}#range={from},{to}&thread={lane}&event={index}");
    let state = browser_state(&selected);
    assert_eq!(state["errors"], serde_json::json!([]));
    assert_eq!(state["selected"]["type"], "recorder.Span");
    assert_eq!(state["selected"]["fields"]["name"], "render");
    assert_eq!(state["thread"], lane);
    assert_eq!(state["flameTotal"].as_u64().unwrap(), in_span);
    // The events table with recorder.Span selected: its rows and field columns.
    let state = browser_state(&format!("{url}#type=recorder.Span"));
    assert_eq!(state["typeRows"], 9);
    assert!(state["typeColumns"].as_array().unwrap().iter().any(|c| c == "name"), "{}", state["typeColumns"]);
    // For people to look at: the spans, one selected, and its flame graph.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_view_spans.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(&[&format!("--screenshot={}", s(&shot)), &selected]);
    assert!(shot.exists(), "a screenshot: {}", String::from_utf8_lossy(&out.stderr));
    drop(dir);
}

#[test]
fn zooming_the_timeline_shows_the_events_of_its_view_and_keeps_the_range() {
    let (dir, file) = recording_with_spans();
    let page = dir.path().join("view.html");
    recorder_ok(&["view", s(&file), "-o", s(&page)]);
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    let lane = data["threads"].as_array().unwrap().iter().position(|t| t == "span-worker").unwrap() as u64;
    // The view: the second request span (its parse and render are in it, the others are not).
    let spans = events_of(&data, "recorder.Span");
    let (_, request) = spans.iter().filter(|(_, e)| e[5]["name"] == "request").nth(1).cloned().unwrap();
    let ms = |ns: f64| format!("{:.3}", ns / 1e6);
    let (from, to) =
        (ms(request[2].as_f64().unwrap()), ms(request[2].as_f64().unwrap() + request[3].as_f64().unwrap()));
    let (a, b): (f64, f64) = (from.parse().unwrap(), to.parse().unwrap());
    let in_view = data["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            let (at, dur) = (e[2].as_f64().unwrap() / 1e6, e[3].as_f64().unwrap() / 1e6);
            e[1].as_u64() == Some(lane) && at + dur >= a && at <= b
        })
        .count();
    let all = data["events"].as_array().unwrap().iter().filter(|e| e[1].as_u64() == Some(lane)).count();
    assert!(in_view >= 3 && in_view < all, "the view holds some of the lane's events: {in_view} of {all}");
    let url = format!("file://{}#view={from},{to}", s(&page));
    let state = browser_state(&url);
    assert_eq!(state["errors"], serde_json::json!([]));
    assert_eq!(state["view"], serde_json::json!([a, b]));
    assert_eq!(state["laneEvents"]["span-worker"], in_view);
    // Zooming changes what the lanes show, not the flame graph's range.
    assert_eq!(state["flameTotal"].as_u64().unwrap(), sample_count(&file));
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_view_zoomed.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[&format!("--screenshot={}", s(&shot)), &url]);
    assert!(shot.exists());
}

#[test]
fn the_demo_recording_shows_its_workers_requests_as_bars() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("demo.jfr");
    let repo = dir.path().join("repo");
    recorder_ok(&["demo", "--seconds", "1", "--period", "1ms", "--repository", s(&repo), "-o", s(&file)]);
    let summary: serde_json::Value = serde_json::from_str(&recorder_ok(&["summary", "--json", s(&file)])).unwrap();
    let page = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view_demo.html");
    recorder_ok(&["view", s(&file), "-o", s(&page)]);
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    let requests = events_of(&data, "demo.Request");
    let count = summary["events"]["demo.Request"]["count"].as_u64().unwrap();
    assert!(count > 0);
    assert_eq!(requests.len() as u64, count.min(5_000), "the requests the page holds");
    assert!(requests.iter().all(|(_, e)| e[3].as_i64().unwrap() > 0 && e[1].as_i64().unwrap() >= 0), "bars in lanes");
    let state = browser_state(&format!("file://{}", s(&page)));
    assert_eq!(state["errors"], serde_json::json!([]));
    assert_eq!(state["flameTotal"].as_u64().unwrap(), sample_count(&file));
    for worker in 0..4 {
        let name = format!("demo-worker-{worker}");
        let lane = data["threads"].as_array().unwrap().iter().position(|t| *t == name.as_str()).unwrap();
        let in_lane = data["events"].as_array().unwrap().iter().filter(|e| e[1].as_u64() == Some(lane as u64)).count();
        assert!(in_lane > 0 && state["laneEvents"][&name] == in_lane, "{name}: {in_lane}, {}", state["laneEvents"]);
    }
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli_view_demo.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[&format!("--screenshot={}", s(&shot)), &format!("file://{}", s(&page))]);
    assert!(shot.exists());
}

/// Writes a recording of one thread (`busy`) with `count` CPU samples, one a millisecond, over
/// 64 distinct stacks (`main` > `work_{k % 8}` > `leaf_{k}`), as one chunk.
fn write_samples_recording(path: &Path, count: i64) {
    use jfr_format::metadata::{event_class, ids, jdk_types, EventTypeSpec, Field, Metadata, Region};
    use jfr_format::write::{put_int, put_long, put_string, put_varint, Checkpoint, ChunkEncoder};
    const SAMPLE: u64 = 100;
    let mut classes = jdk_types();
    classes.push(event_class(EventTypeSpec {
        id: SAMPLE,
        name: "jdk.ExecutionSample",
        label: "Method Profiling Sample",
        description: None,
        category: &["Profiling"],
        duration: false,
        thread: false,
        stack_trace: false,
        fields: vec![
            Field::new("sampledThread", ids::THREAD).pooled(),
            Field::new("stackTrace", ids::STACK_TRACE).pooled(),
            Field::new("state", ids::THREAD_STATE).pooled(),
        ],
    }));
    let metadata = Metadata { id: 1, classes, region: Region::default() };
    let start_ns = 1_700_000_000_000_000_000i64;
    let mut w = ChunkEncoder::new(start_ns, 0);
    w.write_metadata(&metadata, 0);
    for i in 0..count {
        w.write_event(SAMPLE, |o| {
            put_long(o, i * 1_000_000);
            put_varint(o, 1);
            put_varint(o, 1 + (i % 64) as u64);
            put_varint(o, 5);
        });
    }
    // Symbols 1..: main, work_0..7, leaf_0..63; methods and classes with the same keys.
    let names: Vec<String> = std::iter::once("main".to_owned())
        .chain((0..8).map(|k| format!("work_{k}")))
        .chain((0..64).map(|k| format!("leaf_{k}")))
        .collect();
    let mut cp = Checkpoint::new();
    cp.add(ids::THREAD, 1, |o| {
        put_string(o, Some("busy"));
        put_long(o, 7);
        put_string(o, None);
        put_long(o, 0);
        put_varint(o, 0);
    });
    cp.add(ids::THREAD_STATE, 5, |o| put_string(o, Some("STATE_RUNNABLE")));
    cp.add(ids::FRAME_TYPE, 3, |o| put_string(o, Some("Native")));
    cp.add(ids::SYMBOL, 1000, |o| put_string(o, Some("()V")));
    cp.add(ids::SYMBOL, 1001, |o| put_string(o, Some("app")));
    cp.add(ids::CLASS, 1, |o| {
        put_varint(o, 0);
        put_varint(o, 1001);
        put_varint(o, 0);
        put_int(o, 0);
        o.push(0);
    });
    for (i, name) in names.iter().enumerate() {
        let key = i as u64 + 1;
        cp.add(ids::SYMBOL, key, |o| put_string(o, Some(name)));
        cp.add(ids::METHOD, key, |o| {
            put_varint(o, 1);
            put_varint(o, key);
            put_varint(o, 1000);
            put_int(o, 0);
            o.push(0);
        });
    }
    for k in 0..64u64 {
        // Innermost first: leaf_k, work_{k % 8}, main.
        cp.add(ids::STACK_TRACE, k + 1, |o| {
            o.push(0);
            put_varint(o, 3);
            for method in [10 + k, 2 + k % 8, 1] {
                put_varint(o, method);
                put_int(o, 0);
                put_int(o, 0);
                put_varint(o, 3);
            }
        });
    }
    w.write_checkpoint(&cp, 0, true);
    std::fs::write(path, w.into_bytes(count * 1_000_000, true)).unwrap();
}

/// One thread with a million samples: the page weighs every one of them, aggregated over time
/// buckets so that it stays small (every sample embedded, it would be ~20 MB of entries alone).
#[test]
fn a_million_samples_give_a_page_of_a_few_megabytes_that_weighs_every_one() {
    const COUNT: i64 = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("million.jfr");
    write_samples_recording(&file, COUNT);
    assert_eq!(sample_count(&file), COUNT as u64);
    let page = Path::new(env!("CARGO_TARGET_TMPDIR")).join("view_million.html");
    recorder_ok(&["view", s(&file), "-o", s(&page)]);
    let size = std::fs::metadata(&page).unwrap().len();
    assert!(size <= 5 << 20, "the page is {size} bytes");
    let data = page_data(&std::fs::read_to_string(&page).unwrap());
    assert_eq!(data["threads"], serde_json::json!(["busy"]));
    assert_eq!(total(&data, "cpu"), COUNT as u64, "every sample is weighed");
    let cpu = &data["kinds"][0];
    assert!(cpu["bucketNs"].as_i64().unwrap() > 1, "aggregated over time buckets");
    assert!(entries(&data, "cpu").len() <= 120_000);
    // The lanes' buckets stay finer than the flame graphs'.
    let heat_bucket = cpu["heatBucketNs"].as_i64().unwrap();
    assert!(
        heat_bucket * 8 <= cpu["bucketNs"].as_i64().unwrap(),
        "lanes {heat_bucket} ns, flame graphs {}",
        cpu["bucketNs"]
    );
    // Every leaf keeps its share: each of the 64 stacks has COUNT / 64 samples (± 1).
    let mut per_stack: BTreeMap<i64, u64> = BTreeMap::new();
    for e in entries(&data, "cpu") {
        *per_stack.entry(e[2]).or_default() += e[3] as u64;
    }
    assert_eq!(per_stack.len(), 64);
    assert!(per_stack.values().all(|&n| n.abs_diff(COUNT as u64 / 64) <= 1), "{per_stack:?}");
    let state = browser_state(&format!("file://{}", s(&page)));
    assert_eq!(state["errors"], serde_json::json!([]));
    assert_eq!(state["flameTotal"].as_u64().unwrap(), COUNT as u64);
    assert_eq!(state["lanes"], serde_json::json!(["busy"]));
}

/// `dump --format firefox`: the crate's schema version; per thread, the CPU samples the JDK's
/// `jfr` counts; every event of a thread a marker: an interval per duration event (the spans),
/// an instant per other event (the `tracing` events).
#[test]
fn firefox_profile_has_each_threads_samples_and_its_events_as_markers() {
    let (dir, file) = recording_with_spans();
    let out = dir.path().join("profile.json");
    recorder_ok(&["dump", "--format", "firefox", s(&file), "-o", s(&out)]);
    let profile: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("JSON");
    // The schema version is the crate's (an empty profile of it says which).
    let empty = fxprof_processed_profile::Profile::new(
        "x",
        fxprof_processed_profile::ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
        fxprof_processed_profile::SamplingInterval::from_millis(1),
    );
    let empty: serde_json::Value = serde_json::to_value(&empty).unwrap();
    let version = &empty["meta"]["preprocessedProfileVersion"];
    assert!(version.is_u64());
    assert_eq!(profile["meta"]["preprocessedProfileVersion"], *version);

    // The JDK's count of CPU samples per thread.
    let printed: serde_json::Value =
        serde_json::from_str(&jdk("jfr", &["print", "--json", "--events", "jdk.ExecutionSample", s(&file)])).unwrap();
    let mut jdk_samples: BTreeMap<String, u64> = BTreeMap::new();
    for e in printed["recording"]["events"].as_array().unwrap() {
        let t = &e["values"]["sampledThread"];
        let name = t["javaName"].as_str().or(t["osName"].as_str()).unwrap().to_owned();
        *jdk_samples.entry(name).or_default() += 1;
    }
    assert!(jdk_samples.get("span-worker").is_some_and(|&n| n > 0), "{jdk_samples:?}");
    let counts = jfr_summary_counts(&file);
    let mut samples: BTreeMap<String, u64> = BTreeMap::new();
    let mut markers: BTreeMap<(String, u64), u64> = BTreeMap::new();
    for t in profile["threads"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap().to_owned();
        let s = &t["samples"];
        let n = match s["weight"].as_array() {
            Some(w) => w.iter().map(|w| w.as_u64().unwrap()).sum(),
            None => s["length"].as_u64().unwrap(),
        };
        if n > 0 {
            samples.insert(name.clone(), n);
        }
        let m = &t["markers"];
        let strings = t["stringArray"].as_array().unwrap();
        for (data, phase) in m["data"].as_array().unwrap().iter().zip(m["phase"].as_array().unwrap()) {
            let event_type = strings[data["eventType"].as_u64().unwrap() as usize].as_str().unwrap().to_owned();
            *markers.entry((event_type, phase.as_u64().unwrap())).or_default() += 1;
        }
    }
    assert_eq!(samples, jdk_samples, "CPU samples per thread");
    // Phases: 0 instant, 1 interval.
    assert_eq!(markers.get(&("recorder.Span".to_owned(), 1)).copied(), Some(counts["recorder.Span"]));
    assert_eq!(counts["recorder.Span"], 9);
    assert_eq!(markers.get(&("recorder.Log".to_owned(), 0)).copied(), Some(counts["recorder.Log"]));
    assert!(!markers.contains_key(&("recorder.Span".to_owned(), 0)), "spans are intervals: {markers:?}");
    // Every marker is an event of its type, each once.
    for ((event_type, _), n) in &markers {
        let of_type: u64 = markers.iter().filter(|((t, _), _)| t == event_type).map(|(_, n)| n).sum();
        assert_eq!(of_type, counts[event_type], "{event_type}: {n}");
    }
}

/// A recording of `count` duration events `app.Request` on the thread `server`, the `i`th lasting
/// `i` microseconds, in reading order i = 0, 1, ...
fn write_requests_recording(path: &Path, count: i64) {
    use jfr_format::metadata::{event_class, ids, jdk_types, EventTypeSpec, Field, Metadata, Region};
    use jfr_format::write::{put_int, put_long, put_string, put_varint, Checkpoint, ChunkEncoder};
    let mut classes = jdk_types();
    classes.push(event_class(EventTypeSpec {
        id: 101,
        name: "app.Request",
        label: "Request",
        description: None,
        category: &["App"],
        duration: true,
        thread: true,
        stack_trace: false,
        fields: vec![Field::new("number", ids::INT)],
    }));
    let metadata = Metadata { id: 1, classes, region: Region::default() };
    let mut w = ChunkEncoder::new(1_700_000_000_000_000_000, 0);
    w.write_metadata(&metadata, 0);
    for i in 0..count {
        w.write_event(101, |o| {
            put_long(o, i * 2_000_000);
            put_long(o, i * 1_000);
            put_varint(o, 1);
            put_int(o, i as i32);
        });
    }
    let mut cp = Checkpoint::new();
    cp.add(ids::THREAD, 1, |o| {
        put_string(o, Some("server"));
        put_long(o, 9);
        put_string(o, None);
        put_long(o, 0);
        put_varint(o, 0);
    });
    w.write_checkpoint(&cp, 0, true);
    std::fs::write(path, w.into_bytes(count * 2_000_000, true)).unwrap();
}

/// More events of a type than the page holds: it holds the longest (where a latency shows), in
/// time order, and counts them all.
#[test]
fn of_more_events_than_the_page_holds_it_holds_the_longest() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("requests.jfr");
    write_requests_recording(&file, 6_000);
    let data = page_data(&recorder_ok(&["view", s(&file)]));
    let t = data["eventTypes"].as_array().unwrap().iter().find(|t| t["name"] == "app.Request").unwrap().clone();
    assert_eq!((t["count"].as_u64(), t["shown"].as_u64()), (Some(6_000), Some(5_000)));
    let numbers: Vec<i64> =
        events_of(&data, "app.Request").iter().map(|(_, e)| e[5]["number"].as_i64().unwrap()).collect();
    assert_eq!(numbers, (1_000..6_000).collect::<Vec<i64>>(), "the 5,000 longest, in time order");
}
