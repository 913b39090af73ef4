//! The README never surprises: its Embedding example is `examples/embedding.rs` word for word, and
//! it records what the README says when run as written. (Every Rust block of the README is also
//! compiled as a doc test: `ReadmeDoctests` in src/lib.rs.)

mod embedding {
    include!("../examples/embedding.rs");
    pub fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

use recorder::consumer::EventStream;
use std::path::Path;
use std::process::Command;

const CHILD_ENV: &str = "RECORDER_README_CHILD";

/// The text of the first ```rust block after `heading` in the README.
fn readme_block(heading: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = &readme[readme.find(heading).unwrap_or_else(|| panic!("no {heading:?} in the README"))..];
    let start = section.find("\n```rust").expect("a rust block") + 1;
    let body = &section[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("\n```\n").expect("the block's end") + 1].to_owned()
}

#[test]
fn the_embedding_example_is_the_readme_s() {
    let file = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/embedding.rs")).unwrap();
    assert_eq!(
        readme_block("\n## Embedding"),
        file,
        "README.md's Embedding block and examples/embedding.rs must be the same program"
    );
}

#[test]
fn the_embedding_example_records_what_the_readme_says() {
    // Run as a user would: in a fresh working directory, with the default repository (under
    // $TMPDIR), in its own process.
    let dir = tempfile::tempdir().unwrap();
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child_runs_the_embedding_example", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("TMPDIR", &tmp)
        .env("RECORDER_CONTROL", "off")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("1 passed"), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("snapshot in now.jfr"), "{stdout}");

    let snapshot = dir.path().join("now.jfr");
    let base = std::fs::read_dir(&tmp).unwrap().next().expect("the default repository").unwrap().path();
    assert!(base.file_name().unwrap().to_str().unwrap().starts_with("recorder-"), "{}", base.display());
    for source in [snapshot.as_path(), base.as_path()] {
        let mut stream = EventStream::open(source).unwrap();
        stream.follow(false);
        let (mut requests, mut queries) = (Vec::new(), Vec::new());
        for e in stream.iter() {
            let e = e.unwrap();
            match e.type_name() {
                "app.Request" => requests.push((e.field_str("path").unwrap().to_owned(), e.field_i64("status"))),
                "app.Query" => {
                    queries.push((e.field_str("sql").unwrap().to_owned(), e.field_i64("rows"), e.duration_nanos()))
                }
                _ => {}
            }
        }
        assert_eq!(requests, [("/".to_owned(), Some(200))], "{}", source.display());
        // The slow query is there with its duration; the threshold keeps out whatever took less
        // than 1 ms (the fast query, unless the machine stalled it that long).
        assert!(queries
            .iter()
            .any(|(sql, rows, d)| sql == "SELECT * FROM orders" && *rows == Some(42) && *d >= 5_000_000));
        assert!(queries.iter().all(|q| q.2 >= 1_000_000), "{queries:?}");
    }
}

/// Runs only in the child of `the_embedding_example_records_what_the_readme_says`.
#[test]
fn child_runs_the_embedding_example() {
    if std::env::var_os(CHILD_ENV).is_some() {
        embedding::run().unwrap();
    }
}

/// CI runs the README's test command, exactly: the second line of "The two commands" (its
/// comment aside) is a line of `.ci/run`.
#[test]
fn ci_runs_the_readme_s_test_command() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = &readme[readme.find("\n## The two commands").expect("the two commands")..];
    let block = &section[section.find("\n```sh\n").expect("an sh block") + 7..];
    let test_line = block.lines().nth(1).expect("two commands");
    let command = test_line.split('#').next().unwrap().trim();
    assert_eq!(command, "bash scripts/test.sh");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(ci.lines().any(|l| l.trim() == command), ".ci/run does not run `{command}`:\n{ci}");
}
