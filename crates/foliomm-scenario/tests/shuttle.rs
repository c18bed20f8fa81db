//! Every threaded scenario file (scenarios/threads/) on the model under
//! randomized schedules ([shuttle](https://docs.rs/shuttle)): the
//! interpreter's `parallel` blocks, the model backend's locks and the whole
//! library then run on shuttle's threads, which switch at every lock and
//! atomic. Each file must pass with the checker after every step under
//! every schedule; a failing one is printed by shuttle with the schedule to
//! replay (`shuttle::replay`). And a broken design is caught: with
//! `set debug free-before-flush`, some schedule of the read-vs-zap race
//! reads a freed page.
//!
//! Needs `--cfg shuttle`:
//! `RUSTFLAGS="--cfg shuttle" CARGO_TARGET_DIR=target/shuttle cargo test --release -p foliomm-scenario --test shuttle`.
//! `FOLIOMM_SHUTTLE_SCHEDULES` sets the schedules per file and scheduler (default 20: about 90 s in all).
#![cfg(shuttle)]

use std::path::PathBuf;

use foliomm_scenario::{parse, run, ModelBackend, RunOptions};
use shuttle::scheduler::{PctScheduler, RandomScheduler, Scheduler};
use shuttle::{Config, MaxSteps, Runner};

fn schedules() -> usize {
    std::env::var("FOLIOMM_SHUTTLE_SCHEDULES").ok().and_then(|s| s.parse().ok()).unwrap_or(20)
}

fn threaded_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/threads");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    // The files with a `parallel` block: the others run their threads one
    // after another, which leaves shuttle nothing to schedule.
    files.retain(|p| p.extension().is_some_and(|e| e == "fmm"));
    files.retain(|p| std::fs::read_to_string(p).unwrap().lines().any(|l| l.trim() == "parallel"));
    files.sort();
    assert!(files.len() >= 8, "expected the threaded scenarios, found {}", files.len());
    files
}

/// Runs `f` under `scheduler`. A scenario takes millions of steps (every
/// atomic and lock of every fault is one): no step bound.
fn check(scheduler: impl Scheduler + 'static, f: impl Fn() + Send + Sync + 'static) {
    let mut config = Config::default();
    config.max_steps = MaxSteps::None;
    config.silence_warnings = true;
    Runner::new(scheduler, config).run(f);
}

/// Runs scenario text `src` with the checker; panics with the failure.
fn passes(src: &str) {
    let steps = parse(src).expect("the scenario parses");
    let out = run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
    if let Some(f) = out.failure {
        panic!("line {}: {}", f.line, f.message);
    }
}

/// A small machine keeps each schedule short; a file's own `set memory`
/// (a later line) still wins.
fn small(f: &PathBuf) -> String {
    format!("set memory 64M\n{}", std::fs::read_to_string(f).unwrap())
}

#[test]
fn shuttle_every_threaded_scenario_passes_under_random_schedules() {
    for f in threaded_files() {
        let (src, t) = (small(&f), std::time::Instant::now());
        check(RandomScheduler::new(schedules()), move || passes(&src));
        eprintln!("{}: {} schedules in {:.1?}", f.display(), schedules(), t.elapsed());
    }
}

#[test]
fn shuttle_every_threaded_scenario_passes_under_pct_schedules() {
    for f in threaded_files() {
        let src = small(&f);
        check(PctScheduler::new(3, schedules()), move || passes(&src));
    }
}

#[test]
#[should_panic(expected = "line")]
fn shuttle_freeing_before_the_flush_is_found() {
    let f = threaded_files().into_iter().find(|f| f.ends_with("11-read-races-dontneed.fmm")).unwrap();
    let src = format!("set debug free-before-flush\n{}", small(&f));
    check(RandomScheduler::new(schedules()), move || passes(&src));
}
