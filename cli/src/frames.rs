//! How frames are named in every view (`print`, `collapsed`, `flamegraph`, `top`, `pprof`), and
//! which of a thread's outermost frames are runtime boilerplate that the profile views fold away.

use jfr_format::FrameInfo;

/// A frame's name: `class.method`, or the method alone when there is no class. A JVM class name
/// in its internal form (`java/lang/Thread`) is shown with dots (`java.lang.Thread.run`), as the
/// JDK's tools show it; an `<elided:K>` marker (frames dropped between the two kept ends of a
/// stack) stays as it is.
pub fn display_name(frame: &FrameInfo) -> String {
    if frame.method.starts_with("<elided:") {
        return frame.method.clone();
    }
    if frame.class.is_empty() {
        return frame.method.clone();
    }
    if is_jvm_internal_name(&frame.class) {
        format!("{}.{}", frame.class.replace('/', "."), frame.method)
    } else {
        frame.qualified_name()
    }
}

/// `java/lang/Thread`: slashes between identifiers, and none of what native names hold (a path's
/// leading `/`, `::`, spaces, brackets).
fn is_jvm_internal_name(class: &str) -> bool {
    class.contains('/')
        && !class.starts_with('/')
        && !class.contains("::")
        && !class.contains(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '[' | ']' | '(' | ')'))
}

/// A frame's name in folded stacks (`outer;...;inner count`): [`display_name`] made one token,
/// `;` becoming `:` and whitespace and control characters `_`.
pub fn folded_name(frame: &FrameInfo) -> String {
    token(&display_name(frame))
}

/// `text` as one token of a folded stack.
pub fn token(text: &str) -> String {
    if text.is_empty() {
        return "[unknown]".to_owned();
    }
    text.chars()
        .map(|c| match c {
            ';' => ':',
            c if c.is_whitespace() || c.is_control() => '_',
            c => c,
        })
        .collect()
}

/// How many of the outermost frames of `frames` (innermost first) are thread-start boilerplate:
/// in a Rust thread, everything from the standard library's `__rust_begin_short_backtrace`
/// outwards (the frame std itself cuts panic backtraces at: the thread spawn machinery, panic
/// catching, `start_thread`, `clone3`) and the `FnOnce::call_once` shims just inside it; in other
/// threads, the C library's outermost frames (`_start`, `__libc_start_main`,
/// `__libc_start_call_main`, `start_thread`, `clone`, `clone3`) and the wrappers of `recorder
/// record`'s preload library just inside them. A stack that reaches none of
/// them (truncated, or cut by a missing frame pointer) keeps every frame. At least one frame is
/// always kept.
pub fn runtime_frames(frames: &[FrameInfo]) -> usize {
    let outermost_first = || frames.iter().rev();
    let rust_start = outermost_first().position(|f| f.method.ends_with("__rust_begin_short_backtrace"));
    let mut drop = match rust_start {
        Some(i) => {
            let shims = outermost_first().skip(i + 1).take_while(|f| is_call_once_shim(f)).count();
            i + 1 + shims
        }
        None => outermost_first()
            .take_while(|f| {
                C_START_FRAMES.contains(&f.method.as_str())
                    || f.class == PRELOAD_LIBRARY
                    || is_thread_start_machinery(f)
            })
            .count(),
    };
    drop = drop.min(frames.len().saturating_sub(1));
    drop
}

/// The frames between `start_thread` and `__rust_begin_short_backtrace` of a Rust thread (std's
/// `thread_start`, the spawn closure, its panic catching) and the recorder's own start routine of
/// threads sampled from their first instruction: a sample taken before the thread reached its
/// closure has these outermost and no `__rust_begin_short_backtrace`.
fn is_thread_start_machinery(frame: &FrameInfo) -> bool {
    let name = joined_name(frame);
    name.contains("thread_hooks::start_trampoline")
        || (name.contains("std::sys::thread") && name.contains("thread_start"))
        || name.contains("spawn_unchecked")
        || name.contains("catch_unwind")
        || name.contains("__rust_try")
        || names_call_once_shim(&name)
}

/// `recorder record`'s preload library: its wrappers of `main` and of each thread's start routine
/// sit between the C library's start frames and the program's.
const PRELOAD_LIBRARY: &str = "recorder_preload";

/// The C library's frames that start a process or a thread.
const C_START_FRAMES: &[&str] = &[
    "_start",
    "__libc_start_main",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "start_thread",
    "clone",
    "clone3",
];

/// `core::ops::function::FnOnce::call_once` (and its `{{vtable.shim}}`): the call of the thread's
/// (or `main`'s) closure.
fn is_call_once_shim(frame: &FrameInfo) -> bool {
    names_call_once_shim(&joined_name(frame))
}

fn names_call_once_shim(joined: &str) -> bool {
    joined.contains("FnOnce") && joined.contains("::call_once")
}

/// `class::method`: the class may be the module path (`core::ops::function::FnOnce` +
/// `call_once`) or the library, with the whole symbol as the method; the tests above look for
/// the parts wherever they are.
fn joined_name(frame: &FrameInfo) -> String {
    format!("{}::{}", frame.class, frame.method)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(class: &str, method: &str) -> FrameInfo {
        FrameInfo { method: method.into(), class: class.into(), ..FrameInfo::default() }
    }

    #[test]
    fn jvm_class_names_use_dots_and_native_names_stay() {
        assert_eq!(display_name(&frame("java/lang/Thread", "run")), "java.lang.Thread.run");
        assert_eq!(display_name(&frame("recorder::demo_workload", "worker")), "recorder::demo_workload.worker");
        assert_eq!(display_name(&frame("/usr/lib/libc.so.6", "start_thread")), "/usr/lib/libc.so.6.start_thread");
        assert_eq!(display_name(&frame("<T as a/b>", "f")), "<T as a/b>.f");
        assert_eq!(display_name(&frame("[elided]", "<elided:7>")), "<elided:7>");
        assert_eq!(display_name(&frame("", "main")), "main");
    }

    #[test]
    fn folded_names_are_one_token() {
        assert_eq!(folded_name(&frame("<T as Fn>", "call once;x")), "<T_as_Fn>.call_once:x");
        assert_eq!(folded_name(&frame("[elided]", "<elided:7>")), "<elided:7>");
        assert_eq!(folded_name(&FrameInfo::default()), "[unknown]");
    }

    /// Innermost first, as in a stack trace.
    fn stack(names: &[(&str, &str)]) -> Vec<FrameInfo> {
        names.iter().map(|(c, m)| frame(c, m)).collect()
    }

    #[test]
    fn rust_thread_start_frames_are_runtime_frames() {
        let frames = stack(&[
            ("app", "hot"),
            ("app::worker", "{{closure}}"),
            ("std::sys::backtrace", "__rust_begin_short_backtrace"),
            ("std::thread::lifecycle::spawn_unchecked::{{closure}}", "{{closure}}"),
            ("std::panicking", "catch_unwind"),
            ("core::ops::function::FnOnce", "call_once{{vtable.shim}}"),
            ("<std::sys::thread::unix::Thread>::new", "thread_start"),
            ("libc.so.6", "start_thread"),
            ("libc.so.6", "clone3"),
        ]);
        assert_eq!(runtime_frames(&frames), 7);
        // main: the call_once shim inside the marker goes too.
        let main = stack(&[
            ("app", "main"),
            ("core::ops::function::FnOnce", "call_once"),
            ("std::sys::backtrace", "__rust_begin_short_backtrace"),
            ("std::rt", "lang_start_internal"),
            ("libc.so.6", "__libc_start_call_main"),
            ("", "_start"),
        ]);
        assert_eq!(runtime_frames(&main), 5);
        // Native frames named by their library and whole symbol.
        let by_library = stack(&[
            ("app", "app::main"),
            ("app", "core::ops::function::FnOnce::call_once"),
            ("app", "std::sys::backtrace::__rust_begin_short_backtrace"),
            ("app", "std::rt::lang_start_internal"),
            ("libc.so.6", "__libc_start_call_main"),
        ]);
        assert_eq!(runtime_frames(&by_library), 4);
    }

    #[test]
    fn c_start_frames_are_runtime_frames_and_cut_stacks_keep_everything() {
        let c = stack(&[("", "work"), ("", "thread_main"), ("libc.so.6", "start_thread"), ("libc.so.6", "clone3")]);
        assert_eq!(runtime_frames(&c), 2);
        let cut = stack(&[("core::slice::sort", "quicksort"), ("app", "sort_numbers")]);
        assert_eq!(runtime_frames(&cut), 0);
        let only = stack(&[("libc.so.6", "start_thread")]);
        assert_eq!(runtime_frames(&only), 0, "one frame is always kept");
        // `recorder record`'s wrappers of main and of thread start routines go with them.
        let preloaded = stack(&[
            ("", "work"),
            ("", "thread_main"),
            ("recorder_preload", "thread_start"),
            ("libc.so.6", "start_thread"),
            ("libc.so.6", "clone3"),
        ]);
        assert_eq!(runtime_frames(&preloaded), 3);
    }

    /// A sample taken while a new Rust thread runs std's start code, before its closure (no
    /// `__rust_begin_short_backtrace` yet), through the recorder's start routine: all of it is
    /// boilerplate, and the innermost frame stays.
    #[test]
    fn a_thread_sampled_before_its_closure_keeps_only_its_innermost_frame() {
        let frames = stack(&[
            ("", "std::panicking::catch_unwind::do_call"),
            ("", "__rust_try"),
            ("", "std::panicking::catch_unwind"),
            ("", "std::thread::lifecycle::spawn_unchecked::{{closure}}"),
            ("", "core::ops::function::FnOnce::call_once{{vtable.shim}}"),
            ("", "<std::sys::thread::unix::Thread>::new::thread_start"),
            ("", "recorder::thread_hooks::start_trampoline"),
            ("libc.so.6", "start_thread"),
            ("libc.so.6", "clone3"),
        ]);
        assert_eq!(runtime_frames(&frames), 8);
        // A C thread started through the recorder's start routine: the routine goes.
        let c = stack(&[
            ("", "work"),
            ("", "thread_main"),
            ("", "recorder::thread_hooks::start_trampoline"),
            ("libc.so.6", "start_thread"),
        ]);
        assert_eq!(runtime_frames(&c), 2);
    }
}
