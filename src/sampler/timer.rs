//! Sampling sources, armed and disarmed in normal context only (never from the handler):
//! per-thread `perf_event_open` task-clock events that deliver SIGPROF to their thread (F_SETSIG +
//! F_SETOWN_EX with the tid), or per-thread POSIX timers on the thread's CPU clock
//! (`timer_create` + SIGEV_THREAD_ID).

use super::signal::TIMER_TAG;
use libc::c_int;
use std::io;
use std::time::Duration;

const F_SETSIG: c_int = 10;
const F_SETOWN_EX: c_int = 15;
const F_OWNER_TID: c_int = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;

/// `struct perf_event_attr`, PERF_ATTR_SIZE_VER5 (112 bytes).
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved: u16,
}

#[repr(C)]
struct FOwnerEx {
    type_: c_int,
    pid: libc::pid_t,
}

/// An armed sampling source for one thread.
#[derive(Debug)]
pub(super) enum Source {
    /// A POSIX timer on the thread's CPU clock.
    Timer(libc::timer_t),
    /// A perf event fd (its slot is found through the fd table).
    Perf(c_int),
}

// SAFETY: a `timer_t` is an opaque kernel id (a pointer-sized integer in glibc), usable from any
// thread of the process.
unsafe impl Send for Source {}

fn cvt(rc: c_int) -> io::Result<c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Opens a disabled task-clock perf event for `tid`, counting user time only.
pub(super) fn perf_open(tid: u32, period: Duration) -> io::Result<c_int> {
    let attr = PerfEventAttr {
        type_: PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config: PERF_COUNT_SW_TASK_CLOCK,
        sample_period: period.as_nanos().max(1) as u64,
        // disabled (bit 0), exclude_kernel (bit 5), exclude_hv (bit 6): user time only, which
        // perf_event_paranoid = 2 still allows for one's own threads.
        flags: 1 | (1 << 5) | (1 << 6),
        wakeup_events: 1,
        ..PerfEventAttr::default()
    };
    // SAFETY: `attr` is a valid perf_event_attr of the size it declares; pid = tid, cpu = -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            tid as libc::pid_t,
            -1 as c_int,
            -1 as c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    cvt(fd as c_int)
}

/// Routes the perf event's overflow signal to `tid` as SIGPROF and enables it.
pub(super) fn perf_enable(fd: c_int, tid: u32) -> io::Result<()> {
    // SAFETY: `fd` is an open perf event fd we own; these fcntls take integer/struct arguments.
    unsafe {
        let fl = cvt(libc::fcntl(fd, libc::F_GETFL))?;
        cvt(libc::fcntl(
            fd,
            libc::F_SETFL,
            fl | libc::O_ASYNC | libc::O_NONBLOCK,
        ))?;
        cvt(libc::fcntl(fd, F_SETSIG, libc::SIGPROF))?;
        let owner = FOwnerEx {
            type_: F_OWNER_TID,
            pid: tid as libc::pid_t,
        };
        cvt(libc::fcntl(fd, F_SETOWN_EX, &owner as *const FOwnerEx))?;
        cvt(libc::ioctl(fd, PERF_EVENT_IOC_ENABLE, 0))?;
    }
    Ok(())
}

/// Whether a perf task-clock event can be opened for the calling thread.
pub(super) fn perf_available(period: Duration) -> bool {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
    match perf_open(tid, period) {
        Ok(fd) => {
            // SAFETY: we own `fd`.
            unsafe { libc::close(fd) };
            true
        }
        Err(_) => false,
    }
}

/// The CPU-time clock of thread `tid` of this process (MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)).
fn thread_cpu_clock(tid: u32) -> libc::clockid_t {
    ((!(tid as libc::clockid_t)) << 3) | 6
}

/// Arms a POSIX timer on `tid`'s CPU clock that sends SIGPROF to `tid` carrying `slot`.
pub(super) fn timer_arm(tid: u32, slot: usize, period: Duration) -> io::Result<Source> {
    // SAFETY: zeroed is a valid sigevent (its padding is private).
    let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
    sev.sigev_notify = libc::SIGEV_THREAD_ID;
    sev.sigev_signo = libc::SIGPROF;
    sev.sigev_notify_thread_id = tid as c_int;
    sev.sigev_value = libc::sigval {
        sival_ptr: ((TIMER_TAG << 32) | slot as u64) as usize as *mut libc::c_void,
    };
    let mut timer: libc::timer_t = std::ptr::null_mut();
    // SAFETY: valid sigevent and out pointer; the clock names a thread of this process.
    cvt(unsafe { libc::timer_create(thread_cpu_clock(tid), &mut sev, &mut timer) })?;
    let ts = libc::timespec {
        tv_sec: period.as_secs() as libc::time_t,
        tv_nsec: period.subsec_nanos() as libc::c_long,
    };
    let spec = libc::itimerspec {
        it_interval: ts,
        it_value: ts,
    };
    // SAFETY: `timer` was just created by us.
    if let Err(e) = cvt(unsafe { libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) }) {
        // SAFETY: as above.
        unsafe { libc::timer_delete(timer) };
        return Err(e);
    }
    Ok(Source::Timer(timer))
}

/// Stops and releases a source.
pub(super) fn disarm(source: Source) {
    match source {
        Source::Timer(t) => {
            // SAFETY: `t` is a live timer we created; deleting it stops further expirations.
            unsafe { libc::timer_delete(t) };
        }
        Source::Perf(fd) => {
            // SAFETY: `fd` is a perf event fd we own.
            unsafe {
                libc::ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
                libc::close(fd);
            }
        }
    }
}
