//! Wall-clock sampling: the application's blocking system calls never see
//! EINTR nor return early under 1 kHz wall (or CPU) sampling, while a naive `tgkill` sampler
//! breaks them (so the checker can fail); a thread blocked in `recv` for 5 s stands for its
//! 5 s in sleeping wall samples, a spinning one for running samples with its function on top;
//! every period is written or counted lost (exactly); the JDK's tools read the events.

mod common;

use common::*;
use jfr_format::Value;
use recorder::Recorder;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const STATE_RUNNABLE: u64 = 5;
const STATE_SLEEPING: u64 = 225;

fn all_events(dir: &Path, type_name: &str) -> Vec<ReadEvent> {
    chunk_files(dir).iter().flat_map(|c| read_events(c, type_name)).collect()
}

fn state_of(e: &ReadEvent) -> u64 {
    match e.field("state") {
        Value::Ref { key, .. } => *key,
        v => panic!("state is not a constant: {v:?}"),
    }
}

fn samples_of(e: &ReadEvent) -> u64 {
    e.field_i64("samples") as u64
}

fn now_ns() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

#[inline(never)]
fn spin_for(d: Duration) -> u64 {
    let end = Instant::now() + d;
    let mut x = 0u64;
    while Instant::now() < end {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}

/// What the blocking calls saw.
#[derive(Debug, Default)]
struct Outcome {
    calls: u64,
    eintr: Vec<String>,
    early: Vec<String>,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Runs `call` (which blocks about `timeout` and returns its result) repeatedly for `run`,
/// spinning 1 ms of user code between calls (so the thread is sampled between them): records
/// every EINTR and every return more than 1 ms before the timeout.
fn drive(name: &str, run: Duration, timeout: Duration, mut call: impl FnMut(Duration) -> (i64, i32)) -> Outcome {
    let mut out = Outcome::default();
    let end = Instant::now() + run;
    while Instant::now() < end {
        spin_for(Duration::from_millis(1));
        let t0 = now_ns();
        let (rc, err) = call(timeout);
        let elapsed = now_ns() - t0;
        out.calls += 1;
        if rc < 0 && err == libc::EINTR {
            out.eintr.push(format!("{name}: EINTR after {elapsed} ns"));
        } else if rc < 0 {
            panic!("{name} failed: errno {err}");
        } else if elapsed + 1_000_000 < timeout.as_nanos() as i64 {
            out.early.push(format!("{name}: returned {rc} after {elapsed} ns of {timeout:?}"));
        }
    }
    out
}

/// The blocking calls that must never see EINTR, each on its own thread: poll, epoll_wait, select and
/// nanosleep time out; read on a pipe and recv on a socket get their data from a writer after
/// `timeout` (an early return would be EINTR or a short wait).
fn exercise_blocking_calls(run: Duration) -> Vec<(String, Outcome)> {
    let timeout = Duration::from_millis(20);
    let mut handles = Vec::new();
    let spawn = |name: &'static str, f: Box<dyn FnOnce() -> Outcome + Send>| {
        std::thread::Builder::new().name(name.into()).spawn(move || (name.to_owned(), f())).unwrap()
    };
    handles.push(spawn(
        "wall-poll",
        Box::new(move || {
            drive("poll", run, timeout, |t| {
                // SAFETY: no fds; a timeout in ms.
                let rc = unsafe { libc::poll(std::ptr::null_mut(), 0, t.as_millis() as i32) };
                (rc as i64, errno())
            })
        }),
    ));
    handles.push(spawn(
        "wall-epoll",
        Box::new(move || {
            // SAFETY: plain syscall.
            let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            assert!(ep >= 0);
            let out = drive("epoll_wait", run, timeout, |t| {
                let mut ev = libc::epoll_event { events: 0, u64: 0 };
                // SAFETY: one valid out event; empty epoll set.
                let rc = unsafe { libc::epoll_wait(ep, &mut ev, 1, t.as_millis() as i32) };
                (rc as i64, errno())
            });
            // SAFETY: ours.
            unsafe { libc::close(ep) };
            out
        }),
    ));
    handles.push(spawn(
        "wall-select",
        Box::new(move || {
            drive("select", run, timeout, |t| {
                let mut tv = libc::timeval { tv_sec: 0, tv_usec: t.as_micros() as libc::suseconds_t };
                // SAFETY: no fd sets; a valid timeval.
                let rc = unsafe {
                    libc::select(0, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), &mut tv)
                };
                (rc as i64, errno())
            })
        }),
    ));
    handles.push(spawn(
        "wall-nanosleep",
        Box::new(move || {
            drive("nanosleep", run, timeout, |t| {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: t.as_nanos() as libc::c_long };
                let mut rem = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: valid timespecs.
                let rc = unsafe { libc::nanosleep(&ts, &mut rem) };
                (rc as i64, errno())
            })
        }),
    ));
    // read on a pipe and recv on a socket: a writer thread sends one byte `timeout` after each
    // request (a byte on a second channel).
    fn with_writer(
        name: &'static str,
        run: Duration,
        timeout: Duration,
        read_end: i32,
        write_end: i32,
        use_recv: bool,
    ) -> Outcome {
        let (req_tx, req_rx) = std::sync::mpsc::channel::<()>();
        let writer = std::thread::spawn(move || {
            while req_rx.recv().is_ok() {
                std::thread::sleep(timeout);
                // SAFETY: one byte from a valid buffer to our fd.
                unsafe { libc::write(write_end, b"x".as_ptr().cast(), 1) };
            }
        });
        let out = drive(name, run, timeout, |_| {
            req_tx.send(()).unwrap();
            let mut b = [0u8; 1];
            // SAFETY: one byte into a valid buffer from our fd.
            let rc = unsafe {
                if use_recv {
                    libc::recv(read_end, b.as_mut_ptr().cast(), 1, 0) as i64
                } else {
                    libc::read(read_end, b.as_mut_ptr().cast(), 1) as i64
                }
            };
            let e = errno();
            if rc < 0 && e == libc::EINTR {
                // The byte is still coming: take it, so the next call waits afresh.
                // SAFETY: as above.
                unsafe { libc::read(read_end, b.as_mut_ptr().cast(), 1) };
            }
            (rc, e)
        });
        drop(req_tx);
        writer.join().unwrap();
        out
    }
    handles.push(spawn(
        "wall-pipe",
        Box::new(move || {
            let mut fds = [0i32; 2];
            // SAFETY: valid out array.
            assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
            let out = with_writer("read(pipe)", run, timeout, fds[0], fds[1], false);
            // SAFETY: ours.
            unsafe { libc::close(fds[0]) };
            // SAFETY: ours.
            unsafe { libc::close(fds[1]) };
            out
        }),
    ));
    handles.push(spawn(
        "wall-socket",
        Box::new(move || {
            let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
            with_writer("recv(socket)", run, timeout, a.as_raw_fd(), b.as_raw_fd(), true)
        }),
    ));
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn assert_unbroken(results: &[(String, Outcome)]) {
    for (name, o) in results {
        assert!(o.calls > 10, "{name}: only {} calls", o.calls);
        assert!(o.eintr.is_empty(), "{name}: {} of {} calls saw EINTR: {:?}", o.eintr.len(), o.calls, o.eintr);
        assert!(o.early.is_empty(), "{name}: {} of {} calls returned early: {:?}", o.early.len(), o.calls, o.early);
    }
}

/// Stops and checks the wall accounting equation: every period is in a written event's
/// `samples`, or counted lost (and reported as such). Returns the wall statistics.
fn stop_exact(rec: Recorder, repo: &Path) -> recorder::sampler::WallStats {
    let report = rec.stop_with_report().unwrap();
    let s = report.sampler.expect("sampler statistics");
    let w = s.wall.expect("wall statistics");
    let events = all_events(repo, "profiler.WallClockSample");
    let written: u64 = events.iter().map(samples_of).sum();
    // Wall samples lost in the sampler's buffers are the taken ones never written, whatever
    // CPU samples were lost beside them.
    assert_eq!(s.taken, s.written + s.lost, "sampler: taken = written + lost: {s:?}");
    assert!(s.wall_written <= s.wall_taken && s.wall_taken <= s.taken, "{s:?}");
    let lost_in_buffers = s.wall_taken - s.wall_written;
    assert_eq!(w.periods, written + w.lost + lost_in_buffers, "periods = written + lost: {w:?}, sampler {s:?}");
    assert_eq!(w.requests, w.served + w.unserved, "{w:?}");
    let reported: i64 = all_events(repo, "recorder.DataLoss")
        .iter()
        .filter(|e| e.field("reason").as_str().is_some_and(|r| r.starts_with("wall-clock")))
        .map(|e| e.field_i64("samples"))
        .sum();
    assert_eq!(reported as u64, w.lost, "every lost period is reported: {w:?}");
    eprintln!("wall: {w:?}; sampler taken {} written {} lost {}", s.taken, s.written, s.lost);
    w
}

/// A recording with wall-clock sampling every 1 ms and no CPU sampling, and its directory.
fn wall_only_at_1khz(dir: &std::path::Path) -> (Recorder, std::path::PathBuf) {
    let rec = Recorder::builder()
        .repository(dir)
        .cpu_sampling(false)
        .wall_clock_sampling(Duration::from_millis(1))
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    (rec, repo)
}

#[test]
fn blocking_calls_see_no_eintr_and_no_early_return_under_1khz_wall_sampling() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let (rec, repo) = wall_only_at_1khz(dir.path());
    let results = exercise_blocking_calls(Duration::from_secs(3));
    let w = stop_exact(rec, &repo);
    assert_unbroken(&results);
    // The threads were sampled while they ran between their calls: the requests were served.
    assert!(w.served > 100, "{w:?}");
    let events = all_events(&repo, "profiler.WallClockSample");
    let running: u64 =
        events.iter().filter(|e| state_of(e) == STATE_RUNNABLE && samples_of(e) == 1).map(samples_of).sum();
    assert!(running > 100, "served requests are written as running samples: {running}");
}

#[test]
fn blocking_calls_see_no_eintr_and_no_early_return_under_1khz_cpu_sampling() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).sampling_period(Duration::from_millis(1)).start().unwrap();
    let results = exercise_blocking_calls(Duration::from_secs(3));
    let report = rec.stop_with_report().unwrap();
    let s = report.sampler.expect("sampler statistics");
    assert_unbroken(&results);
    // The 1 ms of spinning between calls was sampled (about once per call).
    assert!(s.taken > 100, "{s:?}");
}

/// The checker can fail: a naive wall sampler that `tgkill`s every thread each millisecond
/// (SIGUSR1 with SA_RESTART, the handler doing nothing) makes poll, epoll_wait, select and
/// nanosleep fail with EINTR (read and recv are restarted by SA_RESTART). This is the race
/// `wall.rs` avoids by never signalling a thread that is not running its own code.
#[test]
fn a_naive_tgkill_sampler_breaks_the_calls_so_the_checker_can_fail() {
    let _s = serial();
    extern "C" fn nothing(_: i32) {}
    // SAFETY: zeroed is a valid sigaction; the handler is async-signal-safe (does nothing).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = nothing as *const () as usize;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &act, std::ptr::null_mut()), 0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, sent) = (Arc::clone(&stop), Arc::clone(&sent));
        std::thread::spawn(move || {
            // SAFETY: no preconditions.
            let me = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
            while !stop.load(Ordering::Relaxed) {
                for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                    let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
                    let tid: i32 = entry.file_name().to_str().unwrap().parse().unwrap();
                    if tid != me && comm.starts_with("wall-") {
                        // SAFETY: signals a thread of this process with a handled signal.
                        unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, libc::SIGUSR1) };
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let results = exercise_blocking_calls(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    assert!(sent.load(Ordering::Relaxed) > 100);
    for (name, o) in &results {
        if ["wall-poll", "wall-epoll", "wall-select", "wall-nanosleep"].contains(&name.as_str()) {
            assert!(!o.eintr.is_empty(), "{name}: the naive sampler broke no call ({} calls)", o.calls);
        }
    }
}

#[test]
fn a_thread_blocked_in_recv_stands_for_its_wait_and_a_spinning_thread_runs_on_top() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let period = recorder::sampler::DEFAULT_WALL_PERIOD;
    let rec =
        Recorder::builder().repository(dir.path()).cpu_sampling(false).wall_clock_sampling(period).start().unwrap();
    let repo = rec.repository_dir().to_owned();
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let blocked = std::thread::Builder::new()
        .name("wall-recv".into())
        .spawn(move || {
            let mut buf = [0u8; 1];
            let t0 = Instant::now();
            // SAFETY: one byte into a valid buffer from our socket.
            let rc = unsafe { libc::recv(a.as_raw_fd(), buf.as_mut_ptr().cast(), 1, 0) };
            assert_eq!(rc, 1);
            t0.elapsed()
        })
        .unwrap();
    let spinner =
        std::thread::Builder::new().name("wall-spin".into()).spawn(|| spin_for(Duration::from_secs(5))).unwrap();
    std::thread::sleep(Duration::from_secs(5));
    // SAFETY: one byte from a valid buffer to our socket.
    assert_eq!(unsafe { libc::send(b.as_raw_fd(), b"x".as_ptr().cast(), 1, 0) }, 1);
    let waited = blocked.join().unwrap();
    spinner.join().unwrap();
    stop_exact(rec, &repo);
    let events = all_events(&repo, "profiler.WallClockSample");
    let of = |name: &str| events.iter().filter(|e| e.thread.as_deref() == Some(name)).cloned().collect::<Vec<_>>();
    let recv = of("wall-recv");
    let sleeping: u64 = recv.iter().filter(|e| state_of(e) == STATE_SLEEPING).map(samples_of).sum();
    let expected = waited.as_secs_f64() / period.as_secs_f64();
    assert!(
        (sleeping as f64 - expected).abs() <= expected * 0.10,
        "recv waited {waited:?}: {sleeping} sleeping periods, expected {expected:.0} ± 10 %: {recv:?}"
    );
    // Its stack is walked where it waits (it was never sampled): whole, from recv to its start.
    let walked: u64 = recv
        .iter()
        .filter(|e| state_of(e) == STATE_SLEEPING)
        .filter(|e| {
            e.stack
                .as_ref()
                .is_some_and(|s| s.iter().any(|f| f.contains("recv")) && s.iter().any(|f| f.contains("start_thread")))
        })
        .map(samples_of)
        .sum();
    assert!(walked * 10 >= sleeping * 9, "{walked} of {sleeping} sleeping periods with recv's whole stack: {recv:?}");
    let spin = of("wall-spin");
    let total: u64 = spin.iter().map(samples_of).sum();
    let running: u64 = spin.iter().filter(|e| state_of(e) == STATE_RUNNABLE).map(samples_of).sum();
    assert!(total > 0 && running * 10 >= total * 9, "{running} of {total} spinning periods running");
    // Its stacks run in spin_for (under it, at any depth: Instant::now, comparisons, the vDSO).
    // Not every one: in this debug build spin_for's loop is mostly calls to tiny functions, and a
    // sample that lands in a callee's first instructions (before it saves its frame pointer)
    // loses its caller, spin_for, from the frame-pointer walk: 10-33 % of samples seen.
    let in_spin: u64 = spin
        .iter()
        .filter(|e| state_of(e) == STATE_RUNNABLE)
        .filter(|e| e.stack.as_ref().is_some_and(|s| s.iter().any(|f| f.contains("spin_for"))))
        .map(samples_of)
        .sum();
    assert!(in_spin * 2 > total, "{in_spin} of {total} spinning periods in spin_for");
    // The JDK's tools read the file, with the values we wrote.
    let files = chunk_files(&repo);
    jdk_accepts(&files);
    let count: u64 =
        files.iter().map(|f| jfr_summary_counts(f).get("profiler.WallClockSample").copied().unwrap_or(0)).sum();
    assert_eq!(count, events.len() as u64);
    let text: String = files
        .iter()
        .map(|f| jdk("jfr", &["print", "--events", "profiler.WallClockSample", f.to_str().unwrap()]))
        .collect();
    let biggest = recv.iter().map(samples_of).max().unwrap();
    assert!(text.contains(&format!("samples = {biggest}")), "jfr print shows the batch of {biggest}");
    assert!(text.contains("STATE_SLEEPING") && text.contains("STATE_RUNNABLE"));
    assert!(text.contains("spin_for"), "jfr print shows the stacks");
    let settings = jdk("jfr", &["print", "--events", "jdk.ActiveSetting", files[0].to_str().unwrap()]);
    assert!(settings.contains(&format!("value = \"{} ms\"", period.as_millis())), "{settings}");
}

#[test]
fn wall_sampling_is_off_by_default_and_validated() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(dir.path()).start().unwrap();
    let repo = rec.repository_dir().to_owned();
    std::thread::sleep(Duration::from_millis(200));
    let report = rec.stop_with_report().unwrap();
    assert!(report.sampler.unwrap().wall.is_none());
    assert!(all_events(&repo, "profiler.WallClockSample").is_empty());
    let Err(err) = Recorder::builder().repository(dir.path()).wall_clock_sampling(Duration::from_micros(10)).start()
    else {
        panic!("a 10 µs period is refused");
    };
    assert!(err.to_string().contains("wall-clock sampling period"), "{err}");
}

fn tid_named(name: &str) -> Option<i32> {
    std::fs::read_dir("/proc/self/task").ok()?.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| e.file_name().to_str()?.parse().ok()).flatten()
    })
}

fn pin_to_cpu0(tid: i32) {
    // SAFETY: a zeroed cpu_set_t is empty; CPU_SET and sched_setaffinity take valid pointers.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
    }
}

/// A starved sampler thread reports what it missed: the wall thread is made SCHED_IDLE and
/// pinned with three spinning threads to one CPU, so it wakes up late; the periods of the
/// threads that ran meanwhile are counted lost and reported, and the equation still holds.
#[test]
fn a_starved_wall_sampler_counts_and_reports_the_periods_it_missed() {
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let (rec, repo) = wall_only_at_1khz(dir.path());
    let wall = (0..1000).find_map(|_| {
        tid_named("recorder-wall").or_else(|| {
            std::thread::sleep(Duration::from_millis(1));
            None
        })
    });
    let wall = wall.expect("the wall sampler thread runs");
    pin_to_cpu0(wall);
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: lowers the policy of a thread of this process; valid param.
    assert_eq!(unsafe { libc::sched_setscheduler(wall, libc::SCHED_IDLE, &param) }, 0);
    let hogs: Vec<_> = (0..3)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("wall-hog-{i}"))
                .spawn(|| {
                    // SAFETY: no preconditions.
                    pin_to_cpu0(unsafe { libc::syscall(libc::SYS_gettid) } as i32);
                    spin_for(Duration::from_secs(2))
                })
                .unwrap()
        })
        .collect();
    for h in hogs {
        h.join().unwrap();
    }
    let w = stop_exact(rec, &repo);
    assert!(w.missed_ticks > 0, "the starved sampler missed ticks: {w:?}");
    assert!(w.lost > 0, "the periods of the threads that ran meanwhile are lost: {w:?}");
}

/// Work between waits: where the thread's CPU samples (and so its last stack) are.
#[inline(never)]
fn compute_between_waits(d: Duration) -> u64 {
    std::hint::black_box(spin_for(d))
}

/// The wait: where the thread is when its idle periods are accounted.
#[inline(never)]
fn wait_between_computations(d: Duration) -> u64 {
    std::thread::sleep(d);
    std::hint::black_box(1)
}

#[test]
fn idle_wall_samples_carry_the_stack_where_the_thread_waits_not_its_last_sampled_one() {
    // A thread that computes 5 ms, then sleeps 60 ms, in a loop. Its CPU samples (and its wall
    // samples while it runs) are in compute_between_waits; its sleeping periods are in
    // wait_between_computations, which no sample taken while it ran can show: the wall thread
    // walks the waiting thread's stack from outside. Before, the sleeping periods carried the last
    // sampled stack, inside compute_between_waits.
    let _s = serial();
    let dir = tempfile::tempdir().unwrap();
    let period = Duration::from_millis(10);
    let rec = Recorder::builder()
        .repository(dir.path())
        .sampling_period(Duration::from_millis(1))
        .wall_clock_sampling(period)
        .start()
        .unwrap();
    let repo = rec.repository_dir().to_owned();
    let worker = std::thread::Builder::new()
        .name("wall-alternate".into())
        .spawn(|| {
            let mut x = 0u64;
            for _ in 0..25 {
                x = x.wrapping_add(compute_between_waits(Duration::from_millis(5)));
                x = x.wrapping_add(wait_between_computations(Duration::from_millis(60)));
            }
            x
        })
        .unwrap();
    worker.join().unwrap();
    let w = stop_exact(rec, &repo);
    assert!(w.walks_used > 0 && w.walks_used <= w.walks, "{w:?}");
    let events = all_events(&repo, "profiler.WallClockSample");
    let mine: Vec<&ReadEvent> = events.iter().filter(|e| e.thread.as_deref() == Some("wall-alternate")).collect();
    let sleeping: Vec<&&ReadEvent> = mine.iter().filter(|e| state_of(e) == STATE_SLEEPING).collect();
    let periods: u64 = sleeping.iter().map(|e| samples_of(e)).sum();
    let has = |e: &ReadEvent, f: &str| e.stack.as_ref().is_some_and(|s| s.iter().any(|n| n.contains(f)));
    let waiting: u64 = sleeping.iter().filter(|e| has(e, "wait_between_computations")).map(|e| samples_of(e)).sum();
    // 25 sleeps of 60 ms at 10 ms: about 150 periods (a thread seen asleep at a tick right after it
    // ran is accounted running: the tick cannot tell).
    eprintln!(
        "{waiting} of {periods} sleeping periods in the wait; one: {:?}",
        sleeping.first().and_then(|e| e.stack.as_ref())
    );
    assert!(periods >= 75, "{periods} sleeping periods: {mine:?}");
    // A walk is given up if the thread wakes while it runs (its copy may be torn); then the last
    // stack stands in. On a loaded machine that can happen, rarely.
    assert!(waiting * 4 >= periods * 3, "{waiting} of {periods} sleeping periods in the wait: {sleeping:?}");
    for e in sleeping.iter().filter(|e| has(e, "wait_between_computations")) {
        let stack = e.stack.as_ref().unwrap();
        // Whole, from the system call to the thread's start, and never through the computation.
        assert!(!has(e, "compute_between_waits"), "{stack:?}");
        assert!(has(e, "thread::sleep") || has(e, "nanosleep"), "{stack:?}");
        assert!(has(e, "start_thread") || has(e, "clone"), "walked to the thread's start: {stack:?}");
    }
    // The JDK reads the stacks we walked.
    let files = chunk_files(&repo);
    let text: String = files
        .iter()
        .map(|f| jdk("jfr", &["print", "--events", "profiler.WallClockSample", f.to_str().unwrap()]))
        .collect();
    assert!(text.contains("wait_between_computations"), "jfr print shows the waiting stacks");
}
