//! The control socket: dumps of a running recording requested through it, clear errors for
//! processes that do not record or do not exist, planted sockets and peers of other users refused.

mod common;

// One recording per process at a time; the environment is changed only under `serial()` too.
use common::serial;
use recorder::control::{self, ControlError};
use recorder::{Event, Recorder};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

recorder::event! {
    /// A numbered event.
    #[event(name = "test.Ctl", label = "Control test", category = ["Test"])]
    pub struct Ctl {
        pub seq: u64,
    }
}

const CHILD_ENV: &str = "RECORDER_CONTROL_TEST_CHILD";
const RECORDING_CHILD_ENV: &str = "RECORDER_CONTROL_TEST_RECORDING_CHILD";

/// `jfr summary` must succeed (a missing `jfr` fails the test); returns the count of `type_name`.
fn jfr_summary_count(path: &Path, type_name: &str) -> u64 {
    let out = Command::new("jfr").arg("summary").arg(path).output().expect("the JDK's jfr tool is required");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "jfr summary failed: {}\n{}", text, String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("Exception"), "{text}");
    text.lines()
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (parts.len() == 3 && parts[0] == type_name).then(|| parts[1].parse().unwrap())
        })
        .next()
        .unwrap_or(0)
}

fn sleeper() -> std::process::Child {
    Command::new("sleep").arg("30").spawn().unwrap()
}

#[test]
fn dump_and_ping_through_the_socket_of_this_process() {
    let _guard = serial();
    std::env::remove_var(control::ENV_DIR);
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    for seq in 0..250 {
        Ctl { seq }.commit();
    }
    let pid = std::process::id();
    let socket = control::socket_dir().join(format!("{pid}.sock"));
    assert!(socket.exists(), "no socket at {}", socket.display());
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "socket mode {mode:o}");
    let dir_mode = std::fs::metadata(control::socket_dir()).unwrap().permissions().mode() & 0o777;
    assert_eq!(dir_mode, 0o700, "socket dir mode {dir_mode:o}");

    let (p, dir) = control::ping(pid).unwrap();
    assert_eq!(p, pid);
    assert_eq!(dir, rec.repository_dir());

    let out = base.path().join("via-socket.jfr");
    let bytes = control::request_dump(pid, &out).unwrap();
    assert_eq!(bytes, std::fs::metadata(&out).unwrap().len());
    assert_eq!(jfr_summary_count(&out, "test.Ctl"), 250);

    // An unwritable path is an error from the process, not a crash.
    match control::request_dump(pid, "/nonexistent-dir/x.jfr") {
        Err(ControlError::Remote { message }) => assert!(message.contains("nonexistent-dir"), "{message}"),
        other => panic!("expected a remote error, got {other:?}"),
    }
    // The recording still works after that.
    Ctl { seq: 250 }.commit();
    let out2 = base.path().join("again.jfr");
    control::request_dump(pid, &out2).unwrap();
    assert_eq!(jfr_summary_count(&out2, "test.Ctl"), 251);

    rec.stop().unwrap();
    assert!(!socket.exists(), "socket not removed on stop");
    match control::request_dump(pid, base.path().join("after.jfr")) {
        Err(e @ ControlError::NotRecording { .. }) => eprintln!("after stop: {e}"),
        other => panic!("expected NotRecording after stop, got {other:?}"),
    }
}

#[test]
fn processes_that_do_not_record_or_do_not_exist() {
    let _guard = serial();
    std::env::remove_var(control::ENV_DIR);
    let out = tempfile::tempdir().unwrap();
    let mut child = sleeper();
    match control::request_dump(child.id(), out.path().join("x.jfr")) {
        Err(e @ ControlError::NotRecording { .. }) => eprintln!("not recording: {e}"),
        other => panic!("expected NotRecording, got {other:?}"),
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    match control::request_dump(gone_pid, out.path().join("x.jfr")) {
        Err(e @ ControlError::NoSuchProcess { .. }) => eprintln!("vanished: {e}"),
        other => panic!("expected NoSuchProcess, got {other:?}"),
    }
    assert!(matches!(control::ping(0), Err(ControlError::NoSuchProcess { pid: 0 })));
    assert!(matches!(control::ping(u32::MAX), Err(ControlError::NoSuchProcess { .. })));
}

#[test]
fn planted_sockets_are_refused() {
    let _guard = serial();
    let sockets = tempfile::tempdir().unwrap();
    std::env::set_var(control::ENV_DIR, sockets.path());
    let out = tempfile::tempdir().unwrap();

    // Client side: a regular file where the socket of a live process would be.
    let mut child = sleeper();
    let planted = sockets.path().join(format!("{}.sock", child.id()));
    std::fs::write(&planted, b"not a socket").unwrap();
    match control::request_dump(child.id(), out.path().join("x.jfr")) {
        Err(e @ ControlError::Untrusted { .. }) => eprintln!("planted file: {e}"),
        other => panic!("expected Untrusted, got {other:?}"),
    }
    // A real socket at that path, but served by another process (this one): refused after
    // SO_PEERCRED, before anything is sent.
    std::fs::remove_file(&planted).unwrap();
    let impostor = std::os::unix::net::UnixListener::bind(&planted).unwrap();
    match control::request_dump(child.id(), out.path().join("x.jfr")) {
        Err(e @ ControlError::Untrusted { .. }) => eprintln!("impostor: {e}"),
        other => panic!("expected Untrusted, got {other:?}"),
    }
    drop(impostor);
    child.kill().unwrap();
    child.wait().unwrap();

    // Server side: something that is not our socket at our own path is left alone; the
    // recording runs without a control socket.
    let own = sockets.path().join(format!("{}.sock", std::process::id()));
    std::fs::write(&own, b"planted").unwrap();
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    Ctl { seq: 1 }.commit();
    assert_eq!(std::fs::read(&own).unwrap(), b"planted");
    assert!(matches!(control::ping(std::process::id()), Err(ControlError::Untrusted { .. })));
    rec.dump(base.path().join("direct.jfr")).unwrap();
    rec.stop().unwrap();
    assert_eq!(std::fs::read(&own).unwrap(), b"planted");

    // A socket still served by someone (another process with our pid, in another pid namespace)
    // is left alone too.
    std::fs::remove_file(&own).unwrap();
    let live = std::os::unix::net::UnixListener::bind(&own).unwrap();
    let ino = || std::os::unix::fs::MetadataExt::ino(&std::fs::symlink_metadata(&own).unwrap());
    let before = ino();
    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    assert_eq!(ino(), before, "a live socket was replaced");
    rec.stop().unwrap();
    assert_eq!(ino(), before, "a live socket was removed");
    // A stale socket of ours (its process gone) is replaced.
    drop(live);
    assert!(own.exists());
    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    assert_eq!(control::ping(std::process::id()).unwrap().0, std::process::id());
    rec.stop().unwrap();
    assert!(!own.exists());
    std::env::remove_var(control::ENV_DIR);
}

#[test]
fn peers_of_another_user_are_refused() {
    let _guard = serial();
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("NOTE: not running as root; the other-user part of the control test is skipped");
        return;
    }
    let sockets = tempfile::tempdir().unwrap();
    // Let uid 65534 reach the socket, so that only the listener's SO_PEERCRED check stands in its
    // way (the default 0700 directory and 0600 socket already stop it at connect()).
    // (The listener makes its directory 0700 when it starts, so this comes after.)
    std::env::set_var(control::ENV_DIR, sockets.path());
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    Ctl { seq: 1 }.commit();
    let pid = std::process::id();
    let socket = sockets.path().join(format!("{pid}.sock"));
    std::fs::set_permissions(sockets.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();

    // The test binary, where uid 65534 can run it.
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("control-test");
    std::fs::copy(std::env::current_exe().unwrap(), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(out_dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = out_dir.path().join("stolen.jfr");

    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(&bin);
    cmd.args(["child_mode_other_user", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{pid} {}", out.display()))
        .env(control::ENV_DIR, sockets.path())
        .current_dir("/");
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let result = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&result.stdout);
    eprintln!("child: {stdout}");
    assert!(result.status.success(), "child failed:\n{stdout}\n{}", String::from_utf8_lossy(&result.stderr));
    assert!(stdout.contains("1 passed"), "the child test did not run:\n{stdout}");
    assert!(!out.exists(), "a dump was written for another user");
    // The refusal did not disturb the listener.
    assert_eq!(control::ping(pid).unwrap().0, pid);
    rec.stop().unwrap();
    std::env::remove_var(control::ENV_DIR);
}

/// Runs only in the child of `peers_of_another_user_are_refused`, as uid 65534.
#[test]
fn child_mode_other_user() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    // SAFETY: getuid has no preconditions.
    assert_eq!(unsafe { libc::getuid() }, 65534);
    let (pid, out) = spec.split_once(' ').unwrap();
    let pid: u32 = pid.parse().unwrap();
    match control::request_dump(pid, out) {
        Err(e @ ControlError::PermissionDenied { .. }) => {
            println!("refused as expected: {e}");
            assert!(e.to_string().contains("refused"), "refused by the file system, not by the process: {e}");
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    match control::ping(pid) {
        Err(ControlError::PermissionDenied { .. }) => {}
        other => panic!("expected PermissionDenied for PING, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(1));
}

/// The pid of a process that existed and is gone.
fn dead_pid() -> u32 {
    let mut gone = Command::new("true").spawn().unwrap();
    let pid = gone.id();
    gone.wait().unwrap();
    pid
}

#[test]
fn sockets_of_dead_processes_are_removed_at_the_next_start() {
    let _guard = serial();
    let sockets = tempfile::tempdir().unwrap();
    std::env::set_var(control::ENV_DIR, sockets.path());
    let base = tempfile::tempdir().unwrap();
    let socket_of = |pid: u32| sockets.path().join(format!("{pid}.sock"));

    // A recording process killed with SIGKILL leaves its socket behind.
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child_records_until_killed", "--exact", "--nocapture", "--test-threads=1"])
        .env(RECORDING_CHILD_ENV, base.path())
        .env(control::ENV_DIR, sockets.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let killed = socket_of(child.id());
    let waiting_since = std::time::Instant::now();
    while control::ping(child.id()).is_err() {
        assert!(waiting_since.elapsed() < Duration::from_secs(120), "the child never served its socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(killed.exists(), "a killed process cannot remove its socket");

    // Left alone: a dead pid's socket that someone still serves (a process of another pid
    // namespace), a socket of a live process that nobody serves (a reused pid), and files that
    // are not sockets.
    let served = socket_of(dead_pid());
    let _listener = std::os::unix::net::UnixListener::bind(&served).unwrap();
    let mut sleeping = sleeper();
    let unserved_live = socket_of(sleeping.id());
    drop(std::os::unix::net::UnixListener::bind(&unserved_live).unwrap());
    let not_a_socket = socket_of(dead_pid());
    std::fs::write(&not_a_socket, b"not a socket").unwrap();
    let other_name = sockets.path().join("notes.sock");
    drop(std::os::unix::net::UnixListener::bind(&other_name).unwrap());

    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    assert!(!killed.exists(), "the dead recording's socket is still there");
    for kept in [&served, &unserved_live, &not_a_socket, &other_name] {
        assert!(kept.exists(), "{} was removed", kept.display());
    }
    assert_eq!(control::ping(std::process::id()).unwrap().0, std::process::id());
    rec.stop().unwrap();

    // Without starting a recording (what `recorder repair` can call).
    let later = socket_of(dead_pid());
    drop(std::os::unix::net::UnixListener::bind(&later).unwrap());
    assert_eq!(control::remove_dead_sockets(), vec![later.clone()]);
    assert!(!later.exists() && served.exists() && unserved_live.exists());

    sleeping.kill().unwrap();
    sleeping.wait().unwrap();
    std::env::remove_var(control::ENV_DIR);
}

/// Runs only in the child of `sockets_of_dead_processes_are_removed_at_the_next_start`: records
/// until it is killed.
#[test]
fn child_records_until_killed() {
    let Some(base) = std::env::var_os(RECORDING_CHILD_ENV) else {
        return;
    };
    let _rec = Recorder::builder().repository(base).no_sampling().start().unwrap();
    loop {
        Ctl { seq: 0 }.commit();
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Peers that connect and send nothing (or half a line) delay no other: a PING sent behind three
/// of them is answered while they are still connected (the listener used to serve one connection
/// at a time, waiting up to 5 s for each line, and closed each idle peer before it read the next).
#[test]
fn idle_peers_delay_no_other() {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let _guard = serial();
    std::env::remove_var(control::ENV_DIR);
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    let socket = control::socket_dir().join(format!("{}.sock", std::process::id()));
    let mut idle: Vec<UnixStream> = (0..3).map(|_| UnixStream::connect(&socket).unwrap()).collect();
    idle[2].write_all(b"PI").unwrap();
    let mut ping = UnixStream::connect(&socket).unwrap();
    // Only a guard against a hang: the test asserts the order of events, not a duration.
    ping.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    ping.write_all(b"PING\n").unwrap();
    let mut answer = String::new();
    ping.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with(&format!("OK {} ", std::process::id())), "{answer:?}");
    // The idle peers are still connected, waiting for their answer: none was closed first.
    for (i, peer) in idle.iter_mut().enumerate() {
        peer.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        match peer.read(&mut byte) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => panic!("idle peer {i} was served or closed before the PING behind it: {other:?}"),
        }
    }
    // The half-sent line is completed later and answered.
    idle[2].set_nonblocking(false).unwrap();
    idle[2].set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    idle[2].write_all(b"NG\n").unwrap();
    let mut late = String::new();
    idle[2].read_to_string(&mut late).unwrap();
    assert!(late.starts_with("OK "), "{late:?}");
    drop(idle);
    rec.stop().unwrap();
}

/// A dump replaces its target by a rename: a FIFO, a directory, a symlink (to anything) or a
/// device is refused with an error that names it, and left as it was (`DUMP /dev/full` used to
/// replace the device node with a regular file).
#[test]
fn dump_refuses_targets_that_are_not_regular_files() {
    use std::os::unix::fs::FileTypeExt;
    let _guard = serial();
    std::env::remove_var(control::ENV_DIR);
    let base = tempfile::tempdir().unwrap();
    let rec = Recorder::builder().repository(base.path()).start().unwrap();
    Ctl { seq: 1 }.commit();
    let pid = std::process::id();
    let targets = tempfile::tempdir().unwrap();
    let fifo = targets.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let dir = targets.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    let link = targets.path().join("link");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let regular_link = targets.path().join("regular-link");
    let regular = targets.path().join("regular.jfr");
    std::fs::write(&regular, b"old").unwrap();
    std::os::unix::fs::symlink(&regular, &regular_link).unwrap();
    for (path, what) in
        [(&fifo, "a FIFO"), (&dir, "a directory"), (&link, "a symbolic link"), (&regular_link, "a symbolic link")]
    {
        match control::request_dump(pid, path) {
            Err(ControlError::Remote { message }) => assert!(message.contains(what), "{}: {message}", path.display()),
            other => panic!("{}: expected a refusal, got {other:?}", path.display()),
        }
    }
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced");
    assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the symlink was replaced");
    // A regular file and a new path are written.
    control::request_dump(pid, &regular).unwrap();
    assert_eq!(jfr_summary_count(&regular, "test.Ctl"), 1);
    let new = targets.path().join("new.jfr");
    control::request_dump(pid, &new).unwrap();
    assert_eq!(jfr_summary_count(&new, "test.Ctl"), 1);
    rec.stop().unwrap();
}
