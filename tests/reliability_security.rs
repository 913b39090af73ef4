//! Files in shared places: a dump never writes through a planted symlink, a repository directory
//! of another user is refused (root included), and the repair of dead recordings never touches
//! another user's directory or follows a symlink.

mod common;

use common::*;
use recorder::Recorder;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const NOBODY: u32 = 65534;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn chown(path: &Path, uid: u32) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string; lchown does not follow symlinks.
    assert_eq!(unsafe { libc::lchown(c.as_ptr(), uid, uid) }, 0, "chown {}", path.display());
}

#[test]
fn dump_never_writes_through_a_planted_symlink() {
    let _guard = serial();
    let dir = tempfile::tempdir().unwrap();
    let shared = tempfile::tempdir().unwrap();
    let victim = shared.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let rec = Recorder::builder().repository(dir.path()).no_sampling().start().unwrap();

    // The output path itself is a symlink: the dump replaces the link, never writes the target.
    let out = shared.path().join("out.jfr");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    let result = rec.dump(&out);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "the symlink's target was written");
    if result.is_ok() {
        let meta = std::fs::symlink_metadata(&out).unwrap();
        assert!(meta.file_type().is_file(), "the dump is a regular file in place of the link");
        jfr_ok(&["summary", out.to_str().unwrap()]);
    }

    // The temporary name the dump writes first is planted as a symlink: the dump fails.
    let out2 = shared.path().join("out2.jfr");
    let temp = shared.path().join(format!(".out2.jfr.{}.tmp", std::process::id()));
    std::os::unix::fs::symlink(&victim, &temp).unwrap();
    assert!(rec.dump(&out2).is_err(), "a planted temporary file must make the dump fail");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "the planted link's target was written");
    assert!(!out2.exists());
    rec.stop().unwrap();
}

#[test]
fn repository_of_another_user_is_refused() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    // As root: a directory chowned to nobody. Otherwise: a directory root owns.
    let foreign = if is_root() {
        let d = base.path().join("foreign");
        std::fs::create_dir(&d).unwrap();
        chown(&d, NOBODY);
        d
    } else {
        std::path::PathBuf::from("/")
    };
    let err = Recorder::builder().repository(&foreign).no_sampling().start().expect_err("another user's directory");
    let text = format!("{err}");
    assert!(text.contains(foreign.to_str().unwrap()), "the error names the directory: {text}");
    assert!(text.contains("another user"), "the error says why: {text}");
    // Nothing was created in it.
    if is_root() {
        assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 0);
    }
}

#[test]
fn repair_at_start_skips_other_users_and_symlinks() {
    let _guard = serial();
    let base = tempfile::tempdir().unwrap();
    // A pid that is no longer running.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let unfinished = {
        let mut h = jfr_format::ChunkHeader::new(1_700_000_000_000_000_000, 0);
        h.chunk_size = 68;
        h.metadata_offset = 0;
        h.encode().to_vec()
    };
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("2026_01_01_00_00_00.jfr"), &unfinished).unwrap();
    std::fs::write(elsewhere.path().join(".2026_01_01_00_00_01.jfr.part"), b"x").unwrap();
    // A symlink named like a dead recording, pointing elsewhere.
    std::os::unix::fs::symlink(elsewhere.path(), base.path().join(format!("2026_01_01_00_00_00_{dead}"))).unwrap();
    // Another user's dead recording (root only can make one).
    let foreign = base.path().join(format!("2026_01_01_00_00_01_{dead}"));
    if is_root() {
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join(".2026_01_01_00_00_01.jfr.part"), b"x").unwrap();
        chown(&foreign, NOBODY);
    }
    let rec = Recorder::builder().repository(base.path()).no_sampling().start().unwrap();
    rec.stop().unwrap();
    assert!(elsewhere.path().join(".2026_01_01_00_00_01.jfr.part").exists(), "a symlinked directory was repaired");
    assert_eq!(std::fs::read(elsewhere.path().join("2026_01_01_00_00_00.jfr")).unwrap(), unfinished);
    if is_root() {
        assert!(foreign.join(".2026_01_01_00_00_01.jfr.part").exists(), "another user's directory was repaired");
        assert_eq!(std::fs::symlink_metadata(&foreign).unwrap().uid(), NOBODY);
    }
}
