//! The chunk writer (docs/architecture.md, data path 1): the live chunk, the recording's constant pools (symbols,
//! classes, methods, stack traces, threads) and what the chunk has already defined. It
//! answers one question — "define these ids in this segment" — and does no I/O: no file, no
//! symbolizer, no `/proc`. What needs slow work (the names of addresses never seen, of threads)
//! is asked for with [`ChunkWriter::unresolved`] and handed back with [`ChunkWriter::resolved`],
//! so the flusher can do it with L released; the loom models in `loom-tests` drive this same code.
//!
//! Segment completeness (docs/sampler-protocol.md I7): every event written through this
//! type reports the threads and stack traces it references — a built-in event's thread and stack
//! fields write a reference and note it in one call (`fields.rs`), [`ChunkWriter::records`] reads
//! the leading ids of pre-encoded records — and [`ChunkWriter::checkpoint`] defines every one of
//! them the chunk lacks. There is no other way to write an event, so an event cannot reference a
//! constant its segment leaves undefined (`tests/constant_refs.rs`).
//!
//! Referenced constants are state of the chunk writer, not of one flush: an L holder that writes
//! between two flushes (the recorder thread's pass over full sampler buffers) leaves its
//! references for whichever L holder writes the next checkpoint.

mod fields;
mod pools;

pub use fields::{ClassKey, FieldValue, Fields, SettingsThread, ThreadStateKey, TypedEvent};
pub use pools::{Address, FrameName, Resolve};

use crate::clock::ClockPair;
use crate::stack::{DepthPolicy, StackKey, StackTable};
use crate::threads::RawComm;
use jfr_format::header::ChunkHeader;
use jfr_format::metadata::{ids, Metadata, FRAME_TYPES, THREAD_STATES};
use jfr_format::write::{self, Checkpoint};
use jfr_format::LeadingFields;
use pools::Pools;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// The chunk writer (see the module docs).
#[derive(Debug)]
pub struct ChunkWriter {
    pools: Pools,
    /// The recording's depth limits, counted in the frames a stack shows (the walk counted
    /// addresses; see [`DepthPolicy::limit_shown`]).
    depth: DepthPolicy,
    live: Option<Live>,
}

/// The chunk being written.
#[derive(Debug)]
struct Live {
    out: write::ChunkEncoder,
    start: ClockPair,
    defined: Defined,
    /// Constants referenced since the last checkpoint: the open segment's.
    refs: Refs,
    /// Registry version of the metadata this chunk holds (0: none yet).
    metadata_version: u64,
    /// The name each thread's own key (its tid) has in this chunk: defined, or fixed by a
    /// sample that referenced it before the checkpoint (a rename seen in between must not change
    /// what those samples meant).
    thread_names: HashMap<u32, String>,
}

/// Constants the live chunk has defined.
#[derive(Debug, Default)]
struct Defined {
    /// Thread keys: tids, and variants for other names (`Pools::thread_variant`).
    threads: HashSet<u64>,
    stacks: HashSet<u64>,
    methods: HashSet<u64>,
    classes: HashSet<u64>,
    symbols: HashSet<u64>,
    fixed_pools: bool,
}

/// Constants referenced by the open segment (ordered, so checkpoints are deterministic).
#[derive(Debug, Default)]
struct Refs {
    /// Thread keys (see `Defined::threads`).
    threads: BTreeSet<u64>,
    /// The thread and name of each variant key referenced and not defined yet.
    thread_variants: BTreeMap<u64, (u32, String)>,
    stacks: BTreeSet<u64>,
    /// Classes referenced by event fields (not through a stack's methods).
    classes: BTreeSet<u64>,
}

/// A thread key from [`ChunkWriter::sampled_thread`], for a built-in event's thread field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadKey(pub u64);

/// Bytes to write at a chunk offset, then the header to publish (by the guard protocol,
/// `jfr_format::header::publish_writes`).
#[derive(Debug)]
pub struct Publish {
    /// Chunk offset of `bytes`.
    pub offset: u64,
    /// Bytes written since the last publish.
    pub bytes: Vec<u8>,
    /// The header to publish once `bytes` are written.
    pub header: ChunkHeader,
}

/// What the next checkpoint needs that only slow work gives (see [`ChunkWriter::unresolved`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unresolved {
    /// Addresses never symbolized.
    pub addresses: Vec<Address>,
    /// Threads without a name.
    pub threads: Vec<u32>,
}

impl Unresolved {
    /// Nothing to resolve.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty() && self.threads.is_empty()
    }
}

/// The answers to an [`Unresolved`].
#[derive(Debug, Default)]
pub struct Resolved {
    /// The frames of each address.
    pub addresses: Vec<(Address, Vec<FrameName>)>,
    /// The name of each thread.
    pub threads: Vec<(u32, String)>,
}

/// Writes the fields of one event, noting the constants it references (see the module docs).
#[derive(Debug)]
pub struct EventOut<'a> {
    out: &'a mut Vec<u8>,
    refs: &'a mut Refs,
}

impl EventOut<'_> {
    /// A `long` (also a tick timestamp or duration).
    fn long(&mut self, v: i64) {
        write::put_long(self.out, v);
    }
    /// An `int`.
    fn int(&mut self, v: i32) {
        write::put_int(self.out, v);
    }
    /// A `float`.
    fn float(&mut self, v: f32) {
        write::put_float(self.out, v);
    }
    /// A `double`.
    fn double(&mut self, v: f64) {
        write::put_double(self.out, v);
    }
    /// A string.
    fn string(&mut self, s: &str) {
        write::put_string(self.out, Some(s));
    }
    /// A string, or null.
    fn optional_string(&mut self, s: Option<&str>) {
        write::put_string(self.out, s);
    }
    /// A reference to thread `tid` (0: none); the segment's checkpoint defines it.
    fn thread(&mut self, tid: u32) {
        write::put_varint(self.out, u64::from(tid));
        if tid != 0 {
            self.refs.threads.insert(u64::from(tid));
        }
    }
    /// A reference to a thread by the key [`ChunkWriter::sampled_thread`] gave (already noted).
    fn thread_key(&mut self, key: ThreadKey) {
        write::put_varint(self.out, key.0);
    }
    /// A reference to stack trace `key` (0: none); the segment's checkpoint defines it.
    fn stack(&mut self, key: StackKey) {
        write::put_varint(self.out, key.0);
        if key != StackKey::NONE {
            self.refs.stacks.insert(key.0);
        }
    }
    /// A reference to class `key` (from [`ChunkWriter::class_key`]; 0: none); the segment's
    /// checkpoint defines it.
    fn class(&mut self, key: u64) {
        write::put_varint(self.out, key);
        if key != 0 {
            self.refs.classes.insert(key);
        }
    }
    /// A key of a fixed pool (frame types, thread states), which every chunk defines.
    fn fixed(&mut self, key: u64) {
        write::put_varint(self.out, key);
    }
    /// A thread key written WITHOUT noting the reference: the bug I7 forbids, for the mutation
    /// that must make the loom models of `loom-tests/tests/sampler_chunks.rs` fail.
    #[cfg(recorder_mutation = "settings_thread_unreferenced")]
    fn unreferenced_thread(&mut self, tid: u32) {
        write::put_varint(self.out, u64::from(tid));
    }
}

impl ChunkWriter {
    /// No live chunk yet, empty pools; stacks are cut to `depth` as they are defined.
    #[cfg_attr(not(any(test, loom)), allow(dead_code))] // the tests' and the loom models' writer
    pub fn new(depth: DepthPolicy) -> ChunkWriter {
        ChunkWriter::with_key_base(depth, 0)
    }

    /// As [`ChunkWriter::new`], with constant keys above `base` (`Settings::constant_key_base`).
    pub fn with_key_base(depth: DepthPolicy, base: u64) -> ChunkWriter {
        ChunkWriter { pools: Pools::with_key_base(base), depth, live: None }
    }

    /// Starts a new live chunk at `start` (the previous one must be finished or abandoned).
    pub fn open(&mut self, start: ClockPair) {
        debug_assert!(self.live.is_none(), "a chunk is still live");
        self.live = Some(Live {
            out: write::ChunkEncoder::with_ticks_per_second(start.epoch_nanos, start.ticks, start.ticks_per_second),
            start,
            defined: Defined::default(),
            refs: Refs::default(),
            metadata_version: 0,
            thread_names: HashMap::new(),
        });
    }

    /// A chunk is live.
    pub fn is_open(&self) -> bool {
        self.live.is_some()
    }

    /// Where the live chunk starts.
    pub fn start(&self) -> Option<ClockPair> {
        self.live.as_ref().map(|l| l.start)
    }

    /// Size of the live chunk so far (0 without one).
    pub fn position(&self) -> u64 {
        self.live.as_ref().map_or(0, |l| l.out.position())
    }

    fn live(&mut self) -> &mut Live {
        self.live.as_mut().expect("the chunk writer has a live chunk (open it first)")
    }

    /// Writes one event of type `type_id`; `body` writes its fields after the type id.
    fn event(&mut self, type_id: u64, body: impl FnOnce(&mut EventOut<'_>)) {
        let live = self.live();
        let refs = &mut live.refs;
        live.out.write_event(type_id, |out| body(&mut EventOut { out, refs }));
    }

    /// Writes one built-in event (declared in `builtin.rs`: its fields in the metadata's order and
    /// types, see `fields.rs`).
    pub fn write<E: TypedEvent>(&mut self, event: &E) {
        self.event(E::TYPE_ID, |e| event.write_fields(e));
    }

    /// Writes one built-in event followed by fields the metadata declares after its own (the
    /// samples' context block).
    pub fn write_followed_by<E: TypedEvent>(&mut self, event: &E, more: &impl Fields) {
        self.event(E::TYPE_ID, |e| {
            event.write_fields(e);
            more.write_fields(e);
        });
    }

    /// The recording's key of the class `name`, in no package (for a [`ClassKey`] field).
    pub fn class_key(&mut self, name: &str) -> u64 {
        self.pools.class(name)
    }

    /// Copies complete records encoded by the commit path (size, type, startTime, duration,
    /// eventThread, stackTrace, fields) and notes the thread and stack each references. Returns
    /// the number of records.
    pub fn records(&mut self, bytes: &[u8]) -> u64 {
        let live = self.live();
        live.out.write_records(bytes);
        scan_records(bytes, &mut live.refs)
    }

    /// Notes a thread referenced from the fields of records copied with [`Self::records`]
    /// (`ThreadRef` fields, which the commit path reports on the side).
    pub fn reference_thread(&mut self, tid: u32) {
        if tid != 0 {
            self.live().refs.threads.insert(u64::from(tid));
        }
    }

    /// The key of thread `tid` for a sample taken while the kernel called it `comm` (the
    /// reference is noted): its own key (the tid) when the chunk calls it by that name, else a
    /// key for the thread under the name it had then ([`pools::Pools::thread_variant`]). So a
    /// thread that renamed itself (std names a spawned thread after its first microseconds, an
    /// application names its workers by their task) has every sample under the name it had
    /// when the sample was taken, whichever name the chunk defined the thread with first.
    pub fn sampled_thread(&mut self, tid: u32, comm: &RawComm) -> ThreadKey {
        let ChunkWriter { pools, live, .. } = self;
        let live = live.as_mut().expect("the chunk writer has a live chunk (open it first)");
        let own = u64::from(tid);
        if tid == 0 || comm.is_empty() {
            if tid != 0 {
                live.refs.threads.insert(own);
            }
            return ThreadKey(own);
        }
        if pools.thread_names.get(tid).is_none() {
            // Never seen: the sample says what it is called.
            pools.thread_names.observe(tid, &comm.to_string_lossy(), None);
        }
        let name = pools.thread_names.name_for(tid, comm).unwrap_or_default();
        let names = &pools.thread_names;
        let chunk_name = live.thread_names.entry(tid).or_insert_with(|| names.get(tid).unwrap_or_default().to_owned());
        // The JDK's reader keeps the first value it read for a key in every later chunk of a file
        // (jfr-format notes): the thread's own key serves only where both values agree.
        let first = pools.own_thread_key_names.get(&tid);
        if *chunk_name == *name && first.is_none_or(|f| *f == *name) {
            live.refs.threads.insert(own);
            return ThreadKey(own);
        }
        let name = name.into_owned();
        let key = pools.thread_variant(tid, &name);
        if live.refs.threads.insert(key) && !live.defined.threads.contains(&key) {
            live.refs.thread_variants.insert(key, (tid, name));
        }
        ThreadKey(key)
    }

    /// Writes the metadata if the chunk lacks registry version `version` (written after the
    /// events of a segment, so that it covers every type they use).
    pub fn metadata(&mut self, version: u64, now: i64, metadata: impl FnOnce() -> Metadata) {
        let live = self.live();
        if live.metadata_version != version {
            live.out.write_metadata(&metadata(), now);
            live.metadata_version = version;
        }
    }

    /// The name of thread `tid`, captured while it ran.
    pub fn thread_name(&self, tid: u32) -> Option<&str> {
        self.pools.thread_names.get(tid)
    }

    /// Takes in a sighting of thread `tid` (`ThreadNames::observe`): its kernel name now and, if
    /// the thread reported itself, the name it prefers. A rename shows in the chunks that follow
    /// (a chunk defines each thread once).
    pub fn observe_thread(&mut self, tid: u32, comm: &str, preferred: Option<&str>) {
        self.pools.thread_names.observe(tid, comm, preferred);
    }

    /// Forgets the name of `tid`: a new thread reported itself with that id.
    pub fn forget_thread(&mut self, tid: u32) {
        self.pools.thread_names.forget(tid);
        self.pools.forget_thread_variants(tid);
    }

    /// What the next checkpoint needs that only slow work gives: addresses of the segment's new
    /// stacks that were never symbolized, and threads without a name. Set lookups only.
    pub fn unresolved(&mut self, stacks: &StackTable) -> Unresolved {
        let mut out = Unresolved::default();
        let Some(live) = self.live.as_ref() else {
            return out;
        };
        for &key in &live.refs.stacks {
            if !live.defined.stacks.contains(&key) {
                self.pools.unknown_addresses(stacks, StackKey(key), &mut out.addresses);
            }
        }
        let mut seen = HashSet::new();
        out.addresses.retain(|a| seen.insert(*a));
        out.threads = live
            .refs
            .threads
            .iter()
            .copied()
            .filter(|&key| key >> 32 == 0 && !live.defined.threads.contains(&key))
            .map(|key| key as u32)
            .filter(|&t| !live.thread_names.contains_key(&t) && self.pools.thread_names.get(t).is_none())
            .collect();
        out
    }

    /// Takes the answers to an [`Unresolved`].
    pub fn resolved(&mut self, resolved: Resolved) {
        for (address, names) in resolved.addresses {
            self.pools.add_frames(address, names);
        }
        for (tid, name) in resolved.threads {
            if self.pools.thread_names.get(tid).is_none() {
                self.pools.thread_names.observe(tid, &name, None);
            }
        }
    }

    /// Writes one checkpoint that defines every constant the open segment references and the
    /// chunk lacks, referrers before referees (I8): stack traces, methods, classes, symbols,
    /// threads, and on the chunk's first checkpoint the fixed pools. `fallback` names what
    /// [`Self::resolved`] did not bring.
    pub fn checkpoint(&mut self, stacks: &StackTable, fallback: &mut dyn Resolve, now: i64) {
        let ChunkWriter { pools, depth, live } = self;
        let live = live.as_mut().expect("the chunk writer has a live chunk (open it first)");
        let refs = std::mem::take(&mut live.refs);
        let defined = &mut live.defined;
        let mut cp = Checkpoint::new();
        let mut methods = Vec::new();
        for &key in &refs.stacks {
            if defined.stacks.contains(&key) {
                continue;
            }
            // A key this table never made (none should reach here) stays undefined: a reader
            // shows no stack rather than a wrong one.
            let Some((frames, cut)) = pools.expand_stack(stacks, StackKey(key), depth, fallback) else {
                continue;
            };
            defined.stacks.insert(key);
            // Cut by the walk (the key says so) or here, by the limits counted in shown frames.
            let truncated = StackKey(key).truncated() || cut;
            cp.add(ids::STACK_TRACE, key, |o| {
                write::put_bool(o, truncated);
                write::put_varint(o, frames.len() as u64);
                for f in &frames {
                    write::put_varint(o, f.method);
                    write::put_int(o, f.line);
                    write::put_int(o, 0);
                    write::put_varint(o, f.frame_type);
                }
            });
            methods.extend(frames.iter().map(|f| f.method));
        }
        let mut symbols = Vec::new();
        let mut mark = |defined: &mut Defined, s: u64| {
            if defined.symbols.insert(s) {
                symbols.push(s);
            }
        };
        let mut classes: Vec<u64> = refs.classes.iter().copied().collect();
        for m in methods {
            if !defined.methods.insert(m) {
                continue;
            }
            let def = pools.method_defs[&m];
            let descriptor = pools.symbol(pools::NATIVE_DESCRIPTOR);
            cp.add(ids::METHOD, m, |o| {
                write::put_varint(o, def.class);
                write::put_varint(o, def.name);
                write::put_varint(o, descriptor);
                write::put_int(o, 0x100);
                write::put_bool(o, false);
            });
            classes.push(def.class);
            mark(defined, def.name);
            mark(defined, descriptor);
        }
        for c in classes {
            if !defined.classes.insert(c) {
                continue;
            }
            let def = pools.class_defs[&c];
            cp.add(ids::CLASS, c, |o| {
                write::put_varint(o, 0);
                write::put_varint(o, def.name);
                // No package (see `pools::NATIVE_DESCRIPTOR`).
                write::put_varint(o, 0);
                write::put_int(o, 0);
                write::put_bool(o, false);
            });
            mark(defined, def.name);
        }
        for s in symbols {
            let text = pools.symbol_text.get(&s).map_or("", String::as_str);
            // Tag 3 always, "" included: async-profiler's reader accepts no other in this pool.
            cp.add(ids::SYMBOL, s, |o| write::put_utf8(o, text));
        }
        for &key in &refs.threads {
            if !defined.threads.insert(key) {
                continue;
            }
            let tid = key as u32;
            let name = match refs.thread_variants.get(&key) {
                Some((_, name)) => name.as_str(),
                None => {
                    if !live.thread_names.contains_key(&tid) && pools.thread_names.get(tid).is_none() {
                        let name = fallback.thread_name(tid);
                        pools.thread_names.observe(tid, &name, None);
                    }
                    let names = &pools.thread_names;
                    let name =
                        live.thread_names.entry(tid).or_insert_with(|| names.get(tid).unwrap_or_default().to_owned());
                    pools.own_thread_key_names.entry(tid).or_insert_with(|| name.clone());
                    name.as_str()
                }
            };
            cp.add(ids::THREAD, key, |o| {
                write::put_string(o, Some(name));
                write::put_long(o, i64::from(tid));
                write::put_string(o, Some(name));
                write::put_long(o, 0);
                write::put_varint(o, 0);
            });
        }
        if !defined.fixed_pools {
            defined.fixed_pools = true;
            for (key, name) in FRAME_TYPES {
                cp.add(ids::FRAME_TYPE, key, |o| write::put_string(o, Some(name)));
            }
            for (key, name) in THREAD_STATES {
                cp.add(ids::THREAD_STATE, key, |o| write::put_string(o, Some(name)));
            }
        }
        live.out.write_checkpoint(&cp, now, true);
    }

    /// The open segment references constants its checkpoint has not defined yet.
    pub fn has_open_references(&self) -> bool {
        self.live
            .as_ref()
            .is_some_and(|l| !l.refs.threads.is_empty() || !l.refs.stacks.is_empty() || !l.refs.classes.is_empty())
    }

    /// Publishes everything written so far as the chunk's next generation: the bytes to write
    /// and the header to publish after them. `None` before the chunk has metadata (a reader
    /// would spin on it: docs/jfr-format.md, "Publishing a live chunk"); the bytes then wait for the next publish.
    pub fn publish(&mut self, duration: i64) -> Option<Publish> {
        let live = self.live();
        let header = live.out.publish(duration)?;
        let (offset, bytes) = live.out.take_pending();
        Some(Publish { offset, bytes, header })
    }

    /// Finishes the live chunk (state 0; the final flag if the recording ends with it) and
    /// closes it. `None` if it never had metadata (nothing of it was ever published).
    pub fn finish(&mut self, duration: i64, final_chunk: bool) -> Option<Publish> {
        let mut live = self.live.take()?;
        let header = live.out.finish(duration, final_chunk)?;
        let (offset, bytes) = live.out.take_pending();
        Some(Publish { offset, bytes, header })
    }

    /// Drops the live chunk without finishing it (its writes failed).
    pub fn abandon(&mut self) {
        self.live = None;
    }
}

/// Reads the leading implicit fields of every record in `bytes` (size, type, startTime,
/// duration, eventThread, stackTrace) and notes the thread and stack ids. Returns the record count.
fn scan_records(bytes: &[u8], refs: &mut Refs) -> u64 {
    let mut pos = 0usize;
    let mut count = 0;
    // Consecutive records mostly repeat the previous ids: skip the set lookups for those.
    let (mut last_thread, mut last_stack) = (u32::MAX, u64::MAX);
    while pos < bytes.len() {
        let mut lead = LeadingFields::new(&bytes[pos..]);
        let mut fields = [0u64; 6];
        for f in fields.iter_mut() {
            match lead.varint() {
                Some(v) => *f = v,
                None => break,
            }
        }
        let (size, thread, stack) = (fields[0], fields[4] as u32, fields[5]);
        if thread != last_thread {
            if thread != 0 {
                refs.threads.insert(u64::from(thread));
            }
            last_thread = thread;
        }
        if stack != last_stack {
            if stack != 0 {
                refs.stacks.insert(stack);
            }
            last_stack = stack;
        }
        count += 1;
        if size == 0 {
            break;
        }
        pos += size as usize;
    }
    count
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    struct Names;
    impl Resolve for Names {
        fn frames(&mut self, ip: u64, _: bool) -> Vec<FrameName> {
            vec![FrameName { module: format!("c{ip}"), function: format!("m{ip}"), line: None, inlined: false }]
        }
        fn thread_name(&mut self, tid: u32) -> String {
            format!("t{tid}")
        }
    }

    /// The event the tests write: a sample (start time, thread, stack, thread state).
    const SAMPLE: u64 = ids::FIRST_EVENT;

    fn metadata() -> Metadata {
        use jfr_format::metadata::{event_class, EventTypeSpec, Field};
        let mut classes = jfr_format::metadata::jdk_types();
        classes.push(event_class(EventTypeSpec {
            id: SAMPLE,
            name: "test.Sample",
            label: "Sample",
            description: None,
            category: &[],
            duration: false,
            thread: false,
            stack_trace: false,
            fields: vec![
                Field::new("sampledThread", ids::THREAD).pooled(),
                Field::new("stackTrace", ids::STACK_TRACE).pooled(),
                Field::new("state", ids::THREAD_STATE).pooled(),
            ],
        }));
        Metadata { id: 1, classes, region: Default::default() }
    }

    /// Every reference of every event in the published bytes resolves (what a live reader sees).
    fn assert_all_defined(file: &[u8]) {
        let chunk = jfr_format::Chunk::parse(bytes::Bytes::copy_from_slice(file), 0).unwrap();
        for event in chunk.events() {
            for value in &event.unwrap().values {
                if let jfr_format::Value::Ref { type_id, key } = *value {
                    if key != 0 && (type_id == ids::THREAD || type_id == ids::STACK_TRACE) {
                        assert!(chunk.resolve(type_id, key).unwrap().is_some(), "{type_id}:{key} undefined");
                    }
                }
            }
        }
    }

    fn publish_into(file: &mut Vec<u8>, p: Publish) {
        let end = p.offset as usize + p.bytes.len();
        if file.len() < end {
            file.resize(end, 0);
        }
        file[p.offset as usize..end].copy_from_slice(&p.bytes);
        for (offset, bytes) in jfr_format::header::publish_writes(&p.header) {
            file[offset as usize..offset as usize + bytes.len()].copy_from_slice(&bytes);
        }
    }

    #[test]
    fn a_segment_defines_exactly_what_it_references_once_per_chunk() {
        let stacks = StackTable::new(1024);
        let key = stacks.intern(&[3, 2, 1], false);
        let mut w = ChunkWriter::new(crate::stack::DepthPolicy::default());
        w.open(ClockPair::logical(0));
        let mut file = Vec::new();
        for segment in 0..3u32 {
            w.event(SAMPLE, |e| {
                e.long(1);
                e.thread(7 + segment);
                e.stack(key);
                e.fixed(jfr_format::metadata::THREAD_STATE_RUNNABLE);
            });
            let unresolved = w.unresolved(&stacks);
            if segment == 0 {
                assert_eq!(unresolved.addresses, vec![(3, false), (2, true), (1, true)]);
            } else {
                assert!(unresolved.addresses.is_empty(), "known addresses are not asked for again");
            }
            assert_eq!(unresolved.threads, vec![7 + segment]);
            let mut names = Names;
            w.resolved(Resolved {
                addresses: unresolved.addresses.iter().map(|&(ip, r)| ((ip, r), names.frames(ip, r))).collect(),
                threads: unresolved.threads.iter().map(|&t| (t, names.thread_name(t))).collect(),
            });
            w.metadata(1, 0, metadata);
            w.checkpoint(&stacks, &mut Names, 0);
            assert!(!w.has_open_references());
            publish_into(&mut file, w.publish(1).unwrap());
            assert_all_defined(&file);
        }
        let chunk = jfr_format::Chunk::parse(bytes::Bytes::from(file), 0).unwrap();
        assert_eq!(chunk.pool_keys(ids::STACK_TRACE).count(), 1, "the stack is defined once per chunk");
        assert_eq!(chunk.pool_keys(ids::THREAD).count(), 3);
    }
}
