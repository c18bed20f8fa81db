//! The `foliomm` binary end to end: the host backend against the running
//! kernel (skipped, with the reason printed, where it is not permitted: not
//! Linux, not root, no /proc/kpageflags or THP sysfs), and the model-only
//! `prove` and `bench` commands.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::thp_knobs;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Why the host backend cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if std::fs::File::open("/proc/kpageflags").is_err() {
        return Some("cannot read /proc/kpageflags (needs root on Linux)".into());
    }
    let probe = "/sys/kernel/mm/transparent_hugepage/enabled";
    match std::fs::read_to_string(probe) {
        Err(e) => Some(format!("cannot read {probe}: {e}")),
        Ok(v)
            if std::fs::write(
                probe,
                v.split_whitespace().find(|w| w.starts_with('[')).unwrap_or("").trim_matches(['[', ']']),
            )
            .is_err() =>
        {
            Some(format!("cannot write {probe} (needs root)"))
        }
        Ok(_) => None,
    }
}

/// Host tests change system-wide THP settings: one at a time.
static HOST: std::sync::Mutex<()> = std::sync::Mutex::new(());

macro_rules! require_host {
    () => {
        let _serial = HOST.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = unavailable() {
            eprintln!("skipping: the host backend is not permitted here: {why}");
            return;
        }
    };
}

/// Every THP `enabled` value, to check that runs put them back.
fn thp_settings() -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let base = Path::new("/sys/kernel/mm/transparent_hugepage");
    out.push((base.join("enabled"), std::fs::read_to_string(base.join("enabled")).unwrap_or_default()));
    if let Ok(dir) = std::fs::read_dir(base) {
        for e in dir.flatten() {
            let p = e.path().join("enabled");
            if let Ok(v) = std::fs::read_to_string(&p) {
                out.push((p, v));
            }
        }
    }
    out.sort();
    out
}

fn foliomm(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(args).current_dir(root()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

const REUSE: &[&str] =
    &["scenarios/08-reuse-64k.fmm", "scenarios/09-reuse-pte-mapped-thp.fmm", "scenarios/19-pmd-thp-fork-cow.fmm"];

#[test]
fn model_and_kernel_agree_on_reuse_scenarios() {
    require_host!();
    let before = thp_settings();
    let mut args = vec!["compare", "-q"];
    args.extend(REUSE);
    let (code, out) = foliomm(&args);
    assert_eq!(code, 0, "compare found mismatches:\n{out}");
    assert!(out.contains("0 mismatches in all"), "{out}");
    assert_eq!(thp_settings(), before, "a THP sysfs value was left changed");
}

#[test]
fn a_model_that_cannot_reuse_disagrees_with_the_kernel() {
    require_host!();
    let before = thp_settings();
    let mut args = vec!["compare", "-q", "--debug", "no-large-reuse"];
    args.extend(REUSE);
    let (code, out) = foliomm(&args);
    assert_eq!(code, 1, "compare must fail:\n{out}");
    assert!(out.contains("mismatch: frame: model new frame"), "{out}");
    assert_eq!(thp_settings(), before, "a THP sysfs value was left changed");
}

#[test]
fn a_design_before_mm_id_disagrees_with_the_kernel() {
    require_host!();
    let mut args = vec!["compare", "-q", "--mapcount", "nr-mapped"];
    args.extend(REUSE);
    let (code, out) = foliomm(&args);
    assert_eq!(code, 1, "nr-mapped copies where Linux 6.18 reuses:\n{out}");
    assert!(out.contains("mismatch: frame: model new frame"), "{out}");
}

#[test]
fn gup_references_agree_with_the_kernel() {
    require_host!();
    let files = [
        "scenarios/cow/base--vmsplice-in-child-then-unmap.fmm",
        "scenarios/cow/mthp64k--vmsplice-before-fork-unmap-in-parent.fmm",
        "scenarios/cow/mthp64k--longterm-pin-before-fork.fmm",
        "scenarios/cow/thp--longterm-pin-before-fork.fmm",
    ];
    let mut args = vec!["compare", "-q"];
    args.extend(files);
    let (code, out) = foliomm(&args);
    assert_eq!(code, 0, "{out}");
    assert!(!out.contains("skipped on the host:"), "vmsplice and io_uring pins must run on the host:\n{out}");
}

#[test]
fn a_scenario_runs_on_the_host_kernel() {
    require_host!();
    let before = thp_settings();
    let (code, out) =
        foliomm(&["run", "--backend", "host", "-q", "scenarios/02-mthp-64k.fmm", "scenarios/17-zero-page.fmm"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("2 files: 2 passed, 0 failed, 0 skipped, 0 bad"), "{out}");
    assert!(!out.contains("=="), "-q prints nothing of a file that passed:\n{out}");
    assert_eq!(thp_settings(), before);
}

#[test]
fn settings_the_host_cannot_honour_are_skipped_not_failed() {
    require_host!();
    let (code, out) = foliomm(&["compare", "-q", "scenarios/16-enomem.fmm"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("skipped on the host: unsupported: cannot honour"), "{out}");
    // `run` names the refused `set` line, and a skip is not a failure (KSFT_SKIP).
    let (code, out) = foliomm(&["run", "--backend", "host", "-q", "scenarios/16-enomem.fmm"]);
    assert_eq!(code, 0, "{out}");
    let line = std::fs::read_to_string(root().join("scenarios/16-enomem.fmm"))
        .unwrap()
        .lines()
        .position(|l| l.starts_with("set memory"));
    assert!(out.contains(&format!("SKIP at line {}: unsupported: cannot honour", line.unwrap() + 1)), "{out}");
}

#[test]
fn prove_passes_powersum_and_refutes_the_rfcs_digits_and_a_plain_sum() {
    let (code, out) = foliomm(&["prove", "--construction", "powersum", "--trials", "20000"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("no counterexample") && out.contains("none fails"), "{out}");
    // By default every construction a design uses, the RFC's among them:
    // its 8-bit digits wrap from order 6 (seed 000's patch 11).
    let (code, out) = foliomm(&["prove", "--trials", "2000"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("orders 6, 7, 8, 9") && out.ends_with("failing: seed-subids\n"), "{out}");
    let (code, out) = foliomm(&["prove", "--construction", "plain", "--trials", "0"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("COUNTEREXAMPLE"), "{out}");
}

/// `bench mapped-shared` runs its micro benchmarks on the host kernel beside
/// the model (each checks its bytes, the child's among them), two samples
/// each, but remap at 64K (no PMD to split) and the model-only
/// vm-scalability cases; and the THP settings are back afterwards.
#[test]
fn seed_000_runs_its_micro_benchmarks_on_the_host() {
    require_host!();
    let before = thp_settings();
    let args = ["bench", "seed-000", "--size", "8M", "--runs", "2", "--instances", "1", "--json"];
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(thp_settings(), before);
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tables = run["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 2, "a table per folio size");
    for t in tables {
        let rows = t["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 10, "a row per benchmark");
        for r in rows {
            let host = r["series"].as_array().unwrap().iter().find(|s| s["name"] == "host");
            let samples = host.and_then(|h| h["samples"].as_array());
            let samples = samples.map_or(0, |s| s.iter().filter(|v| v.as_f64() > Some(0.0)).count());
            let model_only = r["label"].as_str().unwrap().starts_with("anon-cow");
            let applies = !(model_only || r["label"] == "remap" && t["name"] == "seed 000, 64 KiB mTHP");
            assert_eq!(samples, if applies { 2 } else { 0 }, "{} {r}", t["name"]);
        }
    }
}

/// The seed-000 bench's cost counters are deterministic: a design that can
/// tell the child is gone reuses every page of cow-reuse (no rmap work at
/// all) where nr-mapped copies each one, and every design copies each page
/// of the vm-scalability cases.
#[test]
fn seed_000_bench_costs_follow_each_design() {
    let args = ["bench", "seed-000", "--size", "8M", "--runs", "2", "--instances", "3", "--json", "--no-host"];
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // stdout holds the JSON; progress goes to stderr.
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ops = |folio: &str, design: &str, bench: &str| {
        let table = run["tables"].as_array().unwrap().iter().find(|t| t["name"] == format!("seed 000, {folio}"));
        let row = table.and_then(|t| t["rows"].as_array().unwrap().iter().find(|r| r["label"] == bench));
        let series = row.and_then(|r| r["series"].as_array().unwrap().iter().find(|s| s["name"] == design));
        let series = series.unwrap_or_else(|| panic!("no series {folio} {design} {bench}"));
        let rmap_ops = series["counters"]["rmap_ops"].as_f64().expect("an rmap_ops counter");
        rmap_ops as u64
    };
    let pages = 8 << 20 >> 12;
    for folio in ["2 MiB THP", "64 KiB mTHP"] {
        for design in ["mm-id", "rmap-id", "rmap-id-powersum"] {
            assert_eq!(ops(folio, design, "cow-reuse"), 0, "{folio} {design}");
        }
        for design in ["subpage", "compound-locked", "nr-mapped", "large-mapcount"] {
            assert!(ops(folio, design, "cow-reuse") >= pages, "{folio} {design}");
        }
        for design in foliomm::internals::mapcount::Design::ALL.iter().map(|d| d.name()) {
            // Every one of the 3 children copies every page it writes.
            for bench in ["anon-cow-seq", "anon-cow-rand"] {
                assert!(ops(folio, design, bench) >= 3 * pages, "{folio} {design} {bench}");
            }
        }
    }
}

/// A started host backend with one process, `name`, driven directly (not
/// through a scenario).
fn host_process(name: &str) -> foliomm_host::HostBackend {
    use foliomm_scenario::{Backend, Op, Thread};
    let b = foliomm_host::HostBackend::new(PathBuf::from(env!("CARGO_BIN_EXE_foliomm")));
    b.start(&[]).unwrap();
    b.perform(Thread::main(name), Op::Spawn).unwrap();
    b
}

/// Two threads of one host worker process: thread 1's calls (an observe, a
/// write and its faults) complete while thread 0 is still inside a long
/// faulting write; both threads see each other's bytes (one address space).
#[test]
fn two_threads_of_a_host_process_fault_in_parallel() {
    use foliomm::internals::mm_types::Prot;
    use foliomm_scenario::op::{Access, MmapRequest};
    use foliomm_scenario::{Backend, Op, Reply, Thread};
    require_host!();
    let b = host_process("p");
    let (t0, t1) = (Thread::main("p"), Thread { proc: "p", tid: 1 });
    b.perform(t1, Op::SpawnThread).unwrap();
    const MB: u64 = 1 << 20;
    let mmap = |len| b.perform(t0, Op::Mmap(MmapRequest::anon(len, Prot::RW))).and_then(Reply::value).unwrap();
    let (big, small) = (mmap(512 * MB), mmap(4 * MB));
    let access = |t, addr, len, access| b.perform(t, Op::Access { addr, len, access }).and_then(Reply::bytes);
    let access = &access;
    std::thread::scope(|s| {
        let first = s.spawn(move || access(t0, big, 512 * MB, Access::Write { val: 7, every_byte: true }));
        // Thread 0 writes in address order: once the first 2M are resident, it is inside its write.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let observe = || b.perform(t1, Op::Observe { addr: big, len: 2 * MB }).and_then(Reply::observation);
        while observe().unwrap().range.rss_kb == 0 {
            assert!(std::time::Instant::now() < deadline, "thread 0 never started writing");
        }
        access(t1, small, 4 * MB, Access::Write { val: 9, every_byte: false }).unwrap();
        assert!(!first.is_finished(), "thread 1's calls waited for thread 0's 512M write: calls are serialized");
        first.join().unwrap().unwrap();
    });
    let last = big + 512 * MB - 4096;
    assert_eq!(access(t1, last, 4096, Access::Read { every_byte: false }).unwrap(), vec![7]);
    assert_eq!(access(t0, small, 4 * MB, Access::Read { every_byte: false }).unwrap(), vec![9; 1024]);
    b.perform(t1, Op::ExitThread).unwrap();
    b.perform(t0, Op::Exit).unwrap();
}

/// A worker that dies is a backend failure, never an errno: a step written
/// `fails EINVAL` must not pass because the socket broke.
#[test]
fn a_dead_worker_is_a_backend_failure_not_an_errno() {
    use foliomm_scenario::{Backend, Machinery, Op, StepError, Thread};
    require_host!();
    let b = host_process("p");
    let munmap = || b.perform(Thread::main("p"), Op::Munmap { addr: 0x1001, len: 4096 }).map(|_| ());
    // A real EINVAL first: munmap of an unaligned address.
    assert_eq!(munmap(), Err(StepError::Errno(foliomm::Errno::EINVAL)));
    let pid = b.pid("p").unwrap();
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    std::thread::sleep(std::time::Duration::from_millis(100));
    match munmap() {
        Err(StepError::Machinery(Machinery::Worker { thread, .. })) => assert_eq!(thread, "p/0"),
        other => panic!("a dead worker answered {other:?}"),
    }
}

/// A run interrupted by SIGINT or SIGTERM puts the host settings it changed
/// back itself; one killed by SIGKILL cannot, and `foliomm host restore`
/// puts them back from the state file. Here the setting is the huge page
/// pool's size, which a hugetlb scenario changes.
#[test]
fn interrupted_runs_leave_no_host_setting_changed() {
    require_host!();
    // Both pools, each with a page in use when the signal comes. (Put back
    // while a worker was still copying a 1 GiB page, the pool kept one:
    // the workers now go first. This test does not time its signal that
    // finely.)
    let pools = [
        ("hugepages-2048kB", "set hugetlb pages=2\nP: a = mmap 2M rw hugetlb\n"),
        ("hugepages-1048576kB", "set memory at least 3G\nset hugetlb pages=2 size=1G\nP: a = mmap 1G rw hugetlb=1G\n"),
    ];
    for (dir, setup) in pools {
        let pool = PathBuf::from(format!("/sys/kernel/mm/hugepages/{dir}/nr_hugepages"));
        let Ok(before) = std::fs::read_to_string(&pool) else {
            eprintln!("skipping {dir}: no such huge page pool");
            continue;
        };
        if let Err(why) = foliomm_host::sysfs::pool_accounting_sound(&pool.to_string_lossy()) {
            eprintln!("skipping {dir}: {why}");
            continue;
        }
        // A pool the kernel cannot fill now (1 GiB pages need contiguous
        // free memory, which a long test run may have fragmented) would
        // skip the run, not change the pool: check first, and put it back.
        std::fs::write(&pool, "2").unwrap();
        let got = std::fs::read_to_string(&pool).unwrap();
        std::fs::write(&pool, &before).unwrap();
        if got.trim() != "2" {
            eprintln!("skipping {dir}: the kernel gives {} of 2 huge pages now", got.trim());
            continue;
        }
        let file = std::env::temp_dir().join(format!("foliomm-interrupt-{}.fmm", std::process::id()));
        std::fs::write(&file, format!("{setup}repeat 1000000\nP: write a[0..4K]\nend\n")).unwrap();
        let exe = env!("CARGO_BIN_EXE_foliomm");
        let wait_for = |want_changed: bool| {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_secs(30) {
                if (std::fs::read_to_string(&pool).unwrap() != before) == want_changed {
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            false
        };
        let sleeps = khugepaged_sleeps();
        for sig in ["INT", "TERM", "KILL"] {
            let out = file.with_extension(format!("{sig}.out"));
            let mut child = Command::new(exe)
                .args(["run", "--backend", "host", "-q"])
                .arg(&file)
                .stdout(std::fs::File::create(&out).unwrap())
                .spawn()
                .unwrap();
            // Until the run has touched its page (a pool page in use), or
            // has ended: the pool it checked a moment ago may no longer be
            // fillable, and then the run skips and must leave it as it was.
            let read = |name: &str| std::fs::read_to_string(pool.with_file_name(name)).unwrap();
            let t = std::time::Instant::now();
            while (read("free_hugepages") == read("nr_hugepages") || read("nr_hugepages") == before)
                && t.elapsed() < std::time::Duration::from_secs(30)
            {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            if child.try_wait().unwrap().is_some() {
                let said = std::fs::read_to_string(&out).unwrap();
                let _ = std::fs::remove_file(&out);
                assert!(said.contains("SKIP") && said.contains("huge pages"), "the run ended by itself: {said}");
                assert_eq!(read("nr_hugepages"), before, "a run that skipped changed {}", pool.display());
                eprintln!("skipping {dir} after SIG{sig}: the kernel could no longer fill the pool");
                continue;
            }
            assert!(wait_for(true), "the run never changed {}", pool.display());
            interrupt(exe, &mut child, sig);
            let _ = std::fs::remove_file(&out);
            // In-use huge pages count in the pool until the workers are gone.
            assert!(
                wait_for(false),
                "{dir}, after SIG{sig}: {} is {}, was {before}",
                pool.display(),
                std::fs::read_to_string(&pool).unwrap()
            );
            // Every run quiets khugepaged (a day's sleep) from its start.
            assert_eq!(khugepaged_sleeps(), sleeps, "{dir}, after SIG{sig}: khugepaged's sleeps");
        }
        let _ = std::fs::remove_file(file);
    }
}

/// khugepaged's scan and allocation sleeps (empty without THP).
fn khugepaged_sleeps() -> Vec<String> {
    let dir = Path::new("/sys/kernel/mm/transparent_hugepage/khugepaged");
    ["scan_sleep_millisecs", "alloc_sleep_millisecs"]
        .iter()
        .filter_map(|k| std::fs::read_to_string(dir.join(k)).ok())
        .collect()
}

/// Sends SIG`sig` (`INT`, `TERM`, `KILL`) to `child` and waits for it; after
/// SIGKILL, runs `foliomm host restore`, which must put settings back and
/// remove the killed run's directory.
fn interrupt(exe: &str, child: &mut std::process::Child, sig: &str) {
    let sent = Command::new("kill").args(["-s", sig, &child.id().to_string()]).status().unwrap();
    assert!(sent.success(), "kill -s {sig} failed");
    child.wait().unwrap();
    if sig == "KILL" {
        let out = Command::new(exe).args(["host", "restore"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("put back"), "host restore after SIGKILL said: {text}");
        let prefix = format!("foliomm-host-{}-", child.id());
        let left = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with(&prefix))
            .collect::<Vec<_>>();
        assert!(left.is_empty(), "host restore left the killed run's directories {left:?}");
    }
}

/// A benchmark interrupted by SIGINT, SIGTERM or SIGKILL (then `foliomm host
/// restore`) leaves every THP, shmem and hugetlb knob as it found it.
/// `bench zap-batching` sets the per-size THP knobs for its host rows.
#[test]
fn an_interrupted_benchmark_leaves_every_knob_as_it_was() {
    require_host!();
    let exe = env!("CARGO_BIN_EXE_foliomm");
    let before = thp_knobs();
    let changed = || thp_knobs() != before;
    for sig in ["INT", "TERM", "KILL"] {
        let mut child = Command::new(exe)
            .args(["bench", "seed-001", "--size", "64M", "--runs", "1000"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = std::time::Instant::now();
        while !changed() && t.elapsed() < std::time::Duration::from_secs(60) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(changed(), "bench zap-batching never changed a THP knob");
        interrupt(exe, &mut child, sig);
        let after = thp_knobs();
        let moved: Vec<String> = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| b != a)
            .map(|((p, b), (_, a))| format!("{}: {} -> {}", p.display(), b.trim(), a.trim()))
            .collect();
        assert!(moved.is_empty(), "after SIG{sig}:\n{}", moved.join("\n"));
    }
}
