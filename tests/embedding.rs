//! Embedding the library compiles none of the CLI's dependencies (a library user once
//! compiled clap, inferno, indicatif, zstd-sys, serde_json... for 13 minutes). The CLI is its own
//! workspace crate (`cli/`), and zstd is behind the library's `zstd` feature, off by default.

use std::process::Command;

#[test]
fn the_library_alone_depends_on_none_of_the_cli_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["tree", "--locked", "-p", "recorder", "-e", "normal", "--prefix", "none"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "cargo tree failed: {}", String::from_utf8_lossy(&out.stderr));
    let crates: Vec<&str> = text.lines().filter_map(|l| l.split_whitespace().next()).collect();
    assert!(crates.contains(&"recorder") && crates.contains(&"jfr-format"), "{text}");
    for cli_only in ["clap", "inferno", "indicatif", "serde_json", "anyhow", "zstd", "zstd-sys", "recorder-cli"] {
        assert!(!crates.contains(&cli_only), "embedding recorder builds {cli_only}:\n{text}");
    }
}
