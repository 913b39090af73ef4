//! `recorder record --wall`: a C program that mostly sleeps, recorded with
//! wall-clock sampling through the preloaded library: its sleeps are never broken (the program
//! checks every nanosleep), and its wall samples stand for the time it slept, in state sleeping,
//! on the stack it slept in.

mod common;

use common::*;
use std::process::Command;

#[test]
fn record_wall_samples_a_sleeping_c_program_without_breaking_its_sleeps() {
    preload_library();
    let dir = scratch_dir().join("tests").join("record_wall");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prog = build_program("sleeper.c", "gcc", &["-O2", "-g"]);
    let out = Command::new(env!("CARGO_BIN_EXE_recorder"))
        .current_dir(&dir)
        .args(["record", "--wall", "10ms", "--repository", "repo", "-o", "wall.jfr", "--"])
        .arg(&prog)
        .env_remove("LD_PRELOAD")
        .output()
        .expect("running recorder record");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "every nanosleep slept its whole time:\n{text}");
    let jfr = dir.join("wall.jfr");
    jdk_accepts(std::slice::from_ref(&jfr));
    let jfr = jfr.to_str().unwrap();
    let settings = recorder_ok(&["print", "--events", "jdk.ActiveSetting", jfr]);
    assert!(settings.contains("10 ms"), "the wall period is in jdk.ActiveSetting:\n{settings}");
    // The main thread slept 30 x 50 ms: about 150 periods of 10 ms stand on stacks in nap (under
    // load, sleeps overrun and a late sampler loses periods of the thread when it ran: 107-195
    // seen with two busy loops beside). A CPU profile would show next to nothing there.
    let collapsed = recorder_ok(&["dump", jfr, "--format", "collapsed", "--type", "wall"]);
    let asleep: u64 = collapsed
        .lines()
        .filter(|l| l.contains("nap") || l.contains("nanosleep"))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<u64>().ok())
        .sum();
    assert!((75..=400).contains(&asleep), "{asleep} periods in nap/nanosleep, ~150 expected:\n{collapsed}");
    // The periods it slept (state sleeping) stand on the stack where it waits, walked through nap
    // to main (before, they were the last stack sampled while it ran, in spin, or the system
    // call's address alone). Periods where it ran (woken, or preempted right after its sleep on
    // a loaded machine: the sampler's signal then finds it in nap itself) are runnable and
    // stand where it ran.
    let json = recorder_ok(&["dump", jfr, "--format", "json"]);
    let (mut sleeping, mut whole) = (0u64, 0u64);
    let mut seen = Vec::new();
    for line in json.lines().filter(|l| l.contains("\"profiler.WallClockSample\"")) {
        let event: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if event["fields"]["state"] != "STATE_SLEEPING" {
            continue;
        }
        let periods = event["fields"]["samples"].as_u64().unwrap();
        let methods: Vec<&str> =
            event["stack"]["frames"].as_array().into_iter().flatten().filter_map(|f| f["method"].as_str()).collect();
        let stack = methods.join(";");
        sleeping += periods;
        if stack.contains("nanosleep;nap;main") {
            whole += periods;
        }
        seen.push(format!("{periods} {stack}"));
    }
    // 30 x 50 ms asleep: about 150 periods, fewer where a late sampler lost some under load.
    assert!(sleeping >= 60, "{sleeping} of {asleep} periods in nap are sleeping:\n{}", seen.join("\n"));
    assert!(
        whole * 10 >= sleeping * 9,
        "{whole} of {sleeping} sleeping periods through main;nap;nanosleep:\n{}",
        seen.join("\n")
    );
    // The recorder's own threads (here its control listener, waiting in poll) are not sampled.
    assert!(!collapsed.contains("recorder::control"), "the control thread was sampled:\n{collapsed}");
}
