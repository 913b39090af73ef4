//! The periodic events, a flush source of their own: `jdk.ThreadCPULoad`, `jdk.CPULoad`,
//! `jdk.ResidentSetSize` and `recorder.Footprint`. What they report is read without L
//! ([`Reading::now`], and the footprint the recording gathers); each source then writes its
//! events under L, in the order of [`sources`]. A new periodic event is a [`PeriodicSource`] in
//! this file and one line in that list.

use super::own;
use crate::chunk::ChunkWriter;
use crate::clock;
use crate::threads::exits::ExitedThreadCpu;
use crate::threads::proc;
use std::collections::HashMap;
use std::time::Instant;

/// A periodic event, written under L from the reading taken without it.
pub trait PeriodicSource: Send + std::fmt::Debug {
    /// Writes this reading's events (the first reading of a recording may only set a baseline).
    fn write(&mut self, chunk: &mut ChunkWriter, reading: &Reading);
}

/// The periodic sources, in the order they write.
pub fn sources() -> Vec<Box<dyn PeriodicSource>> {
    vec![
        Box::new(ThreadCpuLoad::default()),
        Box::new(CpuLoad::default()),
        Box::new(ResidentSetSize),
        Box::new(RecorderFootprint::default()),
    ]
}

/// Readings for the periodic events, taken without L.
#[derive(Debug, Default, Clone, Copy)]
pub struct CpuTimes {
    machine_busy: u64,
    machine_total: u64,
    at: Option<Instant>,
    user: u64,
    system: u64,
}

/// What the periodic events report, read without L.
#[derive(Debug, Clone)]
pub struct Reading {
    now: i64,
    cpu: CpuTimes,
    rss: Option<(u64, u64)>,
    threads: Vec<ThreadCpu>,
    /// Threads that exited since the last reading, with their CPU times as they exited (taken
    /// after `threads`: one that exited in between is in both).
    pub exited: Vec<ExitedThreadCpu>,
    /// The recorder's own memory, gathered by the recording (it knows its parts).
    pub footprint: Option<Footprint>,
}

/// The recorder's own memory by part, in bytes (`recorder.Footprint`).
#[derive(Debug, Clone, Default)]
pub struct Footprint {
    /// Event buffers allocated (adopted and spare), within `memory_budget`.
    pub event_buffers: u64,
    /// The sampler's buffers, resident (allocated at start, resident where samples were written).
    pub sampler_buffers: u64,
    /// The allocation sampler's records that may be resident.
    pub allocation_pool: u64,
    /// The stack table, resident (where nodes were written).
    pub stack_table: u64,
    /// The published unwind tables.
    pub unwind_tables: u64,
    /// Resident pages of the recorder's own shared library (0 when it is linked into the
    /// executable, whose pages are the program's too).
    pub own_code: u64,
    /// The process's symbolizer (`None`: busy; the last reading's figures stand).
    pub symbolizer: Option<crate::symbolize::Usage>,
}

/// One thread's CPU times from `/proc/self/task/TID/stat`, in clock ticks (USER_HZ).
#[derive(Debug, Clone)]
pub struct ThreadCpu {
    tid: u32,
    /// Start time (field 22): tells a reused tid from the thread read last time.
    start: u64,
    user: u64,
    system: u64,
    comm: String,
}

impl Reading {
    /// Reads `/proc` (call without L).
    pub fn now() -> Reading {
        Reading {
            now: clock::ticks_ordered(),
            cpu: read_cpu_times(),
            rss: read_rss(),
            threads: read_thread_cpu(),
            exited: Vec::new(),
            footprint: None,
        }
    }
}

/// `jdk.ThreadCPULoad`: each thread's share of the CPU since the last reading.
#[derive(Debug, Default)]
struct ThreadCpuLoad {
    /// When the last reading was taken.
    then: Option<Instant>,
    /// Each thread's (start time, user, system) CPU ticks at the last periodic reading.
    thread_cpu: HashMap<u32, (u64, u64, u64)>,
}

impl PeriodicSource for ThreadCpuLoad {
    /// `jdk.ThreadCPULoad` of every thread that used CPU since the last reading (at `then`):
    /// threads not read last time started since (their whole CPU time is in the interval); the
    /// first reading of a recording only sets the baseline. Idle threads get no event (a process
    /// may have thousands). Threads that exited since, sampled ones, get theirs from their CPU
    /// times at exit: a thread that lived between two readings is not missing.
    fn write(&mut self, chunk: &mut ChunkWriter, reading: &Reading) {
        let then = std::mem::replace(&mut self.then, reading.cpu.at);
        let previous = std::mem::take(&mut self.thread_cpu);
        self.thread_cpu = reading.threads.iter().map(|t| (t.tid, (t.start, t.user, t.system))).collect();
        let (Some(now), Some(then)) = (reading.cpu.at, then) else { return };
        let elapsed = now.duration_since(then).as_secs_f64();
        if elapsed <= 0.0 {
            return;
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        // Clock ticks (USER_HZ, 100 on Linux) over the wall time of all CPUs.
        let share = |d: u64| ((d as f64 / 100.0) / (elapsed * cpus)).clamp(0.0, 1.0) as f32;
        // (tid, name, user, system) in clock ticks since the last reading.
        let mut used: Vec<(u32, &str, u64, u64)> = Vec::new();
        for t in &reading.threads {
            let (user, system) = match previous.get(&t.tid) {
                Some(&(start, user, system)) if start == t.start => {
                    (t.user.saturating_sub(user), t.system.saturating_sub(system))
                }
                _ => (t.user, t.system),
            };
            used.push((t.tid, &t.comm, user, system));
        }
        // Where each listed thread is in `used`.
        let listed: std::collections::HashMap<u32, usize> = used.iter().enumerate().map(|(i, u)| (u.0, i)).collect();
        for e in &reading.exited {
            // Its times since this reading's /proc line (it exited after it), else since the
            // last reading's, else since its start (it lived between the two).
            let base = match self.thread_cpu.remove(&e.tid) {
                Some((_, user, system)) => Some((user, system)),
                None => previous.get(&e.tid).map(|&(_, user, system)| (user, system)),
            };
            let (base_user, base_system) = base.unwrap_or((0, 0));
            let ticks = |d: std::time::Duration| (d.as_micros() / 10_000) as u64; // USER_HZ 100
            let (user, system) = (ticks(e.user).saturating_sub(base_user), ticks(e.system).saturating_sub(base_system));
            match listed.get(&e.tid).and_then(|&i| used.get_mut(i)) {
                Some(u) => (u.2, u.3) = (u.2 + user, u.3 + system),
                None => used.push((e.tid, &e.name, user, system)),
            }
        }
        for (tid, name, user, system) in used {
            if user + system == 0 {
                continue;
            }
            chunk.observe_thread(tid, name, None);
            own::write_thread_cpu_load(chunk, reading.now, tid, share(user), share(system));
        }
    }
}

/// `jdk.CPULoad`: the process's and the machine's CPU use since the last reading.
#[derive(Debug, Default)]
struct CpuLoad {
    /// The last reading's times.
    cpu: CpuTimes,
}

impl PeriodicSource for CpuLoad {
    fn write(&mut self, chunk: &mut ChunkWriter, reading: &Reading) {
        let prev = std::mem::replace(&mut self.cpu, reading.cpu);
        let times = reading.cpu;
        if let (Some(now), Some(then)) = (times.at, prev.at) {
            let elapsed = now.duration_since(then).as_secs_f64();
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            // Process CPU in clock ticks (USER_HZ, 100 on Linux) over the wall time of all CPUs.
            let hz = 100.0;
            let share = |d: u64| ((d as f64 / hz) / (elapsed * cpus)).clamp(0.0, 1.0) as f32;
            let user = share(times.user.saturating_sub(prev.user));
            let system = share(times.system.saturating_sub(prev.system));
            let busy = times.machine_busy.saturating_sub(prev.machine_busy) as f64;
            let total = times.machine_total.saturating_sub(prev.machine_total) as f64;
            let machine = if total > 0.0 { (busy / total).clamp(0.0, 1.0) as f32 } else { 0.0 };
            if elapsed > 0.0 {
                own::write_cpu_load(chunk, reading.now, user, system, machine.max(user + system).min(1.0));
            }
        }
    }
}

/// `jdk.ResidentSetSize`.
#[derive(Debug)]
struct ResidentSetSize;

impl PeriodicSource for ResidentSetSize {
    fn write(&mut self, chunk: &mut ChunkWriter, reading: &Reading) {
        if let Some((size, peak)) = reading.rss {
            own::write_resident_set_size(chunk, reading.now, size, peak);
        }
    }
}

/// `recorder.Footprint`.
#[derive(Debug, Default)]
struct RecorderFootprint {
    /// The symbolizer's figures of the last reading that had them.
    symbolizer: crate::symbolize::Usage,
}

impl PeriodicSource for RecorderFootprint {
    fn write(&mut self, chunk: &mut ChunkWriter, reading: &Reading) {
        let Some(f) = &reading.footprint else { return };
        if let Some(usage) = &f.symbolizer {
            self.symbolizer = usage.clone();
        }
        let f = Footprint { symbolizer: Some(self.symbolizer.clone()), ..f.clone() };
        write_footprint(chunk, reading.now, &f);
    }
}

/// `recorder.Footprint`.
pub fn write_footprint(chunk: &mut ChunkWriter, now: i64, f: &Footprint) {
    let none = crate::symbolize::Usage::default();
    let s = f.symbolizer.as_ref().unwrap_or(&none);
    let about = |bytes: u64| match bytes {
        0..0x10_0000 => format!("~{} KiB", bytes.div_ceil(1 << 10)),
        _ => format!("~{} MiB", bytes.div_ceil(1 << 20)),
    };
    let symbols_only: Vec<String> =
        s.symbols_only.iter().map(|(module, bytes)| format!("{module} ({})", about(*bytes))).collect();
    let total = f.event_buffers
        + f.sampler_buffers
        + f.allocation_pool
        + f.stack_table
        + f.unwind_tables
        + f.own_code
        + s.heap_bytes
        + s.mapped_file_bytes;
    chunk.write(&crate::builtin::Footprint {
        start_time: now,
        event_buffers: f.event_buffers,
        sampler_buffers: f.sampler_buffers,
        allocation_pool: f.allocation_pool,
        stack_table: f.stack_table,
        unwind_tables: f.unwind_tables,
        own_code: f.own_code,
        symbolizer_heap: s.heap_bytes,
        mapped_debug_files: s.mapped_file_bytes,
        total,
        // 0 for no limit: JFR has no unsigned long, and the largest value reads as -1 bytes in
        // `jfr print` and JMC.
        memory_limit: match crate::symbolize::memory_limit() {
            usize::MAX => 0,
            limit => limit as u64,
        },
        symbols_only_modules: s.symbols_only.len() as u64,
        symbols_only: &symbols_only.join(", "),
    });
}

/// Every thread's CPU times (threads whose stat cannot be read, e.g. exited meanwhile, are left
/// out), read in the recorder's own descriptor table, all in one visit (`fds::privately`).
fn read_thread_cpu() -> Vec<ThreadCpu> {
    crate::fds::privately(read_thread_cpu_here)
}

fn read_thread_cpu_here() -> Vec<ThreadCpu> {
    let Ok((tids, _)) = proc::list_task_ids() else { return Vec::new() };
    let mut out = Vec::new();
    let mut buf = String::new();
    for tid in tids {
        if let Ok(st) = proc::task_stat(tid, &mut buf) {
            out.push(ThreadCpu {
                tid,
                start: st.start_time,
                user: st.utime,
                system: st.stime,
                comm: st.comm.to_owned(),
            });
        }
    }
    out
}

fn read_cpu_times() -> CpuTimes {
    let mut t = CpuTimes { at: Some(Instant::now()), ..CpuTimes::default() };
    if let Some(st) = crate::fds::read_string("/proc/self/stat").ok().as_deref().and_then(proc::parse_stat) {
        (t.user, t.system) = (st.utime, st.stime);
    }
    if let Ok(stat) = crate::fds::read_string("/proc/stat") {
        if let Some(line) = stat.lines().next() {
            let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
            let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
            t.machine_total = v.iter().sum();
            t.machine_busy = t.machine_total.saturating_sub(idle);
        }
    }
    t
}

fn read_rss() -> Option<(u64, u64)> {
    let status = crate::fds::read_string("/proc/self/status").ok()?;
    let kb = |key: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|v| v * 1024)
    };
    Some((kb("VmRSS:")?, kb("VmHWM:").unwrap_or(0)))
}
