//! Deterministic mode: the same events give byte-identical recordings, checked against a golden
//! file (regenerate with `UPDATE_GOLDEN=1 cargo test --test golden` after an intended format change).

mod common;

use common::*;
use recorder::{Event, EventSettings, Recorder};
use std::path::Path;
use std::time::Duration;

recorder::event! {
    /// A golden order.
    #[event(name = "golden.Order", label = "Order", category = ["Golden"])]
    pub struct Order {
        #[field(label = "Id")]
        pub id: u64,
        #[field(label = "Item")]
        pub item: String,
        pub amount: f64,
        pub express: bool,
    }
}

recorder::event! {
    #[event(name = "golden.Step", label = "Step")]
    pub struct Step { pub n: i32 }
}

/// Records on a thread of its own, so the thread names in the file do not depend on how the test
/// harness runs tests.
fn record(dir: &Path) -> Vec<u8> {
    let dir = dir.to_owned();
    std::thread::Builder::new().name("golden-main".into()).spawn(move || record_here(&dir)).unwrap().join().unwrap()
}

fn record_here(dir: &Path) -> Vec<u8> {
    Order::register();
    Step::register();
    let rec = Recorder::builder()
        .repository(dir)
        .deterministic(true)
        .event("golden.Order", EventSettings { stack_trace: false, ..Default::default() })
        .event("golden.Step", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .unwrap();
    for id in 0..5 {
        Order { id, item: format!("item-{id}"), amount: id as f64 * 1.25, express: id % 2 == 0 }.commit();
    }
    // A duration event: deterministic mode records it with duration 0 at a logical time.
    let step = Step { n: 1 }.begin();
    std::thread::sleep(Duration::from_millis(2));
    step.end();
    rec.flush();
    std::thread::Builder::new()
        .name("golden-worker".into())
        .spawn(|| {
            for n in 2..5 {
                Step { n }.commit();
            }
        })
        .unwrap()
        .join()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    rec.stop().unwrap();
    let mut bytes = Vec::new();
    for c in chunk_files(&repo) {
        bytes.extend(std::fs::read(c).unwrap());
    }
    bytes
}

#[test]
fn identical_events_give_identical_bytes_and_match_the_golden_file() {
    let _guard = serial();
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let first = record(a.path());
    let second = record(b.path());
    assert_eq!(first, second, "two deterministic recordings of the same events differ");

    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/golden.jfr");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden, &first).unwrap();
    }
    let expected = std::fs::read(&golden).expect("tests/data/golden.jfr (UPDATE_GOLDEN=1 makes it)");
    assert!(
        first == expected,
        "the recording differs from tests/data/golden.jfr ({} vs {} bytes)",
        first.len(),
        expected.len()
    );

    // The golden file is a valid recording with the logical times.
    let out = a.path().join("golden.jfr");
    std::fs::write(&out, &first).unwrap();
    let orders = read_events(&out, "golden.Order");
    assert_eq!(orders.len(), 5);
    let starts: Vec<i64> = orders.iter().map(|e| e.start_ticks).collect();
    assert!(starts.windows(2).all(|w| w[1] == w[0] + 1), "logical ticks count up: {starts:?}");
    assert_eq!(read_events(&out, "golden.Step").len(), 4);
    jdk_accepts(&[out]);
}
