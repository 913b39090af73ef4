//! Fuzz harness bodies shared by the libFuzzer targets and the stable corpus-replay mode.
//!
//! With the `libfuzzer` feature (set by `cargo fuzz run <target>` on nightly) each target is a
//! libFuzzer target. Without it each target is a plain binary that replays every file of the
//! directories (or files) given as arguments, so the corpus can be checked on stable:
//! `cargo run --release --bin chunk -- corpus/chunk`.

use bytes::Bytes;
use jfr_format::{chunks, Chunk, Item, Refresh};

/// Parses every chunk, iterates every event, resolves every stack trace and thread.
pub fn chunk(data: &[u8]) {
    for chunk in chunks(Bytes::copy_from_slice(data)) {
        let Ok(chunk) = chunk else { break };
        visit_chunk(&chunk, jfr_format::header::HEADER_SIZE as u64);
        let _ = chunk.pool_sizes().count();
    }
}

fn visit_chunk(chunk: &Chunk, from: u64) -> u64 {
    let mut items = chunk.items(from);
    for item in items.by_ref() {
        match item {
            Ok(Item::Event(event)) => {
                let _ = chunk.event_thread(&event);
                let _ = chunk.event_stack_trace(&event);
                let _ = chunk.event_duration_ticks(&event);
                for v in &event.values {
                    let _ = chunk.resolve_deep(v, 3);
                }
            }
            Ok(Item::Flush) => {}
            Err(_) => break,
        }
    }
    items.position()
}

/// Follows a live chunk on growing prefixes of `data`: the first byte picks the step size; each
/// prefix is offered to `Chunk::refresh`, and the events published so far are read.
pub fn live(data: &[u8]) {
    let Some((&step, data)) = data.split_first() else {
        return;
    };
    let step = usize::from(step).max(1) * 7;
    let all = Bytes::copy_from_slice(data);
    let mut len = step.min(all.len());
    let mut chunk = None;
    let mut pos = 0;
    loop {
        let prefix = all.slice(..len);
        match &mut chunk {
            None => {
                if let Ok(c) = Chunk::parse(prefix, 0) {
                    pos = visit_chunk(&c, 0);
                    chunk = Some(c);
                }
            }
            Some(c) => match c.refresh(prefix) {
                Ok(Refresh::Grew) => pos = visit_chunk(c, pos),
                Ok(_) => {}
                Err(_) => {}
            },
        }
        if len == all.len() {
            break;
        }
        len = (len + step).min(all.len());
    }
}

/// Runs `target` on every file named by the arguments (directories are read one level deep).
pub fn replay(target: fn(&[u8])) {
    let mut n = 0;
    for arg in std::env::args_os().skip(1) {
        let path = std::path::PathBuf::from(arg);
        let files: Vec<_> = if path.is_dir() {
            std::fs::read_dir(&path)
                .expect("readable corpus directory")
                .map(|e| e.expect("directory entry").path())
                .collect()
        } else {
            vec![path]
        };
        for file in files {
            let data = std::fs::read(&file).expect("readable corpus file");
            target(&data);
            n += 1;
        }
    }
    eprintln!("replayed {n} inputs without a panic");
}
