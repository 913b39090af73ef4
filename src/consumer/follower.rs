//! The reading engine behind an [`EventStream`](super::EventStream): finds the chunk directory and
//! its chunks, reads each (live ones as snapshots, re-read as they grow) and hands out their
//! events in order (the rules are in the module docs of `consumer`).

#[allow(clippy::wildcard_imports)]
use super::*;

/// The reading engine behind `run`, `start` and `iter`.
pub(super) struct Follower {
    pub(super) root: PathBuf,
    mode: Mode,
    config: Config,
    closed: Arc<AtomicBool>,
    /// The chunk directory, once a chunk was found in it.
    chunk_dir: Option<PathBuf>,
    current: Option<Current>,
    after: After,
    /// Files reported as unreadable once, not again.
    reported: HashSet<PathBuf>,
    /// File mode: the whole file and where the next chunk starts.
    file_data: Option<(Bytes, usize)>,
    /// Files left out of scans (headers that stayed locked).
    ignored: HashSet<PathBuf>,
    /// Start times of the chunk files seen by the last scan.
    starts: HashMap<(PathBuf, u64), i64>,
    /// Consecutive attempts to open a chunk that was not ready.
    not_ready: u32,
    /// Problems found by a directory scan, delivered before anything else.
    pending: VecDeque<ConsumerError>,
    /// With every recording: the last chunk finished had the final flag (the stream ends when no
    /// chunk follows it).
    final_read: bool,
    /// See [`super::EventIter::published_end_nanos`].
    pub(super) published_end_nanos: i64,
    done: bool,
}

impl Follower {
    pub(super) fn new(root: PathBuf, mode: Mode, config: Config, closed: Arc<AtomicBool>) -> Follower {
        Follower {
            root,
            mode,
            config,
            closed,
            chunk_dir: None,
            current: None,
            after: After::Nothing,
            reported: HashSet::new(),
            file_data: None,
            pending: VecDeque::new(),
            not_ready: 0,
            starts: HashMap::new(),
            ignored: HashSet::new(),
            final_read: false,
            published_end_nanos: 0,
            done: false,
        }
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Sleeps `d`, waking early when the stream is closed.
    fn sleep(&self, d: Duration) {
        let step = Duration::from_millis(10);
        let mut left = d;
        while !left.is_zero() && !self.is_closed() {
            let s = left.min(step);
            std::thread::sleep(s);
            left -= s;
        }
    }

    /// The next event, flush or problem; `None` when the stream has ended. `want` says which event
    /// types to decode into [`ConsumedEvent`]s (others are skipped cheaply). `wait`: sleep a poll
    /// interval when everything published was read, else return [`Step::Idle`].
    pub(super) fn next_step(&mut self, want: &dyn Fn(&str) -> bool, wait: bool) -> Option<Step> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                return Some(Step::Error(e));
            }
            if self.done || self.is_closed() {
                self.done = true;
                return None;
            }
            let Some(cur) = self.current.as_mut() else {
                match self.open_next() {
                    Ok(true) => continue,
                    Ok(false) => {
                        if self.mode == Mode::File || !self.config.follow || self.final_read {
                            self.done = true;
                        } else if !wait {
                            return Some(Step::Idle);
                        } else {
                            self.sleep(self.config.poll);
                        }
                        continue;
                    }
                    Err(e) => return Some(Step::Error(e)),
                }
            };
            let mut items = cur.chunk.items(cur.pos);
            let item = items.next();
            cur.pos = items.position();
            match item {
                Some(Ok(Item::Flush)) => return Some(Step::Flush),
                Some(Ok(Item::Event(event))) => {
                    let Some(info) = cur.cache.type_info(&cur.chunk, event.type_id) else {
                        continue;
                    };
                    if !want(&info.name) {
                        continue;
                    }
                    match cur.cache.event(&cur.chunk, info, event) {
                        Ok(ev) => return Some(Step::Event(ev)),
                        // A constant that cannot be decoded spoils one event, not the chunk.
                        Err(e) => return Some(Step::Error(format_err(&cur.path, e))),
                    }
                }
                Some(Err(e)) => {
                    let err = format_err(&cur.path, e);
                    self.abandon();
                    return Some(Step::Error(err));
                }
                None => {
                    let header = *cur.chunk.header();
                    self.published_end_nanos =
                        self.published_end_nanos.max(header.start_nanos.saturating_add(header.duration_nanos));
                    if header.is_finished() || cur.file.is_none() {
                        self.current = None;
                        if self.mode == Mode::Repository && header.is_final() && !self.config.all {
                            self.done = true;
                        } else {
                            self.final_read = self.mode == Mode::Repository && header.is_final();
                            self.after = After::End(header.start_nanos.saturating_add(header.duration_nanos.max(1)));
                        }
                        continue;
                    }
                    let path = cur.path.clone();
                    match refresh(cur) {
                        Ok(Some(true)) => {
                            self.not_ready = 0;
                            continue;
                        }
                        Ok(Some(false)) if !self.config.follow => {
                            // Not following: an unfinished chunk ends here; a newer chunk, if
                            // any, comes next.
                            self.after = After::Skip(header.start_nanos);
                            self.current = None;
                        }
                        Ok(Some(false)) if self.config.all && self.later_chunk_elsewhere(&path, header.start_nanos) => {
                            // A live chunk left behind by a writer that is gone (another
                            // recording started after it): what was read of it is all there is.
                            self.after = After::Skip(header.start_nanos);
                            self.current = None;
                        }
                        Ok(Some(false)) if !wait => return Some(Step::Idle),
                        Ok(Some(false)) => self.sleep(self.config.poll),
                        Ok(None) => {
                            self.not_ready += 1;
                            if !self.config.follow && self.not_ready > NOT_READY_LIMIT {
                                // A header left locked by a writer that died: what was read is
                                // all there is.
                                self.not_ready = 0;
                                self.abandon();
                                let e = io::Error::other("the chunk header stays locked");
                                return Some(Step::Error(io_err(&path, e)));
                            }
                            self.sleep(LOCKED_RETRY);
                        }
                        Err(e) => {
                            self.abandon();
                            return Some(Step::Error(e));
                        }
                    }
                }
            }
        }
    }

    fn abandon(&mut self) {
        if let Some(cur) = self.current.take() {
            self.after = After::Skip(cur.chunk.header().start_nanos);
            if self.mode == Mode::File {
                // The next chunk of a file starts where this one's header says it ends; with a
                // corrupt chunk that is not to be trusted.
                self.done = true;
            }
        }
    }

    /// Opens the next chunk: `Ok(true)` if one is current now or the caller should try again at
    /// once, `Ok(false)` if none is there yet.
    fn open_next(&mut self) -> Result<bool, ConsumerError> {
        match self.mode {
            Mode::File => self.open_next_in_file(),
            Mode::Repository => self.open_next_in_repository(),
        }
    }

    fn open_next_in_file(&mut self) -> Result<bool, ConsumerError> {
        if self.file_data.is_none() {
            let data = std::fs::read(&self.root).map_err(|e| {
                self.done = true;
                io_err(&self.root, e)
            })?;
            self.file_data = Some((Bytes::from(data), 0));
        }
        let Some((data, pos)) = self.file_data.as_mut() else {
            return Ok(false);
        };
        if *pos >= data.len() {
            return Ok(false);
        }
        let chunk = match Chunk::parse(data.slice(*pos..), *pos as u64) {
            Ok(c) => c,
            Err(e) => {
                self.done = true;
                return Err(format_err(&self.root, e));
            }
        };
        // An unfinished chunk (a copy of a live one, or a crash) is read up to its published size;
        // what follows it is not a chunk.
        *pos = if chunk.header().is_finished() { *pos + chunk.size() as usize } else { data.len() };
        self.current = Some(Current {
            path: self.root.clone(),
            file: None,
            pos: HEADER_SIZE as u64,
            cache: Resolver::new(&chunk),
            chunk,
        });
        Ok(true)
    }

    fn open_next_in_repository(&mut self) -> Result<bool, ConsumerError> {
        let dirs = self.dirs();
        let (chunks, locked) = self.scan(&dirs);
        if let Some(path) = locked {
            // A header being rewritten: its start time is unknown, and it may be the chunk to read
            // next. Scan again shortly; a header that stays locked (a writer that died in the
            // middle of a rewrite) is ignored after about a second, as the JDK's scan does.
            self.not_ready += 1;
            if self.not_ready > NOT_READY_LIMIT {
                self.not_ready = 0;
                self.ignored.insert(path.clone());
                return Err(io_err(&path, io::Error::other("skipped: its header stays locked")));
            }
            self.sleep(LOCKED_RETRY);
            return Ok(true);
        }
        let candidate = match self.after {
            After::Nothing => match self.config.start {
                StartAt::Beginning => chunks.iter().next(),
                StartAt::Now => chunks.iter().next_back(),
            },
            After::End(end) => chunks.range(end..).next(),
            After::Skip(start) => chunks.range(start.saturating_add(1)..).next(),
        };
        let Some((&start_nanos, path)) = candidate else {
            return Ok(false);
        };
        let path = path.clone();
        if self.chunk_dir.is_none() && !self.config.all {
            self.chunk_dir = path.parent().map(Path::to_path_buf);
        }
        if path.extension().is_some_and(|e| e == "zst") {
            return self.open_compressed(start_nanos, path);
        }
        let file = match File::open(&path) {
            Ok(f) => f,
            // Removed by retention between the scan and now: scan again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => {
                self.after = After::Skip(start_nanos);
                return Err(io_err(&path, e));
            }
        };
        let data = match read_snapshot(&file, None) {
            Ok(Some(d)) => d,
            Ok(None) => return self.not_ready(start_nanos, &path, "its header stays locked"),
            Err(e) => {
                self.after = After::Skip(start_nanos);
                return Err(io_err(&path, e));
            }
        };
        let chunk = match Chunk::parse(data, 0) {
            Ok(c) => c,
            Err(jfr_format::Error::HeaderLocked { .. }) => {
                return self.not_ready(start_nanos, &path, "its header stays locked")
            }
            Err(jfr_format::Error::NoMetadata { .. }) => {
                return self.not_ready(start_nanos, &path, "nothing was published in it")
            }
            Err(e) => {
                self.after = After::Skip(start_nanos);
                return Err(format_err(&path, e));
            }
        };
        self.start_reading(path, Some(file), chunk)
    }

    /// Opens a compressed chunk file: a finished chunk, read whole.
    fn open_compressed(&mut self, start_nanos: i64, path: PathBuf) -> Result<bool, ConsumerError> {
        let data = match layout::read_finished_chunk(&path) {
            Ok(d) => d,
            // Removed by retention between the scan and now: scan again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => {
                self.after = After::Skip(start_nanos);
                return Err(io_err(&path, e));
            }
        };
        let chunk = match Chunk::parse(Bytes::from(data), 0) {
            Ok(c) => c,
            Err(e) => {
                self.after = After::Skip(start_nanos);
                return Err(format_err(&path, e));
            }
        };
        self.start_reading(path, None, chunk)
    }

    /// Makes the opened chunk the current one: read from its first event, or (a stream that
    /// starts now, on its first chunk) from its end. `file`: the live chunk file, read again as
    /// it grows; `None` for a finished chunk read whole.
    fn start_reading(&mut self, path: PathBuf, file: Option<File>, chunk: Chunk) -> Result<bool, ConsumerError> {
        let pos = match (self.after, self.config.start) {
            (After::Nothing, StartAt::Now) => chunk.size(),
            _ => HEADER_SIZE as u64,
        };
        self.current = Some(Current { path, file, pos, cache: Resolver::new(&chunk), chunk });
        self.not_ready = 0;
        self.final_read = false;
        Ok(true)
    }

    /// The directories whose chunk files are scanned: the chosen recording's, or (every
    /// recording) the root and each recording directory in it.
    fn dirs(&self) -> Vec<PathBuf> {
        if !self.config.all {
            return vec![self.chunk_dir.clone().unwrap_or_else(|| self.pick_dir())];
        }
        let mut dirs = vec![self.root.clone()];
        dirs.extend(layout::recording_dirs(&self.root).into_iter().flatten().map(|r| r.path));
        dirs
    }

    /// A chunk of another directory (another recording) starts after the chunk at `path`, which
    /// starts at `start`.
    fn later_chunk_elsewhere(&mut self, path: &Path, start: i64) -> bool {
        let dirs = self.dirs();
        let (chunks, _) = self.scan(&dirs);
        chunks.range(start.saturating_add(1)..).any(|(_, p)| p.parent() != path.parent())
    }

    /// A chunk that cannot be read yet (header locked, no metadata published): retried without
    /// limit while following, and given up after about a second (as the JDK's file mode does)
    /// when not.
    fn not_ready(&mut self, start_nanos: i64, path: &Path, why: &str) -> Result<bool, ConsumerError> {
        self.not_ready += 1;
        if !self.config.follow && self.not_ready > NOT_READY_LIMIT {
            self.not_ready = 0;
            self.after = After::Skip(start_nanos);
            return Err(io_err(path, io::Error::other(format!("skipped: {why}"))));
        }
        self.sleep(LOCKED_RETRY);
        // Not "nothing there": the caller must not end a non-following stream.
        Ok(true)
    }

    /// The chunk directory to scan: the most recently modified recording subdirectory of the
    /// root, or the root itself.
    fn pick_dir(&self) -> PathBuf {
        let Ok(recordings) = layout::recording_dirs(&self.root) else {
            return self.root.clone();
        };
        let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
        for r in recordings {
            let modified = r.metadata.modified().unwrap_or(std::time::UNIX_EPOCH);
            if best.as_ref().is_none_or(|(m, _)| modified > *m) {
                best = Some((modified, r.path));
            }
        }
        best.map(|(_, p)| p).unwrap_or_else(|| self.root.clone())
    }

    /// The chunk files of `dirs` by header start time. Files whose header is being rewritten are
    /// left for the next scan; files that are not chunks are reported once.
    fn scan(&mut self, dirs: &[PathBuf]) -> (BTreeMap<i64, PathBuf>, Option<PathBuf>) {
        let mut out = BTreeMap::new();
        let mut locked = None;
        // A chunk's start time never changes: headers are read once per file (by name and inode),
        // so a scan of a large repository costs one readdir.
        let mut starts = HashMap::with_capacity(self.starts.len());
        let entries = dirs.iter().filter_map(|d| std::fs::read_dir(d).ok()).flatten();
        for entry in entries.flatten() {
            let path = entry.path();
            let chunk_name = entry.file_name().to_str().is_some_and(layout::is_chunk_file_name);
            if !chunk_name || self.ignored.contains(&path) {
                continue;
            }
            let key = (path, entry.ino());
            if let Some(&start) = self.starts.get(&key) {
                starts.insert(key.clone(), start);
                out.entry(start).or_insert(key.0);
                continue;
            }
            let path = key.0.clone();
            if path.extension().is_some_and(|e| e == "zst") {
                // Compressed: finished, its header never changes.
                match layout::read_chunk_header(&path) {
                    Ok(h) => {
                        starts.insert(key, h.start_nanos);
                        out.entry(h.start_nanos).or_insert(path);
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => {
                        if self.reported.insert(path.clone()) {
                            self.pending.push_back(io_err(&path, e));
                        }
                    }
                }
                continue;
            }
            let Ok(file) = File::open(&path) else {
                continue;
            };
            match read_header(&file) {
                Ok(Some(bytes)) => match ChunkHeader::parse(&bytes, 0) {
                    Ok(h) => {
                        starts.insert(key, h.start_nanos);
                        // Equal start times collide, as in the JDK; keep the first name.
                        out.entry(h.start_nanos).or_insert(path);
                    }
                    Err(e) => {
                        if self.reported.insert(path.clone()) {
                            self.pending.push_back(format_err(&path, e));
                        }
                    }
                },
                Ok(None) => {
                    // Shorter than a header (not a chunk yet), or its header is being rewritten.
                    if entry.metadata().is_ok_and(|m| m.len() >= HEADER_SIZE as u64) {
                        locked = Some(path);
                    }
                }
                Err(_) => {}
            }
        }
        self.starts = starts;
        (out, locked)
    }
}

/// Reads the 68-byte header twice; returns it only if both reads agree and the guard is not set
/// (docs/jfr-format.md, "Publishing a live chunk"). `None`: being rewritten, or shorter than a header; try later.
fn read_header(file: &File) -> io::Result<Option<[u8; HEADER_SIZE]>> {
    let mut a = [0u8; HEADER_SIZE];
    let mut b = [0u8; HEADER_SIZE];
    match file.read_exact_at(&mut a, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    if a[STATE_OFFSET] == STATE_GUARD {
        return Ok(None);
    }
    file.read_exact_at(&mut b, 0)?;
    Ok((a == b).then_some(a))
}

/// A consistent snapshot of a chunk file: its header and the data up to the published size.
/// `old` is the previous snapshot: published bytes never change, so only the tail is read.
fn read_snapshot(file: &File, old: Option<&Bytes>) -> io::Result<Option<Bytes>> {
    let Some(header) = read_header(file)? else {
        return Ok(None);
    };
    let mut size_bytes = [0u8; 8];
    size_bytes.copy_from_slice(&header[8..16]);
    let published = i64::from_be_bytes(size_bytes).max(HEADER_SIZE as i64) as u64;
    // Never trust the header for the allocation: the file length bounds it (a size beyond it is
    // then reported by the parser).
    let want = published.min(file.metadata()?.len()).max(HEADER_SIZE as u64) as usize;
    let mut data = Vec::with_capacity(want);
    data.extend_from_slice(&header);
    let reuse = old.map_or(HEADER_SIZE, |o| o.len().clamp(HEADER_SIZE, want));
    if let Some(o) = old {
        data.extend_from_slice(&o[HEADER_SIZE..reuse]);
    }
    data.resize(want, 0);
    match file.read_exact_at(&mut data[reuse..], reuse as u64) {
        Ok(()) => {}
        // Truncated under us: keep what is there, the parser reports the short chunk.
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(e),
    }
    Ok(Some(Bytes::from(data)))
}

/// Looks for newly published data in the current live chunk: `Some(true)` grew (or finished),
/// `Some(false)` unchanged, `None` header locked.
fn refresh(cur: &mut Current) -> Result<Option<bool>, ConsumerError> {
    let Some(file) = cur.file.as_ref() else {
        return Ok(Some(false));
    };
    // Cheap check first: only the header is read unless size or state changed.
    let header = match read_header(file) {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err(e) => return Err(io_err(&cur.path, e)),
    };
    let parsed = ChunkHeader::parse(&header, 0).map_err(|e| format_err(&cur.path, e))?;
    let old = cur.chunk.header();
    if parsed.chunk_size == old.chunk_size && parsed.state == old.state {
        return Ok(Some(false));
    }
    let data = match read_snapshot(file, Some(cur.chunk.bytes())) {
        Ok(Some(d)) => d,
        Ok(None) => return Ok(None),
        Err(e) => return Err(io_err(&cur.path, e)),
    };
    match cur.chunk.refresh(data) {
        Ok(jfr_format::Refresh::Grew) => Ok(Some(true)),
        Ok(jfr_format::Refresh::Unchanged) => Ok(Some(false)),
        Ok(jfr_format::Refresh::Locked) => Ok(None),
        Err(e) => Err(format_err(&cur.path, e)),
    }
}
