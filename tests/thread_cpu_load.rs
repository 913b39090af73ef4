//! `jdk.ThreadCPULoad`: each thread's user and system CPU time per periodic interval, as the JDK
//! declares it. The CPU sampler sees user time only (a sampler that may interrupt system calls
//! is not one a program can live with: `src/sampler/timer.rs`), so a thread's system time shows
//! here. Asserted by meaning: a thread that burns user CPU is reported mostly user, one that
//! spends its time in `read(2)` of /dev/zero mostly system; the JDK's `jfr print` reads the
//! events with their thread names.

mod common;

use common::*;
use jfr_format::Value;
use recorder::Recorder;
use std::hint::black_box;
use std::time::Duration;

/// Burns 300 ms of CPU in user code, then stays alive for a few periodic readings.
fn user_burner() {
    let mut x = 1u64;
    while thread_cpu_time() < Duration::from_millis(300) {
        for _ in 0..200_000 {
            x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
    black_box(x);
    std::thread::sleep(Duration::from_millis(250));
}

/// Spends 300 ms of CPU in the kernel (copying zeros out of /dev/zero), then stays alive.
fn system_burner() {
    use std::io::Read;
    let mut zero = std::fs::File::open("/dev/zero").unwrap();
    let mut buf = vec![0u8; 1 << 20];
    while thread_cpu_time() < Duration::from_millis(300) {
        zero.read_exact(&mut buf).unwrap();
    }
    std::thread::sleep(Duration::from_millis(250));
}

fn float(e: &ReadEvent, name: &str) -> f32 {
    match e.field(name) {
        Value::Float(v) => *v,
        other => panic!("{name} is {other:?}"),
    }
}

#[test]
fn thread_cpu_load_reports_user_and_system_time_per_thread() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).periodic_interval(Duration::from_millis(50)).start().unwrap();
    let a = std::thread::Builder::new().name("userburn".into()).spawn(user_burner).unwrap();
    let b = std::thread::Builder::new().name("sysburn".into()).spawn(system_burner).unwrap();
    a.join().unwrap();
    b.join().unwrap();
    let path = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let files = chunk_files(&path);
    let events: Vec<ReadEvent> = files.iter().flat_map(|f| read_events(f, "jdk.ThreadCPULoad")).collect();
    let mut sums = std::collections::HashMap::<String, (f32, f32)>::new();
    for e in &events {
        let (user, system) = (float(e, "user"), float(e, "system"));
        assert!((0.0..=1.0).contains(&user) && (0.0..=1.0).contains(&system) && user + system <= 1.0, "{e:?}");
        assert!(user + system > 0.0, "an idle thread gets no event: {e:?}");
        let s = sums.entry(e.thread.clone().expect("the event names its thread")).or_default();
        s.0 += user;
        s.1 += system;
    }
    let (u, s) = sums.get("userburn").copied().unwrap_or_else(|| panic!("no load for userburn: {sums:?}"));
    assert!(u > 4.0 * s, "userburn: user {u} system {s}");
    let (u, s) = sums.get("sysburn").copied().unwrap_or_else(|| panic!("no load for sysburn: {sums:?}"));
    assert!(s > u, "sysburn: user {u} system {s}");
    jdk_accepts(&files);
    let printed: String =
        files.iter().map(|f| jdk("jfr", &["print", "--events", "jdk.ThreadCPULoad", f.to_str().unwrap()])).collect();
    assert!(printed.contains("\"sysburn\"") && printed.contains("system = "), "{printed}");
}

#[test]
fn threads_that_live_between_two_readings_are_reported_from_their_exit() {
    // 12 threads, one after the other, each burning 40 ms of CPU and exiting, with a reading
    // every 500 ms: most of them start and end between two readings, where /proc never lists
    // them. Each is reported from its CPU times at exit (before, at most the one or two alive at a
    // reading were).
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let interval = Duration::from_millis(500);
    let rec = Recorder::builder().repository(dir.path()).periodic_interval(interval).start().unwrap();
    for i in 0..12 {
        std::thread::Builder::new()
            .name(format!("short-{i}"))
            .spawn(|| {
                let mut x = 1u64;
                while thread_cpu_time() < Duration::from_millis(40) {
                    for _ in 0..20_000 {
                        x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                }
                black_box(x);
            })
            .unwrap()
            .join()
            .unwrap();
    }
    // A reading after the last exit (three intervals: the recorder's thread may run late).
    std::thread::sleep(3 * interval);
    let path = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let events: Vec<ReadEvent> = chunk_files(&path).iter().flat_map(|f| read_events(f, "jdk.ThreadCPULoad")).collect();
    let reported: std::collections::HashSet<String> = events
        .iter()
        .filter(|e| float(e, "user") > 0.0)
        .filter_map(|e| e.thread.clone())
        .filter(|name| name.starts_with("short-"))
        .collect();
    assert_eq!(reported.len(), 12, "threads reported: {reported:?}");
}
