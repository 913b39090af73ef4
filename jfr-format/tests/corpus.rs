//! The fuzz seed corpus (`fuzz/corpus/<target>/seed-*`): regenerated with `UPDATE_CORPUS=1`, and
//! otherwise checked to parse. One seed is a JVM-made chunk whose metadata was pruned to the types
//! its kept events and pools use (JVM metadata alone is ~100 KiB), re-encoded by our writer and
//! accepted by `jfr print`.
mod common;

use bytes::Bytes;
use common::fixture::fixture;
use jfr_format::metadata::Metadata;
use jfr_format::write::{begin_record, end_record, put_long, ChunkEncoder};
use jfr_format::{chunks, varint, Chunk};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target)
}

/// Rewrites the first chunk of a JVM recording: keeps at most `per_type` events of each event
/// type, drops the other events, declares only the types the kept events and all pools need, and
/// re-links the checkpoints.
pub fn prune_jvm_chunk(data: Bytes, per_type: usize, max_checkpoint: usize) -> Vec<u8> {
    let chunk = Chunk::parse(data, 0).expect("JVM chunk");
    let md = chunk.metadata();
    let mut kept_records: Vec<Bytes> = Vec::new();
    let mut checkpoints: Vec<Bytes> = Vec::new();
    let mut per: BTreeMap<u64, usize> = BTreeMap::new();
    let mut needed: BTreeSet<u64> = chunk.pool_sizes().map(|(t, _)| t).collect();
    for record in chunk.records() {
        let record = record.unwrap();
        match record.type_id {
            0 => {}
            1 => {
                if record.bytes.len() <= max_checkpoint {
                    checkpoints.push(record.bytes)
                }
            }
            t => {
                let n = per.entry(t).or_default();
                if *n < per_type {
                    *n += 1;
                    needed.insert(t);
                    kept_records.push(record.bytes);
                }
            }
        }
    }
    // Close over field, annotation and setting types.
    let mut stack: Vec<u64> = needed.iter().copied().collect();
    while let Some(id) = stack.pop() {
        let Some(c) = md.class(id) else { continue };
        let mut refs: Vec<u64> = c.annotations.iter().map(|a| a.type_id).collect();
        for f in &c.fields {
            refs.push(f.type_id);
            refs.extend(f.annotations.iter().map(|a| a.type_id));
        }
        for s in &c.settings {
            refs.push(s.type_id);
            refs.extend(s.annotations.iter().map(|a| a.type_id));
        }
        for r in refs {
            if needed.insert(r) {
                stack.push(r);
            }
        }
    }
    let pruned = Metadata {
        id: md.id,
        classes: md.classes.iter().filter(|c| needed.contains(&c.id)).cloned().collect(),
        region: md.region.clone(),
    };
    let h = chunk.header();
    let mut w = ChunkEncoder::new(h.start_nanos, h.start_ticks);
    w.write_metadata(&pruned, h.start_ticks);
    for r in &kept_records {
        w.write_records(r);
    }
    // Checkpoints: same content, new deltas.
    let mut previous = 0u64;
    let mut out = Vec::new();
    for cp in &checkpoints {
        let (_, n) = varint::read_u64(cp).unwrap();
        let mut pos = n;
        let mut fields = [0u64; 4];
        for f in &mut fields {
            let (v, n) = varint::read_u64(&cp[pos..]).unwrap();
            *f = v;
            pos += n;
        }
        let [_type, start, duration, _delta] = fields;
        let offset = w.position();
        out.clear();
        let token = begin_record(&mut out, 1);
        put_long(&mut out, start as i64);
        put_long(&mut out, duration as i64);
        put_long(&mut out, if previous == 0 { 0 } else { previous as i64 - offset as i64 });
        out.extend_from_slice(&cp[pos..]);
        end_record(&mut out, token);
        w.write_records(&out);
        previous = offset;
    }
    let mut bytes = w.into_bytes(h.duration_nanos, true);
    // into_bytes only knows checkpoints written through write_checkpoint: set cpOffset by hand.
    bytes[16..24].copy_from_slice(&(previous as i64).to_be_bytes());
    bytes
}

/// A live chunk in three published segments, the last one published but unfinished.
pub fn live_chunk() -> Vec<u8> {
    let md = common::fixture::metadata(false);
    let pools = common::fixture::pools();
    let mut w = ChunkEncoder::new(common::fixture::START_NANOS, common::fixture::START_TICKS);
    let mut seq = 0;
    let mut file = Vec::new();
    for segment in 0..3 {
        if segment == 0 {
            w.write_metadata(&md, 0);
        }
        common::fixture::write_events(&mut w, &md, 0, &mut seq);
        if segment < 2 {
            w.write_checkpoint(&common::fixture::checkpoint(&pools), 0, true);
        }
        let (at, bytes) = w.take_pending();
        assert_eq!(at as usize, file.len());
        file.extend(bytes);
        let header = w.publish(1000 * (segment + 1)).unwrap();
        for (offset, bytes) in jfr_format::header::publish_writes(&header) {
            file[offset as usize..offset as usize + bytes.len()].copy_from_slice(&bytes);
        }
    }
    file
}

fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let jvm = Bytes::from(std::fs::read(common::jvm_recording()).unwrap());
    let first = chunks(jvm.clone()).next().unwrap().unwrap();
    let pruned = prune_jvm_chunk(jvm.slice(..first.size() as usize), 3, 6000);
    let mut live = vec![5u8];
    live.extend(live_chunk());
    let mut live_fixture = vec![1u8];
    live_fixture.extend(&fixture().bytes[..fixture().chunk_sizes[0]]);
    vec![
        ("chunk", "seed-fixture.jfr", fixture().bytes),
        ("chunk", "seed-jvm-pruned.jfr", pruned.clone()),
        ("chunk", "seed-live.jfr", live_chunk()),
        ("live", "seed-live.bin", live),
        ("live", "seed-fixture-chunk.bin", live_fixture),
        ("live", "seed-jvm-pruned.bin", [vec![40u8], pruned].concat()),
    ]
}

#[test]
fn seed_corpus_parses() {
    let update = std::env::var_os("UPDATE_CORPUS").is_some();
    for (target, name, bytes) in seeds() {
        let path = corpus_dir(target).join(name);
        if update {
            // Seeds stay small for the fuzzer. (Only what is written counts: a fresh JVM
            // recording's first chunk varies with the machine's load.)
            assert!(bytes.len() < 64 * 1024, "{target}/{name} is {} bytes", bytes.len());
            std::fs::create_dir_all(corpus_dir(target)).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        }
        let stored = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (regenerate with UPDATE_CORPUS=1)", path.display()));
        let data = Bytes::from(if target == "live" { stored[1..].to_vec() } else { stored });
        for chunk in chunks(data) {
            let chunk = chunk.unwrap_or_else(|e| panic!("{target}/{name}: {e}"));
            for event in chunk.events() {
                event.unwrap_or_else(|e| panic!("{target}/{name}: {e}"));
            }
        }
    }
}

#[test]
fn jdk_accepts_the_pruned_jvm_chunk_and_live_chunk() {
    let jvm = Bytes::from(std::fs::read(common::jvm_recording()).unwrap());
    let first = chunks(jvm.clone()).next().unwrap().unwrap();
    let pruned = prune_jvm_chunk(jvm.slice(..first.size() as usize), 3, usize::MAX);
    let pruned_path = common::write_tmp("pruned.jfr", &pruned);
    let live_path = common::write_tmp("live-unfinished.jfr", &live_chunk());
    std::thread::scope(|s| {
        let a = s.spawn(|| common::jfr(&["print", "--json", pruned_path.to_str().unwrap()]));
        let b = s.spawn(|| common::jfr(&["summary", live_path.to_str().unwrap()]));
        // Plain `jfr print` throws on array fields (see jdk.rs); the fixture types have them.
        let c = s.spawn(|| common::jfr(&["print", "--json", live_path.to_str().unwrap()]));
        a.join().unwrap().assert_ok("jfr print of the pruned JVM chunk");
        let summary = b.join().unwrap();
        let summary = summary.assert_clean("jfr summary of a published, unfinished chunk");
        // Two flush segments have checkpoints; the third segment's events are published too.
        assert_eq!(common::summary_counts(summary).get("test.AllKinds"), Some(&12), "{summary}");
        c.join().unwrap().assert_clean("jfr print of a published, unfinished chunk");
    });
}
