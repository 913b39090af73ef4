//! A recording that continues another's directory (`RecorderBuilder::continue_recording_in`,
//! after `Recorder::stop_for_exec`), as the preload does when the recorded process execs: one
//! directory whose chunks read as one recording. Only the last chunk is final (a stream following
//! the directory does not end at the exec), and the JDK, which keeps the first value of a
//! constant key for the whole file, shows each recording's stacks as its own.

mod common;

use common::*;
use recorder::Recorder;
use std::path::Path;
use std::time::Duration;

/// A function that burns `ms` of this thread's CPU time (two of them, so each recording samples a
/// function of its own).
macro_rules! spinner {
    ($name:ident) => {
        #[inline(never)]
        fn $name(ms: u64) -> u64 {
            let start = thread_cpu_time();
            let mut x = 1u64;
            while thread_cpu_time() - start < Duration::from_millis(ms) {
                for _ in 0..100_000 {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                }
            }
            std::hint::black_box(x)
        }
    };
}
spinner!(spin_first_image);
spinner!(spin_second_image);

/// Samples whose innermost frame names `function`, as our reader and as `jfr print` see them.
fn samples_in(file: &Path, function: &str) -> (usize, usize) {
    let ours = read_events(file, "jdk.ExecutionSample")
        .iter()
        .filter(|e| e.stack.as_ref().and_then(|s| s.first()).is_some_and(|f| f.contains(function)))
        .count();
    let printed = jfr_ok(&["print", "--events", "jdk.ExecutionSample", file.to_str().unwrap()]);
    let jdk = printed
        .split("jdk.ExecutionSample {")
        .filter(|e| {
            e.split("stackTrace = [").nth(1).and_then(|s| s.lines().nth(1)).is_some_and(|l| l.contains(function))
        })
        .count();
    (ours, jdk)
}

#[test]
fn a_continued_recording_reads_as_one_with_each_images_stacks() {
    let _serial = serial();
    let base = tempfile::tempdir().unwrap();
    let builder = || Recorder::builder().repository(base.path()).sampling_period(Duration::from_millis(1));
    let first = builder().start().unwrap();
    first.register_current_thread().unwrap();
    spin_first_image(300);
    let dir = first.repository_dir().to_owned();
    let report = first.stop_for_exec().unwrap();
    assert!(report.sampler.is_some_and(|s| s.written > 0));

    let second = builder().continue_recording_in(&dir).start().unwrap();
    assert_eq!(second.repository_dir(), dir, "the directory is continued, not a new one");
    second.register_current_thread().unwrap();
    spin_second_image(300);
    second.stop().unwrap();

    // One recording directory in the base.
    let recordings: Vec<_> = std::fs::read_dir(base.path()).unwrap().filter_map(|e| e.ok()).collect();
    assert_eq!(recordings.len(), 1, "{recordings:?}");
    let chunks = chunk_files(&dir);
    assert!(chunks.len() >= 2, "{chunks:?}");
    let finals: Vec<bool> = chunks
        .iter()
        .map(|c| jfr_format::ChunkHeader::parse(&std::fs::read(c).unwrap(), 0).unwrap().is_final())
        .collect();
    assert_eq!(finals.iter().filter(|f| **f).count(), 1, "{finals:?}");
    assert_eq!(finals.last(), Some(&true), "{finals:?}");

    // The chunks as one file, as `recorder record -o` and `recorder dump` write it.
    let file = base.path().join("both.jfr");
    let bytes: Vec<u8> = chunks.iter().flat_map(|c| std::fs::read(c).unwrap()).collect();
    std::fs::write(&file, bytes).unwrap();
    let (ours_first, jdk_first) = samples_in(&file, "spin_first_image");
    let (ours_second, jdk_second) = samples_in(&file, "spin_second_image");
    assert!(ours_first >= 20 && ours_second >= 20, "{ours_first} {ours_second}");
    assert_eq!((jdk_first, jdk_second), (ours_first, ours_second), "the JDK sees each recording's own stacks");
    jdk_accepts(&[file]);
}
