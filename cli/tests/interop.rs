//! Every kind of file we write, read by readers nobody here wrote.
//!
//! - The `jfrs` crate reads every event of every file, with per-type counts equal to `jfr summary`
//!   and the same stacks as `jfr print` and our own reader.
//! - What JDK Mission Control and async-profiler's converter need, checked without them (they
//!   cannot run in CI): every `jdk.ActiveSetting.id` names an event type the chunk declares (JMC
//!   throws a NullPointerException otherwise); every `jdk.types.Symbol` is a UTF-8 string (tag 3:
//!   async-profiler rejects any other tag); frames are named so JMC renders them (a class in no
//!   package that never starts with `[`, the descriptor `()L;`); no struct type nests a struct
//!   inline (JMC gives such a type a new identity per chunk, so each chunk became a new event
//!   type).
//! - A `char` outside the BMP is written as U+FFFD; `demo -o` writes the repository's final
//!   state; `jdk.ActiveRecording` means what the JDK means.
//!
//! The kinds of file: the demo, the demo with a 6 + 3 depth limit (`<elided:K>` frames), a
//! recording with an event of every field kind, 3000-deep stacks, a type registered in a later
//! chunk, a multi-chunk dump of it, a live chunk copied mid-recording, the deterministic golden
//! file, and a JVM-made recording as the control. `RECORDER_INTEROP_FILES=DIR` copies them to DIR,
//! for judging with other readers by hand.

mod common;

use common::*;
use jfr_format::Value;
use jfrs::reader::event::Accessor;
use jfrs::reader::value_descriptor::{Primitive, ValueDescriptor};
use jfrs::reader::JfrReader;
use recorder::{Event, EventSettings, Recorder};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

recorder::event! {
    #[event(name = "interop.Tick", label = "Tick")]
    pub struct Tick { pub n: u64, pub text: String }
}

recorder::event! {
    /// Configured in the builder, first committed in a later chunk.
    #[event(name = "interop.Late", label = "Late")]
    pub struct Late { pub n: u32 }
}

#[inline(never)]
fn commit_all_kinds(n: u64) {
    all_kinds(n).commit();
}

#[inline(never)]
fn recurse(depth: u32, stop: &AtomicBool) -> u64 {
    if depth == 0 {
        return spin_until(stop);
    }
    std::hint::black_box(recurse(depth - 1, stop)) + 1
}

/// The files, by kind.
struct Files {
    _dir: tempfile::TempDir,
    demo: PathBuf,
    demo_repository: PathBuf,
    demo_6_3: PathBuf,
    /// The in-process recording's chunk files, in order.
    chunks: Vec<PathBuf>,
    multi_chunk_dump: PathBuf,
    live_copy: PathBuf,
    golden: PathBuf,
    jvm: PathBuf,
    /// Id of `interop.Late` in the in-process recording.
    late_id: u64,
}

impl Files {
    /// Every file we wrote, with its kind.
    fn ours(&self) -> Vec<(String, &Path)> {
        let mut v = vec![
            ("demo".to_owned(), self.demo.as_path()),
            ("demo --stack-depth 6 --stack-depth-outer 3".to_owned(), &self.demo_6_3),
            ("multi-chunk dump".to_owned(), &self.multi_chunk_dump),
            ("live chunk copied mid-recording".to_owned(), &self.live_copy),
            ("deterministic (golden)".to_owned(), &self.golden),
        ];
        for (i, c) in self.chunks.iter().enumerate() {
            v.push((format!("chunk {i} of the every-kind recording"), c));
        }
        v
    }

    /// Ours and the JVM's.
    fn all(&self) -> Vec<(String, &Path)> {
        let mut v = self.ours();
        v.push(("JVM-made (control)".to_owned(), &self.jvm));
        v
    }
}

fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(make_files)
}

fn make_files() -> Files {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let d = &dir.path().to_owned();

    // The demo, twice: plain, and with depth limits at both ends.
    let demo = d.join("demo.jfr");
    let demo_base = d.join("demo-repo");
    let out = recorder(&[
        "demo",
        "--seconds",
        "1",
        "--threads",
        "2",
        "--period",
        "1ms",
        "--repository",
        demo_base.to_str().unwrap(),
        "-o",
        demo.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "demo: {}", String::from_utf8_lossy(&out.stderr));
    let demo_repository = only_subdir(&demo_base);
    let demo_6_3 = d.join("demo-6-3.jfr");
    let base_6_3 = d.join("demo-6-3-repo");
    let out = recorder(&[
        "demo",
        "--seconds",
        "1",
        "--threads",
        "2",
        "--period",
        "1ms",
        "--stack-depth",
        "6",
        "--stack-depth-outer",
        "3",
        "--repository",
        base_6_3.to_str().unwrap(),
        "-o",
        demo_6_3.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "demo 6 + 3: {}", String::from_utf8_lossy(&out.stderr));

    // In process: every field kind, 3000-deep stacks kept whole, small chunks, a late type.
    let rec = Recorder::builder()
        .repository(d.join("every-kind"))
        .max_chunk_size(64 * 1024)
        .max_age(Duration::from_secs(3600))
        .flush_interval(Duration::from_secs(3600))
        .max_chunk_age(Duration::from_secs(3600))
        .sampling_period(Duration::from_millis(2))
        .sampler_buffers(8192, 96)
        .stack_depth(2048)
        .stack_depth_outer(2048)
        .event("interop.Late", EventSettings { threshold: Duration::from_millis(7), ..Default::default() })
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let stop = AtomicBool::new(false);
    let (multi_chunk_dump, live_copy) = std::thread::scope(|s| {
        let stop = &stop;
        let rec = &rec;
        let deep = std::thread::Builder::new()
            .name("deep-3000".into())
            .stack_size(64 << 20)
            .spawn_scoped(s, move || {
                rec.register_current_thread().unwrap();
                recurse(3000, stop)
            })
            .unwrap();
        // Rounds of more than a chunk's worth (3000 ticks are about 90 KiB) fill the event
        // buffers, which wakes the flusher thread, whose flushes rotate the chunk. Rotation is that
        // thread's, so how many rounds two finished chunks take depends on when it runs: the
        // rounds go on until there are two (the every-kind events are in the first three).
        let mut round = 0u64;
        while round < 3 || finished_chunks(&repo) < 2 {
            assert!(round < 100, "no rotation in {round} rounds of 90 KiB");
            if round < 3 {
                for n in 0..40 {
                    commit_all_kinds(round * 100 + n);
                }
            }
            for n in 0..3000 {
                Tick { n, text: format!("tick {round}/{n}") }.commit();
            }
            if round == 1 {
                Late { n: 1 }.commit();
            }
            std::thread::sleep(Duration::from_millis(150));
            rec.flush();
            round += 1;
        }
        // The live chunk as a reader following it sees it, with events. A flush resolves names
        // with L released; when the flusher thread rotates the chunk meanwhile, the flush publishes
        // the new chunk with its metadata only (its events went into the chunk that finished): then
        // one more event and flush.
        let live_copy = d.join("live-copy.jfr");
        for attempt in 0.. {
            assert!(attempt < 100, "the live chunk never had events after a flush");
            let live = chunk_files(&repo).pop().expect("a chunk");
            if copy_published(&live, &live_copy) && has_events(&live_copy) {
                break;
            }
            Tick { n: attempt, text: "one more".into() }.commit();
            rec.flush();
        }
        let dump = d.join("multi-chunk.jfr");
        rec.dump(&dump).unwrap();
        stop.store(true, Ordering::Relaxed);
        deep.join().unwrap();
        (dump, live_copy)
    });
    let late_id = Late::event_type().id();
    rec.stop().unwrap();
    let chunks = chunk_files(&repo);
    assert!(chunks.len() >= 3, "two finished chunks and the last one: {chunks:?}");

    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/golden.jfr");
    let jvm = jvm_recording().to_owned();
    let files =
        Files { demo, demo_repository, demo_6_3, chunks, multi_chunk_dump, live_copy, golden, jvm, late_id, _dir: dir };
    if let Some(keep) = std::env::var_os("RECORDER_INTEROP_FILES") {
        let keep = PathBuf::from(keep);
        std::fs::create_dir_all(&keep).unwrap();
        for (_, f) in files.all() {
            let name = f.strip_prefix(d).map_or_else(|_| f.file_name().unwrap().into(), |p| p.to_owned());
            let to = keep.join(name.to_str().unwrap().replace('/', "_"));
            std::fs::copy(f, to).unwrap();
        }
    }
    files
}

/// The one directory below `base` (a recording's directory).
fn only_subdir(base: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> =
        std::fs::read_dir(base).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().unwrap()
}

/// Copies a live chunk as a reader following it sees it: the bytes its header publishes. False
/// (nothing copied) if the chunk has finished meanwhile.
fn copy_published(live: &Path, to: &Path) -> bool {
    let bytes = std::fs::read(live).unwrap();
    let header = jfr_format::ChunkHeader::parse(&bytes, 0).unwrap();
    if header.is_finished() {
        return false;
    }
    std::fs::write(to, &bytes[..header.chunk_size as usize]).unwrap();
    true
}

/// Finished chunk files in `repo`.
fn finished_chunks(repo: &Path) -> usize {
    let finished = |p: &PathBuf| {
        let bytes = std::fs::read(p).unwrap_or_default();
        jfr_format::ChunkHeader::parse(&bytes, 0).is_ok_and(|h| h.is_finished())
    };
    chunk_files(repo).iter().filter(|p| finished(p)).count()
}

/// The file has at least one event.
fn has_events(path: &Path) -> bool {
    let data = bytes::Bytes::from(std::fs::read(path).unwrap());
    jfr_format::chunks(data).any(|c| c.unwrap().events().next().is_some())
}

// ---- jfrs ----

/// What jfrs read from a file.
#[derive(Debug, Default)]
struct JfrsRead {
    counts: BTreeMap<String, u64>,
    errors: Vec<String>,
    /// (event type, frames) of every event with a stack trace, in file order.
    stacks: Vec<(String, Vec<String>)>,
    /// The `wide` and `letter` fields of test.AllKinds events.
    chars: Vec<(char, char)>,
}

fn jfrs_text(acc: Option<Accessor<'_>>) -> Option<String> {
    let acc = acc?;
    if let Ok(s) = <&str>::try_from(acc.value) {
        return Some(s.to_owned());
    }
    // jdk.types.Symbol { string }
    acc.get_field("string").and_then(|s| <&str>::try_from(s.value).ok().map(str::to_owned))
}

fn jfrs_read(path: &Path) -> JfrsRead {
    let mut out = JfrsRead::default();
    let mut reader = JfrReader::new(std::fs::File::open(path).unwrap());
    for chunk in reader.chunks() {
        let (mut cr, chunk) = match chunk {
            Ok(c) => c,
            Err(e) => {
                out.errors.push(format!("chunk: {e}"));
                break;
            }
        };
        for event in cr.events(&chunk) {
            let event = match event {
                Ok(e) => e,
                Err(e) => {
                    out.errors.push(format!("event: {e}"));
                    continue;
                }
            };
            let name = event.class.name().to_owned();
            *out.counts.entry(name.clone()).or_default() += 1;
            let v = event.value();
            if name == "test.AllKinds" {
                let c = |f: &str| match v.get_field(f).map(|a| a.value) {
                    Some(ValueDescriptor::Primitive(Primitive::Character(c))) => *c,
                    other => panic!("{f}: {other:?}"),
                };
                out.chars.push((c("letter"), c("wide")));
            }
            if event.class.get_field("stackTrace").is_none() {
                continue;
            }
            let Some(frames) =
                v.get_field("stackTrace").and_then(|st| st.get_field("frames")).and_then(|f| f.as_iter())
            else {
                continue;
            };
            let frames = frames
                .map(|fr| {
                    let method = fr.get_field("method");
                    let class =
                        method.as_ref().and_then(|m| m.get_field("type")).and_then(|t| jfrs_text(t.get_field("name")));
                    let name = method.as_ref().and_then(|m| jfrs_text(m.get_field("name")));
                    let line = fr.get_field("lineNumber").and_then(|l| i32::try_from(l.value).ok()).unwrap_or(-1);
                    let kind = fr.get_field("type").and_then(|t| jfrs_text(t.get_field("description")));
                    frame_text(&class.unwrap_or_default(), &name.unwrap_or_default(), line, kind.as_deref())
                })
                .collect();
            out.stacks.push((name, frames));
        }
    }
    out
}

/// One frame, the same way from every reader.
fn frame_text(class: &str, method: &str, line: i32, kind: Option<&str>) -> String {
    format!("{}.{method} line {line} ({})", class.replace('/', "."), kind.unwrap_or("?"))
}

/// (event type, frames) of every event with a stack trace, in file order, by our reader.
fn our_stacks(path: &Path) -> Vec<(String, Vec<String>)> {
    let data = bytes::Bytes::from(std::fs::read(path).unwrap());
    let mut out = Vec::new();
    for chunk in jfr_format::chunks(data) {
        let chunk = chunk.unwrap();
        for event in chunk.events() {
            let event = event.unwrap();
            let class = chunk.types().class(event.type_id).unwrap();
            if class.field_index("stackTrace").is_none() {
                continue;
            }
            let Some(st) = chunk.event_stack_trace(&event).unwrap() else { continue };
            let frames =
                st.frames.iter().map(|f| frame_text(&f.class, &f.method, f.line, f.frame_type.as_deref())).collect();
            out.push((class.name.clone(), frames));
        }
    }
    out
}

/// The stacks of `jdk.ExecutionSample` as `jfr print --json` shows them (innermost `depth`
/// frames), sorted: `jfr print` need not keep file order.
fn jfr_print_sample_stacks(path: &Path, depth: usize) -> Vec<Vec<String>> {
    let text = jfr_ok(&[
        "print",
        "--json",
        "--stack-depth",
        &depth.to_string(),
        "--events",
        "jdk.ExecutionSample",
        path.to_str().unwrap(),
    ]);
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut out: Vec<Vec<String>> = json["recording"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["values"]["stackTrace"]["frames"].as_array())
        .map(|frames| {
            frames
                .iter()
                .map(|f| {
                    frame_text(
                        f["method"]["type"]["name"].as_str().unwrap_or(""),
                        f["method"]["name"].as_str().unwrap_or(""),
                        f["lineNumber"].as_i64().unwrap_or(-1) as i32,
                        f["type"].as_str(),
                    )
                })
                .collect()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn jfrs_reads_every_file_with_the_counts_of_jfr_summary_and_the_same_stacks() {
    let files = files();
    for (kind, path) in files.all() {
        let read = jfrs_read(path);
        assert!(read.errors.is_empty(), "{kind}: jfrs failed: {:?}", read.errors);
        let mut summary = jfr_summary_counts(path);
        summary.retain(|name, n| *n > 0 && name != "jdk.CheckPoint" && name != "jdk.Metadata");
        assert_eq!(read.counts, summary, "{kind} ({}): jfrs counts vs jfr summary", path.display());
        assert!(!read.counts.is_empty(), "{kind}: has events");

        // The same stacks as our reader, event by event, and as `jfr print` for the samples.
        assert_eq!(read.stacks, our_stacks(path), "{kind}: jfrs stacks vs ours");
        const DEPTH: usize = 64;
        let mut samples: Vec<Vec<String>> = read
            .stacks
            .iter()
            .filter(|(t, _)| t == "jdk.ExecutionSample")
            .map(|(_, f)| f.iter().take(DEPTH).cloned().collect())
            .collect();
        samples.sort();
        assert_eq!(samples, jfr_print_sample_stacks(path, DEPTH), "{kind}: jfrs sample stacks vs jfr print");
    }
    // The files have what the comparison is about: stacks (3000 deep among them), samples.
    let every_kind = jfrs_read(&files.multi_chunk_dump);
    assert!(every_kind.stacks.iter().any(|(t, _)| t == "test.AllKinds"));
    assert!(jfrs_read(&files.demo).stacks.iter().any(|(t, _)| t == "jdk.ExecutionSample"));
}

#[test]
fn every_active_setting_names_an_event_type_the_chunk_declares() {
    let files = files();
    for (kind, path) in files.ours() {
        let data = bytes::Bytes::from(std::fs::read(path).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            let md = chunk.metadata();
            let Some(setting) = md.class_by_name("jdk.ActiveSetting") else { continue };
            let (id_at, name_at) = (setting.field_index("id").unwrap(), setting.field_index("name").unwrap());
            for e in chunk.events() {
                let e = e.unwrap();
                if e.type_id != setting.id {
                    continue;
                }
                let id = e.values[id_at].as_i64().unwrap() as u64;
                let name = e.values[name_at].as_str().unwrap_or("").to_owned();
                let declared = md.class(id).is_some_and(|c| c.is_event());
                assert!(declared, "{kind}: jdk.ActiveSetting {name:?} has id {id}, not an event type of the chunk");
                assert!(
                    !name.contains('#'),
                    "{kind}: the setting's name is the JDK's ({name:?}): the id names the type"
                );
            }
        }
    }
    // A type configured in the builder gets its settings in the chunk where it registers.
    let late: Vec<ReadEvent> = read_events(&files.multi_chunk_dump, "jdk.ActiveSetting")
        .into_iter()
        .filter(|e| e.field_i64("id") as u64 == files.late_id)
        .collect();
    let value = |name: &str| {
        late.iter()
            .find(|e| e.field("name").as_str() == Some(name))
            .map(|e| e.field("value").as_str().unwrap().to_owned())
    };
    assert_eq!(value("threshold").as_deref(), Some("7000000 ns"), "{late:?}");
    assert_eq!(value("enabled").as_deref(), Some("true"));
    // The recording's own settings belong to recorder.Recording.
    let own = read_events(&files.multi_chunk_dump, "jdk.ActiveSetting");
    assert!(own.iter().any(|e| e.field("name").as_str() == Some("flushInterval")));
}

#[test]
fn every_symbol_is_a_utf8_string() {
    for (kind, path) in files().ours() {
        let data = bytes::Bytes::from(std::fs::read(path).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            let Some(symbol) = chunk.metadata().class_by_name("jdk.types.Symbol").map(|c| c.id) else { continue };
            for key in chunk.pool_keys(symbol) {
                let at = chunk.constant_offset(symbol, key).unwrap() as usize;
                let tag = chunk.bytes()[at];
                assert_eq!(
                    tag, 3,
                    "{kind}: symbol {key} is written with string tag {tag} (async-profiler reads only 3)"
                );
            }
        }
    }
}

/// Frames are named so that every reader renders them: what JMC needs (see the module docs) and
/// function names that read as Rust paths in our tools.
#[test]
fn frames_are_named_for_every_reader() {
    let files = files();
    for (kind, path) in files.ours() {
        let data = bytes::Bytes::from(std::fs::read(path).unwrap());
        for chunk in jfr_format::chunks(data) {
            let chunk = chunk.unwrap();
            let md = chunk.metadata();
            // No struct type nests a struct inline.
            for class in md.classes.iter() {
                for field in class.fields.iter().filter(|f| !f.constant_pool && !f.array) {
                    let Some(ty) = md.class(field.type_id) else { continue };
                    if ty.fields.is_empty() || class.is_event() || class.name.starts_with("jdk.") {
                        continue;
                    }
                    panic!("{kind}: struct {} has the struct field {}: {}", class.name, field.name, ty.name);
                }
            }
            if let Some(class_type) = md.class_by_name("java.lang.Class").map(|c| c.id) {
                for key in chunk.pool_keys(class_type) {
                    let class = chunk.resolve(class_type, key).unwrap().unwrap();
                    let name = text(&chunk, chunk.field(&class, "name"));
                    assert!(!name.is_empty() && !name.starts_with('['), "{kind}: class name {name:?}");
                    let package = chunk.field(&class, "package").and_then(|p| chunk.resolve_deep(p, 3).ok());
                    assert!(
                        matches!(package, None | Some(Value::Null)),
                        "{kind}: class {name} has a package {package:?}"
                    );
                }
            }
            if let Some(method_type) = md.class_by_name("jdk.types.Method").map(|c| c.id) {
                for key in chunk.pool_keys(method_type) {
                    let method = chunk.resolve(method_type, key).unwrap().unwrap();
                    let name = text(&chunk, chunk.field(&method, "name"));
                    assert_eq!(text(&chunk, chunk.field(&method, "descriptor")), "()L;", "{kind}: method {name}");
                    assert!(!name.is_empty());
                }
            }
        }
    }

    // A known function of this test reads as its Rust path in our tools, and as the module
    // (class) and function in `jfr print`.
    let dump = files.multi_chunk_dump.to_str().unwrap();
    let printed = recorder_ok(&["print", "--events", "test.AllKinds", dump]);
    assert!(printed.contains("interop::commit_all_kinds line:"), "{}", &printed[..printed.len().min(3000)]);
    let jdk = jfr_ok(&["print", "--events", "test.AllKinds", dump]);
    let line = jdk.lines().find(|l| l.contains("interop::commit_all_kinds")).expect("the committing function");
    assert!(line.trim().starts_with("interop-") && line.contains(".interop::commit_all_kinds() line:"), "{line}");

    // The `<elided:K>` marker reads well everywhere: the depth limit in `jfr print` (class),
    // the marker alone in ours.
    let demo_6_3 = files.demo_6_3.to_str().unwrap();
    let jdk = jfr_ok(&["print", "--stack-depth", "20", "--events", "jdk.ExecutionSample", demo_6_3]);
    let marker = jdk.lines().find(|l| l.contains("<elided:")).expect("6 + 3 elides frames");
    assert!(marker.trim().starts_with("stack-depth-limit.<elided:"), "{marker}");
    let ours = recorder_ok(&["print", "--events", "jdk.ExecutionSample", demo_6_3]);
    assert!(ours.lines().any(|l| l.trim().starts_with("<elided:")), "{}", &ours[..ours.len().min(3000)]);
    let folded = recorder_ok(&["dump", demo_6_3, "--format", "collapsed"]);
    // (A frame of its own; the root when every frame outside it is thread-start boilerplate.)
    assert!(folded.lines().any(|l| l.split(';').any(|f| f.starts_with("<elided:"))), "{folded}");
    assert!(!folded.contains("stack-depth-limit"), "{folded}");
}

/// The text of a string or symbol field.
fn text(chunk: &jfr_format::Chunk, v: Option<&Value>) -> String {
    match v.map(|v| chunk.resolve_deep(v, 4).unwrap()) {
        Some(Value::String(s)) => s.as_str().to_owned(),
        Some(Value::Object(o)) => match o.fields.first() {
            Some(Value::String(s)) => s.as_str().to_owned(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

#[test]
fn a_char_outside_the_bmp_is_written_as_the_replacement_character() {
    let files = files();
    let dump = &files.multi_chunk_dump;
    let json: serde_json::Value =
        serde_json::from_str(&jfr_ok(&["print", "--json", "--events", "test.AllKinds", dump.to_str().unwrap()]))
            .unwrap();
    let events = json["recording"]["events"].as_array().unwrap();
    assert_eq!(events.len(), 120);
    for e in events {
        assert_eq!(e["values"]["wide"], "\u{FFFD}");
        assert_eq!(e["values"]["letter"], "ß");
        assert_eq!(e["values"]["text"], "héllo wörld ✓ 日本 🦀", "strings keep every character");
        assert_eq!(e["values"]["endpoint"]["geo_lat"], 48.5, "{}", e["values"]["endpoint"]);
    }
    // jfrs drops an event with a lone surrogate; it reads every one.
    let read = jfrs_read(dump);
    assert_eq!(read.chars.len(), 120);
    assert!(read.chars.iter().all(|&c| c == ('ß', '\u{FFFD}')), "{:?}", &read.chars[..3]);
}

#[test]
fn the_demo_output_file_is_the_repositorys_final_state() {
    let files = files();
    let mut repository = Vec::new();
    for c in chunk_files(&files.demo_repository) {
        repository.extend(std::fs::read(c).unwrap());
    }
    let file = std::fs::read(&files.demo).unwrap();
    assert!(
        file == repository,
        "demo -o ({} bytes) differs from the repository ({} bytes)",
        file.len(),
        repository.len()
    );
    // So it has the end of the recording: the workers' ends and the final flag.
    let ends = read_events(&files.demo, "jdk.ThreadEnd");
    assert!(ends.iter().filter(|e| e.thread.as_deref().is_some_and(|t| t.starts_with("demo-worker"))).count() >= 2);
    let last = chunk_spans(&file).last().copied().unwrap();
    assert!(jfr_format::ChunkHeader::parse(&file[last.0..], 0).unwrap().is_final());
}

#[test]
fn active_recording_fields_mean_what_the_jdk_means() {
    let files = files();
    let json = |path: &Path| -> Vec<serde_json::Value> {
        let text = jfr_ok(&["print", "--json", "--events", "jdk.ActiveRecording", path.to_str().unwrap()]);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["recording"]["events"].as_array().unwrap().iter().map(|e| e["values"].clone()).collect()
    };
    // The JVM, as the reference: no configured duration or age limit is Long.MAX_VALUE ms.
    let jvm = json(&files.jvm);
    let unlimited = &jvm[0]["recordingDuration"];
    assert_eq!(jvm[0]["maxAge"], *unlimited);
    assert_eq!(unlimited.as_str(), Some("PT2562047788015H12M55.807S"), "Long.MAX_VALUE ms");
    let demo = json(&files.demo);
    assert!(!demo.is_empty());
    for r in &demo {
        assert_eq!(r["recordingDuration"], *unlimited, "a recording runs until stopped: {r}");
        assert_eq!(r["maxAge"], *unlimited, "no age limit: {r}");
        assert_eq!(r["flushInterval"], "PT1S", "{r}");
        assert_eq!(r["maxSize"], 250 * 1024 * 1024, "{r}");
        assert!(r["destination"].is_null(), "no file is written when it stops: {r}");
    }
    for r in json(&files.multi_chunk_dump) {
        assert_eq!(r["maxAge"], "PT1H", "{r}");
        assert_eq!(r["recordingDuration"], *unlimited, "{r}");
        assert_eq!(r["flushInterval"], "PT1H", "{r}");
    }
    // The repository is a setting of the recording.
    let settings = read_events(&files.demo, "jdk.ActiveSetting");
    let repository = settings.iter().find(|e| e.field("name").as_str() == Some("repository")).expect("repository");
    assert_eq!(repository.field("value").as_str(), files.demo_repository.to_str());
}
