//! The recording's constant pools: symbols, classes, methods, the frames of each address and
//! the names of threads. Keys are assigned once per recording and never reused for
//! another value (docs/jfr-format.md, "Constant pools"), so a constant keeps its key in every chunk; which of them a
//! chunk has *defined* is the chunk writer's business (`super::Defined`).
//!
//! How a native frame is named (class, method, descriptor, frame type: [`NATIVE_DESCRIPTOR`]) and
//! how a stack-trace key becomes the frames a reader shows (`Pools::expand_stack`: inlined frames,
//! the recorder's own frames dropped, the depth limits counted in shown frames) live here, in one
//! place.

use crate::stack::{as_elided, DepthPolicy, Shown, StackKey, StackTable, INSTRUMENTED_MARK};
use jfr_format::metadata::{FRAME_TYPE_INLINED, FRAME_TYPE_NATIVE};
use std::collections::{BTreeMap, HashMap, HashSet};

/// One frame of an address as the symbolizer names it (innermost inlined frame first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameName {
    /// The file the code lives in (`myapp`, `libc.so.6`, `linux-vdso.so.1`; "" for an address
    /// in no mapping): the frame's class.
    pub module: String,
    /// The whole demangled function name (`myapp::parser::Parser::parse`): the frame's method.
    pub function: String,
    /// Source line, if debug info has one.
    pub line: Option<u32>,
    /// An inlined frame (all but the physical, outermost frame of an address).
    pub inlined: bool,
}

/// Addresses whose serialized frames the pools keep (about 100 bytes each).
const MAX_CACHED_ADDRESSES: usize = 1 << 16;

/// What the checkpoint needs from outside the chunk writer: names of addresses and of threads.
/// The flusher answers it with L released (`ChunkWriter::unresolved` / `resolved`); this trait
/// is the fallback for what is still missing when the checkpoint is written.
pub trait Resolve {
    /// The frames of `ip` (innermost inlined first); `is_return_address` for every frame of a
    /// stack but the leaf.
    fn frames(&mut self, ip: u64, is_return_address: bool) -> Vec<FrameName>;
    /// The name of thread `tid`.
    fn thread_name(&mut self, tid: u32) -> String;
}

/// An address of a stack, as the symbolizer is asked for it: (ip, is a return address).
pub type Address = (u64, bool);

/// A frame as serialized: method key, line, frame type key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FrameRef {
    pub method: u64,
    pub line: i32,
    pub frame_type: u64,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct MethodDef {
    pub class: u64,
    pub name: u64,
}

/// A class: its name's symbol (in no package, see [`NATIVE_DESCRIPTOR`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct ClassDef {
    pub name: u64,
}

/// How frames of native code are named, for every reader (async-profiler's convention):
/// the method is the whole demangled function name, its class is the module the code lives
/// in (`libc.so.6`, `myapp`), in no package, and its descriptor has no arguments and the empty
/// class as return type. So:
/// - JMC renders `libc.so.6.epoll_wait()`: a class with a package must start with the package
///   name and a dot (`getFullName` throws otherwise), a class name starting with `[` is taken for
///   an array type, and a descriptor without a return type (`()`) makes
///   `FormatToolkit.getHumanReadable` return null;
/// - async-profiler's converter shows the function name alone for native frames (the FrameType
///   pool has `Kernel`); `jfr print` and Pyroscope show `libc.so.6.epoll_wait`;
/// - our own tools show the function alone (`FrameInfo::qualified_name` knows this descriptor).
pub(super) const NATIVE_DESCRIPTOR: &str = "()L;";

/// The class of the `<elided:K>` marker frame: says in every reader why frames are missing
/// (`jfr print` shows `stack-depth-limit.<elided:3>()`).
const ELIDED_CLASS: &str = "stack-depth-limit";

/// A module's name as a frame's class (see [`NATIVE_DESCRIPTOR`]): never empty (JMC and
/// `jfr print` would show `.function`) and never starting with `[` (JMC parses that as an array
/// descriptor): `[anon:x]` becomes `anon:x`, an address outside every mapping `unknown`.
fn frame_class_name(module: &str) -> &str {
    let name = module.strip_prefix('[').map_or(module, |m| m.strip_suffix(']').unwrap_or(m));
    if name.is_empty() || name.starts_with('[') {
        "unknown"
    } else {
        name
    }
}

/// Functions whose frames are the recorder's own and are dropped from the inner end of stacks.
const OWN_FUNCTION_PREFIXES: [&str; 8] = [
    "recorder::alloc",
    "<recorder::alloc",
    "recorder::event",
    "<recorder::event",
    "recorder::commit",
    "recorder::unwind",
    "recorder::stack",
    "recorder::buffer",
];

/// Functions of the instrumentation libraries whose calls the recorder takes stacks at (a span's
/// creation, a tracing event), dropped from the inner end of those stacks only
/// ([`INSTRUMENTED_MARK`]): a CPU sample in them is the application's cost and keeps them.
const INSTRUMENTATION_PREFIXES: [&str; 7] = [
    "tracing::",
    "<tracing::",
    "tracing_core::",
    "<tracing_core::",
    "tracing_subscriber::",
    "<tracing_subscriber::",
    "<recorder::tracing::",
];

/// The pools (see the module docs).
#[derive(Debug)]
pub(super) struct Pools {
    next_key: u64,
    symbol_keys: HashMap<String, u64>,
    pub symbol_text: BTreeMap<u64, String>,
    class_keys: HashMap<String, u64>,
    pub class_defs: HashMap<u64, ClassDef>,
    method_keys: HashMap<(u64, u64), u64>,
    pub method_defs: HashMap<u64, MethodDef>,
    /// The serialized frames of each address.
    frames: HashMap<Address, Vec<FrameRef>>,
    /// Methods of the recorder's own commit path (see `OWN_FUNCTION_PREFIXES`).
    own_frames: HashSet<u64>,
    /// Methods named by [`INSTRUMENTATION_PREFIXES`].
    instrumentation_frames: HashSet<u64>,
    /// Thread names, captured while the threads run (and their renames).
    pub thread_names: crate::threads::ThreadNames,
    /// The keys of threads under a name other than the one their own key (the tid) has in a
    /// chunk, per tid: (name, key). See [`Pools::thread_variant`].
    thread_variants: HashMap<u32, Vec<(String, u64)>>,
    /// The next variant number (the high half of a variant key).
    next_thread_variant: u64,
    /// The name each thread's own key (its tid) had where the recording first defined it: what
    /// the JDK's reader shows for that key in every chunk of a file.
    pub own_thread_key_names: HashMap<u32, String>,
    scratch: Vec<u64>,
}

impl Pools {
    #[cfg(test)]
    pub fn new() -> Pools {
        Pools::with_key_base(0)
    }

    /// Pools whose keys start above `base` (see `StackTable::with_key_base`).
    pub fn with_key_base(base: u64) -> Pools {
        Pools {
            next_key: base + 1,
            symbol_keys: HashMap::new(),
            symbol_text: BTreeMap::new(),
            class_keys: HashMap::new(),
            class_defs: HashMap::new(),
            method_keys: HashMap::new(),
            method_defs: HashMap::new(),
            frames: HashMap::new(),
            own_frames: HashSet::new(),
            instrumentation_frames: HashSet::new(),
            thread_names: Default::default(),
            thread_variants: HashMap::new(),
            next_thread_variant: 1,
            own_thread_key_names: HashMap::new(),
            scratch: Vec::new(),
        }
    }

    fn key(&mut self) -> u64 {
        let k = self.next_key;
        self.next_key += 1;
        k
    }

    pub fn symbol(&mut self, text: &str) -> u64 {
        if let Some(&k) = self.symbol_keys.get(text) {
            return k;
        }
        let k = self.key();
        self.symbol_keys.insert(text.to_owned(), k);
        self.symbol_text.insert(k, text.to_owned());
        k
    }

    /// The class of native code: its module (see [`frame_class_name`]), in no package.
    pub fn class(&mut self, module: &str) -> u64 {
        let name = frame_class_name(module);
        if let Some(&k) = self.class_keys.get(name) {
            return k;
        }
        let name_sym = self.symbol(name);
        let k = self.key();
        self.class_keys.insert(name.to_owned(), k);
        self.class_defs.insert(k, ClassDef { name: name_sym });
        k
    }

    /// A native function: `name` is the whole demangled name (`myapp::parser::Parser::parse`).
    fn method(&mut self, class: u64, name: &str) -> u64 {
        let name_sym = self.symbol(name);
        let key = match self.method_keys.get(&(class, name_sym)) {
            Some(&k) => k,
            None => {
                let k = self.key();
                self.method_keys.insert((class, name_sym), k);
                self.method_defs.insert(k, MethodDef { class, name: name_sym });
                k
            }
        };
        if OWN_FUNCTION_PREFIXES.iter().any(|p| name.starts_with(p)) {
            self.own_frames.insert(key);
        }
        if INSTRUMENTATION_PREFIXES.iter().any(|p| name.starts_with(p)) {
            self.instrumentation_frames.insert(key);
        }
        key
    }

    /// The key of thread `tid` under `name`, where a chunk calls the thread's own key (the tid)
    /// otherwise: a sample taken before or after a rename. Readers keep the first value they see
    /// for a key, in every chunk (jfr-format notes: keys are immutable for the whole recording),
    /// so each (thread, name) gets its own key, `n << 32 | tid` (n from 1: never a tid), kept
    /// until the thread is forgotten.
    pub fn thread_variant(&mut self, tid: u32, name: &str) -> u64 {
        let variants = self.thread_variants.entry(tid).or_default();
        if let Some(&(_, key)) = variants.iter().find(|(n, _)| n == name) {
            return key;
        }
        let key = (self.next_thread_variant << 32) | u64::from(tid);
        self.next_thread_variant += 1;
        variants.push((name.to_owned(), key));
        key
    }

    /// Forgets the name variants of `tid` (a new thread has its id): its names get new keys.
    pub fn forget_thread_variants(&mut self, tid: u32) {
        self.thread_variants.remove(&tid);
    }

    /// The `<elided:K>` marker frame.
    fn elided_frame(&mut self, k: u64) -> FrameRef {
        let class = self.class(ELIDED_CLASS);
        let method = self.method(class, &format!("<elided:{k}>"));
        FrameRef { method, line: -1, frame_type: FRAME_TYPE_NATIVE }
    }

    /// The address needs no symbolizer (its frames are known, or it is a synthetic frame).
    pub fn knows(&self, address: Address) -> bool {
        as_elided(address.0).is_some() || self.frames.contains_key(&address)
    }

    /// Takes the symbolizer's names of `address` into the pools.
    pub fn add_frames(&mut self, address: Address, names: Vec<FrameName>) {
        if self.frames.contains_key(&address) {
            return;
        }
        let mut refs = Vec::with_capacity(names.len());
        for f in names {
            let class = self.class(&f.module);
            let method = self.method(class, &f.function);
            refs.push(FrameRef {
                method,
                line: f.line.map_or(-1, |l| l as i32),
                frame_type: if f.inlined { FRAME_TYPE_INLINED } else { FRAME_TYPE_NATIVE },
            });
        }
        self.cache_frames(address, refs);
    }

    /// Keeps the frames of `address`, within [`MAX_CACHED_ADDRESSES`]: a process that keeps
    /// reaching new addresses has old ones symbolized again rather than a cache that only grows.
    fn cache_frames(&mut self, address: Address, refs: Vec<FrameRef>) {
        if self.frames.len() >= MAX_CACHED_ADDRESSES {
            self.frames.clear();
        }
        self.frames.insert(address, refs);
    }

    /// The serialized frames of one (real, not elided) address, inlined frames first;
    /// `fallback` names an address the flusher did not resolve beforehand.
    fn frames_of(&mut self, address: Address, fallback: &mut dyn Resolve) -> Vec<FrameRef> {
        debug_assert!(as_elided(address.0).is_none(), "the elided marker is no address");
        if let Some(f) = self.frames.get(&address) {
            return f.clone();
        }
        let names = fallback.frames(address.0, address.1);
        self.add_frames(address, names);
        self.frames[&address].clone()
    }

    /// The frames a reader shows for stack-trace `key`, innermost first, and whether the depth
    /// limits cut any here: every address expanded into its inlined frames, the recorder's own
    /// innermost frames dropped, then `depth` applied to what is left, counted in those frames
    /// ([`DepthPolicy::limit_shown`]: the walk kept addresses, each of which may show as several
    /// frames). `None` if the key names no stack of `stacks`.
    pub fn expand_stack(
        &mut self,
        stacks: &StackTable,
        key: StackKey,
        depth: &DepthPolicy,
        fallback: &mut dyn Resolve,
    ) -> Option<(Vec<FrameRef>, bool)> {
        let mut ips = std::mem::take(&mut self.scratch);
        ips.clear();
        let found = stacks.expand(key, &mut ips);
        let instrumented = ips.first() == Some(&INSTRUMENTED_MARK);
        let mut shown = Vec::with_capacity(ips.len());
        if found {
            // The mark is no frame: the address after it is the stack's first.
            let first = usize::from(instrumented);
            for (i, &ip) in ips.iter().enumerate().skip(first) {
                match as_elided(ip) {
                    Some(k) => shown.push(Shown::Elided(k)),
                    // Every frame but the leaf holds a return address (see `symbolize.rs`).
                    None => shown.extend(self.frames_of((ip, i > first), fallback).into_iter().map(Shown::Frame)),
                }
            }
        }
        self.scratch = ips;
        if !found {
            return None;
        }
        // The recorder's own frames never show: the commit API is inlined into its caller, so
        // the innermost address of an event's stack also names `Event::commit` and friends.
        let own =
            shown.iter().take_while(|f| matches!(f, Shown::Frame(f) if self.own_frames.contains(&f.method))).count();
        if own < shown.len() {
            shown.drain(..own);
        }
        if instrumented {
            let library = shown
                .iter()
                .take_while(|f| matches!(f, Shown::Frame(f) if self.instrumentation_frames.contains(&f.method)))
                .count();
            if library < shown.len() {
                shown.drain(..library);
            }
        }
        let cut = depth.limit_shown(&mut shown);
        let frames = shown
            .into_iter()
            .map(|f| match f {
                Shown::Frame(f) => f,
                Shown::Elided(k) => self.elided_frame(k),
            })
            .collect();
        Some((frames, cut))
    }

    /// The addresses of stack `key` the pools cannot name yet (appended to `out`).
    pub fn unknown_addresses(&mut self, stacks: &StackTable, key: StackKey, out: &mut Vec<Address>) {
        let mut ips = std::mem::take(&mut self.scratch);
        ips.clear();
        if stacks.expand(key, &mut ips) {
            // As `expand_stack` reads them.
            let first = usize::from(ips.first() == Some(&INSTRUMENTED_MARK));
            for (i, &ip) in ips.iter().enumerate().skip(first) {
                if !self.knows((ip, i > first)) {
                    out.push((ip, i > first));
                }
            }
        }
        self.scratch = ips;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names addresses 0x100 (tracing's `Span::child_of` inlined into `app::handle`), 0x200
    /// (`app::main`) and 0x300 (`tracing_core::dispatcher::get_default`, a frame of its own).
    struct Names;

    impl Resolve for Names {
        fn frames(&mut self, ip: u64, _is_return_address: bool) -> Vec<FrameName> {
            let frame = |function: &str, inlined| FrameName {
                module: "app".into(),
                function: function.into(),
                line: None,
                inlined,
            };
            match ip {
                0x100 => vec![frame("tracing::span::Span::child_of", true), frame("app::handle", false)],
                0x200 => vec![frame("app::main", false)],
                0x300 => vec![frame("tracing_core::dispatcher::get_default", false)],
                _ => vec![frame("?", false)],
            }
        }
        fn thread_name(&mut self, _tid: u32) -> String {
            String::new()
        }
    }

    fn shown(pools: &mut Pools, stacks: &StackTable, ips: &[u64]) -> Vec<String> {
        let key = stacks.intern(ips, false);
        let (frames, _) = pools.expand_stack(stacks, key, &DepthPolicy::default(), &mut Names).unwrap();
        frames.iter().map(|f| pools.symbol_text[&pools.method_defs[&f.method].name].clone()).collect()
    }

    #[test]
    fn an_instrumented_stack_starts_at_the_application_and_others_keep_the_library() {
        let stacks = StackTable::new(16);
        let mut pools = Pools::new();
        // Inlined into the application's function, and a frame of its own before it.
        assert_eq!(shown(&mut pools, &stacks, &[INSTRUMENTED_MARK, 0x100, 0x200]), ["app::handle", "app::main"]);
        assert_eq!(shown(&mut pools, &stacks, &[INSTRUMENTED_MARK, 0x300, 0x100, 0x200]), ["app::handle", "app::main"]);
        // A CPU sample in the library is the application's cost: it keeps the library's frames.
        assert_eq!(
            shown(&mut pools, &stacks, &[0x300, 0x100, 0x200]),
            ["tracing_core::dispatcher::get_default", "tracing::span::Span::child_of", "app::handle", "app::main"]
        );
        // A stack of the library's frames only is kept whole rather than emptied.
        assert_eq!(shown(&mut pools, &stacks, &[INSTRUMENTED_MARK, 0x300]), ["tracing_core::dispatcher::get_default"]);
        // The mark is never asked for.
        let mut unknown = Vec::new();
        let mut fresh = Pools::new();
        fresh.unknown_addresses(&stacks, stacks.intern(&[INSTRUMENTED_MARK, 0x100, 0x200], false), &mut unknown);
        assert_eq!(unknown, [(0x100, false), (0x200, true)]);
    }
}
