//! Soak workload and consumer for scripts/soak.sh.
//!
//! `soak record BASE SECONDS [EVENTS_PER_SEC] [MAX_SIZE_MB]`: records with 1 kHz sampling while
//! four threads commit numbered `soak.Tick` events at the given total rate (default 100 000/s) and
//! burn some CPU (so they are sampled). Every 5 s it prints RSS, the allocator's bytes in use and
//! held free (glibc's `mallinfo2`: growth of the first is live data, of the second fragmentation),
//! repository size against its limit, and the counters; the repository size is also checked every 100 ms. At the end it
//! writes `BASE/committed.txt` (per-thread counts, recorder loss) for the consumer.
//!
//! `soak consume BASE`: follows the recording in BASE with our own reader, polling: every chunk
//! file in start order, the live chunk refreshed as it grows, until the final chunk ends. It
//! checks that every thread's numbers arrive in order, counts what it missed (gaps, chunks removed
//! by retention before it read them), and compares with `committed.txt`.
use recorder::{Event, EventSettings, Recorder};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

recorder::event! {
    #[event(name = "soak.Tick", label = "Tick")]
    pub struct Tick { pub t: u64, pub seq: u64, pub label: &'static str }
}

const THREADS: u64 = 4;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The allocator's view (glibc): bytes in live allocations, and bytes it holds free (RSS the
/// heap keeps without live data in it).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap_kib() -> (u64, u64) {
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let m = unsafe { libc::mallinfo2() };
    ((m.uordblks + m.hblkhd) as u64 >> 10, m.fordblks as u64 >> 10)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap_kib() -> (u64, u64) {
    (0, 0)
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

#[inline(never)]
fn soak_burn(until: Instant) -> u64 {
    let mut x = 1u64;
    while Instant::now() < until {
        for i in 0..1000u64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(i));
        }
    }
    x
}

fn record(base: &Path, seconds: u64, rate: u64, max_size: u64) {
    let rec = Recorder::builder()
        .repository(base)
        .sampling_period(Duration::from_millis(1))
        .max_size(max_size)
        .max_chunk_size(4 << 20)
        .event("soak.Tick", EventSettings { stack_trace: false, ..Default::default() })
        .start()
        .expect("starting the recorder");
    let dir = rec.repository_dir().to_owned();
    println!("recording into {} for {seconds} s at {rate} events/s, limit {} MB", dir.display(), max_size >> 20);
    let stop = AtomicBool::new(false);
    let committed: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    let max_repo = AtomicU64::new(0);
    let start = Instant::now();
    let per_tick = rate / THREADS / 100; // every 10 ms
    let mut rss_series = Vec::new();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (stop, committed) = (&stop, &committed);
            std::thread::Builder::new()
                .name(format!("soak-{t}"))
                .spawn_scoped(s, move || {
                    let mut seq = 0u64;
                    let mut next = Instant::now();
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..per_tick {
                            Tick { t, seq, label: "tick" }.commit();
                            seq += 1;
                        }
                        committed[t as usize].store(seq, Ordering::Relaxed);
                        next += Duration::from_millis(10);
                        // About 1 ms of CPU per 10 ms, so the threads are sampled.
                        soak_burn(Instant::now() + Duration::from_millis(1));
                        if let Some(wait) = next.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                    }
                })
                .unwrap();
        }
        let mut last_print = Instant::now();
        while start.elapsed() < Duration::from_secs(seconds) {
            std::thread::sleep(Duration::from_millis(100));
            max_repo.fetch_max(dir_size(&dir), Ordering::Relaxed);
            if last_print.elapsed() >= Duration::from_secs(5) {
                last_print = Instant::now();
                let st = rec.stats();
                let sampler = rec.sampler_stats().unwrap_or_default();
                let rss = rss_kib();
                let (heap, heap_free) = heap_kib();
                rss_series.push((start.elapsed().as_secs(), rss));
                println!(
                    "t={:>4}s rss={rss} KiB heap={heap} KiB (free {heap_free} KiB) repo={} KiB (max {} KiB, limit {} KiB) committed={} written={} lost={} \
                     samples written={} lost={} (sampler taken={} lost={}) chunks={} write_failures={}",
                    start.elapsed().as_secs(),
                    dir_size(&dir) >> 10,
                    max_repo.load(Ordering::Relaxed) >> 10,
                    max_size >> 10,
                    committed.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>(),
                    st.events_written,
                    st.events_lost,
                    st.samples_written,
                    st.samples_lost,
                    sampler.taken,
                    sampler.lost,
                    st.chunks_finished,
                    st.write_failures,
                );
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    let report = rec.stop_with_report().expect("stopping");
    let totals: Vec<u64> = committed.iter().map(|c| c.load(Ordering::Relaxed)).collect();
    let st = report.stats;
    let sampler = report.sampler.unwrap_or_default();
    // RSS after warm-up (the first quarter): growth from its first value to the last.
    let warm = rss_series.len() / 4;
    let rss_growth = match (rss_series.get(warm), rss_series.last()) {
        (Some(a), Some(b)) => b.1 as i64 - a.1 as i64,
        _ => 0,
    };
    let rss_max = rss_series.iter().map(|r| r.1).max().unwrap_or(0);
    println!(
        "RECORD-DONE committed={} events_written={} events_lost={} samples_written={} samples_lost={} \
         sampler_taken={} sampler_lost={} max_repo={} KiB limit={} KiB rss_max={rss_max} KiB \
         rss_growth_after_warmup={rss_growth} KiB",
        totals.iter().sum::<u64>(),
        st.events_written,
        st.events_lost,
        st.samples_written,
        st.samples_lost,
        sampler.taken,
        sampler.lost,
        max_repo.load(Ordering::Relaxed) >> 10,
        max_size >> 10,
    );
    let mut text = String::new();
    for (t, n) in totals.iter().enumerate() {
        text.push_str(&format!("thread {t} {n}\n"));
    }
    text.push_str(&format!("events_lost {}\nsamples_written {}\n", st.events_lost, st.samples_written));
    std::fs::write(base.join("committed.txt.tmp"), text).unwrap();
    std::fs::rename(base.join("committed.txt.tmp"), base.join("committed.txt")).unwrap();
}

/// One chunk file the consumer follows.
struct Followed {
    chunk: Option<jfr_format::Chunk>,
    pos: u64,
    done: bool,
}

#[derive(Default)]
struct Tally {
    next: BTreeMap<i64, i64>,
    seen: u64,
    gaps: u64,
    out_of_order: u64,
    samples: u64,
    lost_reported: i64,
    files_missed: u64,
}

fn take_items(chunk: &jfr_format::Chunk, pos: &mut u64, tally: &mut Tally) -> Result<(), jfr_format::Error> {
    let meta = chunk.metadata();
    let tick =
        meta.class_by_name("soak.Tick").map(|c| (c.id, c.field_index("t").unwrap(), c.field_index("seq").unwrap()));
    let sample = meta.class_by_name("jdk.ExecutionSample").map(|c| c.id);
    let loss = meta.class_by_name("recorder.DataLoss").map(|c| (c.id, c.field_index("events").unwrap()));
    let mut items = chunk.items(*pos);
    for item in items.by_ref() {
        let jfr_format::Item::Event(e) = item? else { continue };
        if let Some((id, ti, si)) = tick.filter(|(id, ..)| *id == e.type_id) {
            let _ = id;
            let t = e.values[ti].as_i64().unwrap_or(-1);
            let seq = e.values[si].as_i64().unwrap_or(-1);
            let next = tally.next.entry(t).or_insert(0);
            if seq > *next {
                tally.gaps += (seq - *next) as u64;
            } else if seq < *next {
                tally.out_of_order += 1;
            }
            *next = (*next).max(seq + 1);
            tally.seen += 1;
        } else if Some(e.type_id) == sample {
            tally.samples += 1;
        } else if let Some((_, li)) = loss.filter(|(id, _)| *id == e.type_id) {
            tally.lost_reported += e.values[li].as_i64().unwrap_or(0);
        }
    }
    *pos = items.position();
    Ok(())
}

fn consume(base: &Path) {
    let start = Instant::now();
    let dir: PathBuf = loop {
        let found = std::fs::read_dir(base).ok().and_then(|rd| rd.flatten().map(|e| e.path()).find(|p| p.is_dir()));
        if let Some(d) = found {
            break d;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut files: BTreeMap<PathBuf, Followed> = BTreeMap::new();
    let mut tally = Tally::default();
    let mut finished = false;
    let mut last_print = Instant::now();
    while !finished {
        std::thread::sleep(Duration::from_millis(200));
        let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|rd| rd.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "jfr")).collect())
            .unwrap_or_default();
        names.sort();
        for name in names {
            let f = files.entry(name.clone()).or_insert(Followed { chunk: None, pos: 0, done: false });
            if f.done {
                continue;
            }
            let Ok(data) = std::fs::read(&name) else {
                // Removed by retention before we finished it.
                tally.files_missed += 1;
                f.done = true;
                continue;
            };
            let data = bytes::Bytes::from(data);
            match f.chunk.as_mut() {
                None => match jfr_format::Chunk::parse(data, 0) {
                    Ok(c) => f.chunk = Some(c),
                    Err(jfr_format::Error::HeaderLocked { .. }) => continue,
                    Err(e) => panic!("{}: {e}", name.display()),
                },
                Some(c) => match c.refresh(data) {
                    Ok(_) => {}
                    Err(e) => panic!("{}: refresh: {e}", name.display()),
                },
            }
            let c = f.chunk.as_ref().unwrap();
            take_items(c, &mut f.pos, &mut tally).unwrap_or_else(|e| panic!("{}: {e}", name.display()));
            if c.header().is_finished() {
                f.done = true;
                finished |= c.header().is_final();
                f.chunk = None;
            } else {
                // Only the live chunk is unfinished: do not read past it yet.
                break;
            }
        }
        if last_print.elapsed() >= Duration::from_secs(5) {
            last_print = Instant::now();
            println!(
                "consumer t={:>4}s seen={} gaps={} samples={} files={}",
                start.elapsed().as_secs(),
                tally.seen,
                tally.gaps,
                tally.samples,
                files.len()
            );
        }
    }
    // The recorder writes the committed counts when it has stopped.
    let committed_path = base.join("committed.txt");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !committed_path.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = std::fs::read_to_string(&committed_path).unwrap_or_default();
    let mut committed = 0u64;
    let mut lost = 0u64;
    let mut samples_written = 0u64;
    for line in text.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["thread", t, n] => {
                let n: u64 = n.parse().unwrap();
                committed += n;
                // Events at the end of a thread that never arrived are gaps too.
                let next = tally.next.get(&t.parse::<i64>().unwrap()).copied().unwrap_or(0) as u64;
                tally.gaps += n.saturating_sub(next);
            }
            ["events_lost", n] => lost = n.parse().unwrap(),
            ["samples_written", n] => samples_written = n.parse().unwrap(),
            _ => {}
        }
    }
    let every = tally.seen + lost == committed && tally.out_of_order == 0;
    println!(
        "CONSUMER-DONE committed={committed} seen={} lost_counted_by_recorder={lost} (DataLoss events say {}) \
         gaps={} out_of_order={} files_removed_before_read={} samples_seen={} samples_written={samples_written} \
         verdict={}",
        tally.seen,
        tally.lost_reported,
        tally.gaps,
        tally.out_of_order,
        tally.files_missed,
        tally.samples,
        if every { "EVERY-EVENT-SEEN-OR-COUNTED" } else { "MISSING-EVENTS" }
    );
    if !every {
        std::process::exit(1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("record") if args.len() >= 3 => {
            let rate = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(100_000);
            let max_mb: u64 = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(64);
            record(Path::new(&args[1]), args[2].parse().expect("seconds"), rate, max_mb << 20);
        }
        Some("consume") if args.len() >= 2 => consume(Path::new(&args[1])),
        _ => {
            eprintln!("usage: soak record BASE SECONDS [EVENTS_PER_SEC] [MAX_SIZE_MB] | soak consume BASE");
            std::process::exit(2);
        }
    }
}
