//! Every thread sampled from its first instruction: new threads register with the CPU sampler
//! (exact stack bounds, their own sampling source armed) before they run any user code, with no
//! call from the application. Discovery (`/proc/self/task`, every 100 ms) stays the safety net
//! for threads this cannot see: created before the recording started, by a raw `clone`, or by a
//! module loaded after the last rescan.
//!
//! # How: `pthread_create` interposed in every loaded module's GOT
//! At `Recorder::start` every module's relocations are scanned (`dl_iterate_phdr`, then each
//! module's `PT_DYNAMIC`: `DT_JMPREL` and `DT_RELA`); each `JUMP_SLOT`/`GLOB_DAT` slot that
//! imports `pthread_create` (an undefined symbol of that module, so libc's own definition is left
//! alone) is pointed at [`hooked_pthread_create`]. It wraps the start routine: the new thread runs
//! [`on_thread_start`] (sampler registration) and then the application's routine. Rust std's
//! threads (std is linked into the executable and imports `pthread_create` from libc) and C code
//! in shared libraries go through those slots. Modules loaded later are patched by the recorder
//! thread within one maintenance pass (100 ms) after `dl_iterate_phdr`'s load counter changes;
//! `dlopen` itself is deliberately not interposed: glibc resolves a library's dependencies and
//! `$ORIGIN` with the *caller's* RUNPATH, and a wrapper would make every caller look like this
//! crate. The slots stay patched after the recording stops (the hook is then a no-op returning to
//! plain `pthread_create`): unpatching could race with a thread reading the slot for no gain.
//! Slots are written inside `dl_iterate_phdr`'s callback, under the loader's lock, so a module
//! `dlclose`d by another thread is never written into; a slot on one of the module's RELRO pages
//! (read-only after relocation) is made writable for the store and read-only again, and no other
//! page's protection is ever changed (see `patch_slot`).
//!
//! The `recorder record` preload library defines `pthread_create` itself and calls
//! [`create_thread`] (or, from its own wrapper, [`on_thread_start`]); both are idempotent with
//! the GOT hook (a thread registered twice is registered once).
//!
//! # Options measured (Linux 6.18 x86_64, glibc 2.36, 2 cores, 1 kHz)
//! - **GOT/PLT interposition (taken).** A child burning 50 ms gets its samples from the first
//!   period on; cost is paid only at thread creation and exit (`perf_event_open`, three
//!   `fcntl`s and an enable; at exit `dup3`, `sigpending`, `close`, `getrusage` and `prctl`
//!   (its CPU times and name for `jdk.ThreadCPULoad`) and the recorder's wakeup to reap the slot;
//!   no /proc read on either path), measured by `examples/thread_start.rs` (spawn+join of an
//!   empty thread with and without the recorder). Works with every kernel the sampler works on.
//! - **`perf_event_open` with `inherit`** on the threads alive at start: children get a copy of
//!   the event, but an inherited event has no file of its own, so its overflow signal goes to the
//!   *parent* event's `F_SETOWN_EX` owner: in the experiment a child burning 200 ms produced 197
//!   SIGPROFs, all on the (sleeping) main thread, none on the child: the handler would walk the
//!   wrong stack. Unusable as is.
//! - **`inherit` + `sigtrap` + `remove_on_exec`** (Linux >= 5.13): the kernel sends a synchronous
//!   SIGTRAP (`si_code` TRAP_PERF, `si_perf_data` = `sig_data`) to the thread that overflowed:
//!   195 of 200 expected on the child, from its first instruction. Rejected: SIGTRAP is the
//!   debugger's signal (under gdb/ptrace every sample is a stop, 1 000 per second per thread) and
//!   applications and sanitizers install their own SIGTRAP handlers; inherited events cannot be
//!   disabled per thread (no fd), so the recorder's own threads and excluded threads would be
//!   sampled too; `si_perf_data` is one value for all threads, so the handler would need a
//!   lock-free tid -> slot map instead of the fd table; and it needs >= 5.13, with discovery and
//!   per-thread events still needed for threads that existed before.
//! - **A process-wide CPU timer** (`ITIMER_PROF` / `CLOCK_PROCESS_CPUTIME_ID`, gperftools'
//!   way): reaches new threads at once, but expirations are checked at the scheduler tick (4 ms
//!   at HZ=250) and coalesce while one is pending: no 1 kHz, and the signal goes to whichever
//!   thread the kernel picks.
#![allow(unsafe_code)]

use libc::{c_int, c_void, pthread_attr_t, pthread_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A thread's start routine. `C-unwind`: `pthread_exit` and C++ code unwind through it.
pub type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

/// `pthread_create`'s signature.
pub type PthreadCreate =
    unsafe extern "C" fn(*mut pthread_t, *const pthread_attr_t, StartRoutine, *mut c_void) -> c_int;

/// Call first thing on a new thread, before any of its own code: if a recording samples new
/// threads, the calling thread is registered (exact stack bounds, sampling source armed) and
/// unregistered when it exits. Returns true if the thread is now sampled. Cheap when nothing
/// records (one uncontended lock). Idempotent; never panics into the caller.
///
/// A sampled thread gets SIGPROF unblocked: programs often block every signal in their workers
/// (a mask the new thread inherits) so that process-wide signals go to the main thread, and the
/// sampler's signal is per thread. (A process-wide SIGPROF of the program's own, from
/// `setitimer`, may then run on a worker; the sampler passes it on to the program's handler.)
///
/// The thread may be cancelled (`pthread_cancel` right after `pthread_create`): nothing here may
/// act on it (registration takes locks, reads and opens files; a forced unwind out of it would
/// leave them held, and `catch_unwind` would stop glibc's unwind, which aborts the process), so
/// cancellation is disabled for the hook's duration; a pending request acts at the thread's first
/// cancellation point after it.
pub fn on_thread_start() -> bool {
    without_cancellation(|| {
        let sampled = matches!(
            std::panic::catch_unwind(super::registry::thread_started),
            Ok(super::registry::ThreadStart::Registered)
        );
        if sampled {
            // SAFETY: a signal set built here; changes only this thread's mask.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGPROF);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
        }
        sampled
    })
}

extern "C" {
    /// Not in the `libc` crate for glibc targets.
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}

/// glibc's `PTHREAD_CANCEL_DISABLE` (`PTHREAD_CANCEL_ENABLE` is 0).
const PTHREAD_CANCEL_DISABLE: c_int = 1;

/// Runs `f` with the calling thread's cancellation disabled, then restores the state it had (a
/// request that arrived meanwhile stays pending). For code the recorder runs in the program's
/// threads, none of which may be a cancellation point.
pub fn without_cancellation<R>(f: impl FnOnce() -> R) -> R {
    let mut previous: c_int = 0;
    // SAFETY: a valid out pointer; changes only this thread's cancellation state.
    let disabled = unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut previous) } == 0;
    let r = f();
    if disabled {
        // SAFETY: restores the state read above; not a cancellation point itself.
        unsafe { pthread_setcancelstate(previous, std::ptr::null_mut()) };
    }
    r
}

/// The application's routine and argument, carried to the new thread.
struct Start {
    routine: StartRoutine,
    arg: *mut c_void,
    /// One of the recorder's own threads (`crate::own_thread`): not registered, SIGPROF stays
    /// blocked in it.
    own: bool,
}

/// The start routine every hooked thread runs: registration, then the application's routine.
unsafe extern "C-unwind" fn start_trampoline(start: *mut c_void) -> *mut c_void {
    // The Box is gone before the application's routine runs, so a forced unwind
    // (`pthread_exit`) through this frame has nothing left to clean up.
    let (routine, arg, own) = {
        // SAFETY: `start` is the Box that `create_thread` leaked for exactly this thread.
        let start = unsafe { Box::from_raw(start.cast::<Start>()) };
        (start.routine, start.arg, start.own)
    };
    if !own {
        on_thread_start();
    }
    // SAFETY: the routine and argument the application passed to `pthread_create`.
    unsafe { routine(arg) }
}

/// `pthread_create` through `real` with the start routine wrapped so that the new thread runs
/// [`on_thread_start`] first. For a preload library's own `pthread_create` definition (pass the
/// next definition, e.g. from `dlsym(RTLD_NEXT, "pthread_create")`).
///
/// # Safety
/// The arguments must be valid for `real`, which must be a `pthread_create`.
pub unsafe fn create_thread(
    real: PthreadCreate,
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    let start = Box::into_raw(Box::new(Start { routine, arg, own: crate::own_thread::spawning() }));
    // SAFETY: the caller's contract; the trampoline takes the Box back on the new thread.
    let rc = unsafe { real(thread, attr, start_trampoline, start.cast()) };
    if rc != 0 {
        // SAFETY: no thread was created, so nobody else owns it.
        drop(unsafe { Box::from_raw(start) });
    }
    rc
}

/// The real `pthread_create` (the first definition in the global scope), found at install time.
static REAL_PTHREAD_CREATE: AtomicUsize = AtomicUsize::new(0);

/// What GOT slots importing `pthread_create` now point to.
unsafe extern "C" fn hooked_pthread_create(
    thread: *mut pthread_t,
    attr: *const pthread_attr_t,
    routine: StartRoutine,
    arg: *mut c_void,
) -> c_int {
    // Relaxed: stored before any slot points here (the patch's own ordering: a thread can only
    // reach this through a slot written after the store, under `PATCHER`'s lock).
    let real = REAL_PTHREAD_CREATE.load(Ordering::Relaxed);
    if real == 0 {
        return libc::EAGAIN;
    }
    // SAFETY: `real` came from dlsym("pthread_create").
    let real: PthreadCreate = unsafe { std::mem::transmute::<usize, PthreadCreate>(real) };
    // SAFETY: the application's arguments, passed through.
    unsafe { create_thread(real, thread, attr, routine, arg) }
}

/// What patching did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HookReport {
    /// Modules scanned in the last pass.
    pub modules: usize,
    /// GOT slots that import `pthread_create` and now point to the hook (all passes).
    pub slots: usize,
    /// Slots that could not be written (mprotect refused): those modules' threads are found by
    /// discovery only.
    pub failed: usize,
}

struct Patcher {
    /// `dlpi_adds` at the last pass (a new module was loaded when it changes).
    adds: u64,
    report: HookReport,
}

static PATCHER: crate::fork::ForkSafeMutex<Patcher> =
    crate::fork::ForkSafeMutex::new(Patcher { adds: u64::MAX, report: HookReport { modules: 0, slots: 0, failed: 0 } });
/// [`PATCHER`], for the atfork handlers: the child must not inherit it held by another thread.
pub(crate) static PATCHER_LOCK: &dyn crate::fork::HeldAcrossFork = &PATCHER;

/// Interposes `pthread_create` in every loaded module (idempotent). Returns what was patched;
/// nothing on architectures without the relocation types below (discovery only there).
pub(crate) fn install() -> HookReport {
    let mut p = PATCHER.lock();
    patch_all(&mut p);
    p.report
}

/// Patches modules loaded since the last pass, if any (the recorder thread's maintenance).
pub(crate) fn rescan() {
    let mut p = PATCHER.lock();
    if p.adds != u64::MAX && loaded_count() != p.adds {
        patch_all(&mut p);
    }
}

/// What slots importing `pthread_create` point to now (for tests: all of them are hooked).
pub fn report() -> HookReport {
    PATCHER.lock().report
}

fn loaded_count() -> u64 {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; `data` is the u64 below.
        unsafe { *data.cast::<u64>() = (*info).dlpi_adds };
        1
    }
    let mut adds = 0u64;
    // SAFETY: the callback only reads `info` and writes `adds`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut adds as *mut u64).cast()) };
    adds
}

#[cfg(target_arch = "x86_64")]
const HOOKED_RELOCS: [u32; 2] = [7 /* R_X86_64_JUMP_SLOT */, 6 /* R_X86_64_GLOB_DAT */];
#[cfg(target_arch = "aarch64")]
const HOOKED_RELOCS: [u32; 2] = [1026 /* R_AARCH64_JUMP_SLOT */, 1025 /* R_AARCH64_GLOB_DAT */];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const HOOKED_RELOCS: [u32; 0] = [];

const SYMBOL: &[u8] = b"pthread_create\0";

fn patch_all(p: &mut Patcher) {
    if HOOKED_RELOCS.is_empty() {
        return;
    }
    if REAL_PTHREAD_CREATE.load(Ordering::Relaxed) == 0 {
        // SAFETY: dlsym with a NUL-terminated name.
        let real = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"pthread_create".as_ptr()) };
        if real.is_null() {
            return;
        }
        // Relaxed: published to hooked threads by the slot stores below (see the load).
        REAL_PTHREAD_CREATE.store(real as usize, Ordering::Relaxed);
    }
    // SAFETY: `sysconf` has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let mut pass = Pass { modules: 0, slots: 0, failed: 0, adds: 0, page };
    // Every store happens inside the callback: glibc runs it holding the loader's
    // `dl_load_write_lock`, which `dlclose` also holds from unmapping a module to unlinking it,
    // so the module a callback is given stays mapped, with the same segments, until it returns.
    // (Collecting slots and storing after the walk wrote into plugins unloaded meanwhile.)
    // SAFETY: the callback reads the module it is given and writes only its GOT slots.
    unsafe { libc::dl_iterate_phdr(Some(scan_module), (&mut pass as *mut Pass).cast()) };
    p.adds = pass.adds;
    p.report.modules = pass.modules;
    p.report.slots += pass.slots;
    p.report.failed += pass.failed;
}

/// One pass over the loaded modules.
struct Pass {
    modules: usize,
    /// Slots pointed at the hook in this pass.
    slots: usize,
    /// Slots that could not be written.
    failed: usize,
    adds: u64,
    page: usize,
}

/// Points the GOT slot at `slot` (of the module whose RELRO segment, if any, is `relro`) at the
/// hook. Runs under the loader's lock (see `patch_all`).
///
/// The store is made with `process_vm_writev` on this process, which fails (EFAULT) instead of
/// faulting when the page is not writable: a page seen writable a moment earlier may have been
/// made read-only since by the loader finishing a module's relocation. Only a slot whose page
/// lies wholly inside the module's `PT_GNU_RELRO` range (the pages the loader made read-only)
/// is made writable with `mprotect`, for one store, and read-only again.
fn patch_slot(slot: usize, relro: Option<(usize, usize)>, pass: &mut Pass) {
    let hook = hooked_pthread_create as *const () as usize;
    // SAFETY: `slot` lies inside a `PT_LOAD` segment of a module that stays mapped while the
    // loader's lock is held (checked by the caller); an aligned word.
    let cell = unsafe { &*(slot as *const AtomicUsize) };
    // Relaxed: one aligned word; readers are plain loads through the GOT.
    if cell.load(Ordering::Relaxed) == hook {
        return;
    }
    if store_if_writable(slot, hook) {
        pass.slots += 1;
        return;
    }
    let page_lo = slot & !(pass.page - 1);
    let in_relro = relro.is_some_and(|(lo, hi)| page_lo >= lo && page_lo + pass.page <= hi);
    if !in_relro {
        pass.failed += 1;
        return;
    }
    // SAFETY: the page is one of the module's RELRO pages (read-only since its relocation),
    // mapped while the loader's lock is held; made writable for one store, then read-only again
    // as the loader left it.
    if unsafe { libc::mprotect(page_lo as *mut c_void, pass.page, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
        pass.failed += 1;
        return;
    }
    // Relaxed: see above.
    cell.store(hook, Ordering::Relaxed);
    // SAFETY: as above.
    unsafe { libc::mprotect(page_lo as *mut c_void, pass.page, libc::PROT_READ) };
    pass.slots += 1;
}

/// Stores `value` at `addr` if its page is writable now (false, and nothing written, if not).
fn store_if_writable(addr: usize, value: usize) -> bool {
    let local = libc::iovec { iov_base: (&value as *const usize).cast_mut().cast(), iov_len: 8 };
    let remote = libc::iovec { iov_base: addr as *mut c_void, iov_len: 8 };
    // SAFETY: reads `value` and writes 8 bytes at `addr` of this process through the kernel,
    // which checks the page's protection instead of faulting.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    n == 8
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_STRSZ: i64 = 10;
const DT_PLTREL: i64 = 20;
const DT_JMPREL: i64 = 23;
const SHN_UNDEF: u16 = 0;

#[repr(C)]
struct Elf64Dyn {
    tag: i64,
    val: u64,
}

#[repr(C)]
struct Elf64Rela {
    offset: u64,
    info: u64,
    addend: i64,
}

#[repr(C)]
struct Elf64Sym {
    name: u32,
    info: u8,
    other: u8,
    shndx: u16,
    value: u64,
    size: u64,
}

unsafe extern "C" fn scan_module(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: dl_iterate_phdr's arguments; `data` is the `Pass` of `patch_all`.
    let (info, pass) = unsafe { (&*info, &mut *data.cast::<Pass>()) };
    pass.adds = info.dlpi_adds;
    pass.modules += 1;
    let base = info.dlpi_addr as usize;
    // SAFETY: the loader's program headers of a loaded module.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
    let Some(dynamic) = phdrs.iter().find(|ph| ph.p_type == libc::PT_DYNAMIC) else { return 0 };
    let page = pass.page;
    // The pages the loader made read-only after relocating: from the page holding the segment's
    // start to the last page it fills wholly (glibc's `_dl_protect_relro` rounds both down).
    let relro = phdrs.iter().find(|ph| ph.p_type == libc::PT_GNU_RELRO).map(|ph| {
        let lo = base + ph.p_vaddr as usize;
        (lo & !(page - 1), (lo + ph.p_memsz as usize) & !(page - 1))
    });
    let in_load = |slot: usize| {
        phdrs.iter().any(|ph| {
            let lo = base + ph.p_vaddr as usize;
            ph.p_type == libc::PT_LOAD && lo <= slot && slot + 8 <= lo + ph.p_memsz as usize
        })
    };
    // SAFETY: the module's dynamic section, mapped.
    unsafe {
        scan_dynamic(base, (base + dynamic.p_vaddr as usize) as *const Elf64Dyn, &mut |slot| {
            if slot.is_multiple_of(8) && in_load(slot) {
                patch_slot(slot, relro, pass);
            } else {
                pass.failed += 1;
            }
        })
    };
    0
}

/// Hands each of the module's GOT slots importing `pthread_create` to `found`.
///
/// # Safety
/// `dynamic` is the `PT_DYNAMIC` of a loaded module based at `base`.
unsafe fn scan_dynamic(base: usize, dynamic: *const Elf64Dyn, found: &mut dyn FnMut(usize)) {
    // glibc stores relocated addresses into most dynamic entries, other loaders (and the vDSO)
    // leave them relative: an address below the base is relative.
    let addr = |v: u64| if (v as usize) < base { base + v as usize } else { v as usize };
    let (mut symtab, mut strtab, mut strsz) = (0, 0, 0);
    let (mut rela, mut relasz, mut jmprel, mut pltrelsz, mut pltrel) = (0, 0, 0, 0, DT_RELA as u64);
    let mut d = dynamic;
    // SAFETY: the dynamic array ends with DT_NULL (bounded anyway).
    for _ in 0..4096 {
        let e = unsafe { &*d };
        match e.tag {
            DT_NULL => break,
            DT_SYMTAB => symtab = addr(e.val),
            DT_STRTAB => strtab = addr(e.val),
            DT_STRSZ => strsz = e.val as usize,
            DT_RELA => rela = addr(e.val),
            DT_RELASZ => relasz = e.val as usize,
            DT_JMPREL => jmprel = addr(e.val),
            DT_PLTRELSZ => pltrelsz = e.val as usize,
            DT_PLTREL => pltrel = e.val,
            _ => {}
        }
        // SAFETY: still inside the array (DT_NULL not seen yet).
        d = unsafe { d.add(1) };
    }
    if symtab == 0 || strtab == 0 {
        return;
    }
    // No allocation: this runs under the loader's lock.
    let plt = if pltrel == DT_RELA as u64 { (jmprel, pltrelsz) } else { (0, 0) };
    let tables = [(rela, relasz), plt];
    for (table, size) in tables {
        if table == 0 {
            continue;
        }
        let n = size / std::mem::size_of::<Elf64Rela>();
        // SAFETY: the module's relocation table, mapped read-only.
        let relas = unsafe { std::slice::from_raw_parts(table as *const Elf64Rela, n) };
        for r in relas {
            if !HOOKED_RELOCS.contains(&((r.info & 0xffff_ffff) as u32)) {
                continue;
            }
            let sym_index = (r.info >> 32) as usize;
            // SAFETY: the relocation names an entry of the module's symbol table.
            let sym = unsafe { &*(symtab as *const Elf64Sym).add(sym_index) };
            if sym.shndx != SHN_UNDEF || sym.name as usize + SYMBOL.len() > strsz {
                continue;
            }
            // SAFETY: inside the string table (checked against DT_STRSZ above).
            let name = unsafe { std::slice::from_raw_parts((strtab + sym.name as usize) as *const u8, SYMBOL.len()) };
            if name == SYMBOL {
                found(base + r.offset as usize);
            }
        }
    }
}
