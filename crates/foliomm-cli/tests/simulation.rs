//! `bench vma-lock-scaling --sim-cpus`: simulated CPUs give the same tables on
//! every run for one seed, and the designs' runs differ where their locks
//! do.

use std::process::Command;

/// `foliomm ARGS`'s standard output; its standard error if it fails.
fn foliomm(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn simulated(seed: &str) -> String {
    let args = [
        "bench",
        "seed-004",
        "--sim-cpus",
        "1,3",
        "--sim-seed",
        seed,
        "--layout",
        "shared",
        "--tests",
        "page_fault1",
        "--size",
        "2M",
        "--loops",
        "1",
        "--runs",
        "2",
    ];
    foliomm(&args)
}

#[test]
fn a_simulated_table_is_the_same_on_every_run() {
    let (a, b) = (simulated("5"), simulated("5"));
    assert_eq!(a, b, "two runs with seed 5");
    assert!(a.contains("Hmean faults/cpu-3"), "{a}");
    // The contended VMA's lock moves between CPUs under the per-VMA
    // designs; the mmap_lock under the mmap-lock design.
    let row = |design: &str| a.lines().find(|l| l.starts_with("| 3") && l.contains(design)).unwrap().to_string();
    let cells = |l: String| l.split('|').map(|c| c.trim().to_string()).collect::<Vec<_>>();
    let (rwsem, mmap) = (cells(row("vma-rwsem")), cells(row("mmap-lock")));
    assert!(rwsem[5].parse::<f64>().unwrap() > 0.5, "vma_lock transfers per fault: {rwsem:?}");
    assert!(mmap[3].parse::<f64>().unwrap() > 0.5, "mmap_lock transfers per fault: {mmap:?}");
}

/// The base design's (vma-rwsem's) Hmean faults/sec at 1 and 16 simulated CPUs of page_fault1
/// on separate VMAs, under the built-in profile or one whose LRU list
/// moves cost `lru_folio` picoseconds, on a machine of `nodes` nodes.
fn fault_rates(lru_folio: Option<u64>, nodes: u32) -> (f64, f64) {
    let file = std::env::temp_dir().join(format!("foliomm-lru-profile-{}.json", std::process::id()));
    let mut args = ["bench", "seed-004", "--sim-cpus", "1,16", "--layout", "separate", "--tests", "page_fault1"]
        .map(String::from)
        .to_vec();
    args.extend(["--size", "2M", "--loops", "1", "--runs", "2"].map(String::from));
    args.extend(["--sim-nodes".to_string(), nodes.to_string()]);
    if let Some(ps) = lru_folio {
        let p = foliomm::internals::sync::sim::Profile {
            lru_folio: ps,
            ..foliomm::internals::sync::sim::Profile::two_socket_server()
        };
        std::fs::write(&file, serde_json::to_string(&p).unwrap()).unwrap();
        args.extend(["--sim-profile".to_string(), file.display().to_string()]);
    }
    let text = foliomm(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let _ = std::fs::remove_file(&file);
    let rate = |cpus: &str| -> f64 {
        let row = text.lines().find(|l| l.starts_with(&format!("Hmean faults/sec-{cpus} "))).expect(&text);
        row.split('|').nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap()
    };
    (rate("1"), rate("16"))
}

#[test]
fn page_fault1_meets_the_lru_lock_from_a_dozen_cpus() {
    // Every fault adds a folio to the one node's LRU and every unmap takes
    // it off, each under `lru_lock` for the profile's 120 ns: 16 CPUs
    // fault no faster than that lock lets 240 ns a fault through.
    let (one, sixteen) = fault_rates(None, 1);
    assert!(sixteen < 1e12 / 240_000.0, "faults/sec at 16 CPUs: {sixteen}");
    assert!(sixteen < 8.0 * one, "1 CPU {one}, 16 CPUs {sixteen}");
    // Without that hold, the separate VMAs share nothing that limits them.
    let (one, sixteen) = fault_rates(Some(0), 1);
    assert!(sixteen > 12.0 * one, "1 CPU {one}, 16 CPUs {sixteen}");
    // Two nodes: each CPU's folios on its own node's LRU, under that
    // node's lock; the two locks let twice as many through.
    let (_, two_nodes) = fault_rates(None, 2);
    assert!(two_nodes > 1e12 / 240_000.0, "faults/sec at 16 CPUs on two nodes: {two_nodes}");
}

/// The threaded scenarios' contention reports on 8 simulated CPUs (every
/// file passing, the checker on).
fn threaded_reports() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/threads");
    let mut files: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let out =
        Command::new(env!("CARGO_BIN_EXE_foliomm")).args(["run", "--check", "--sim-cpus", "8"]).args(&files).output();
    let out = out.unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    text.lines().filter_map(|l| l.split_once("on simulated CPUs: ").map(|(_, r)| r.to_string())).collect()
}

#[test]
fn threaded_scenarios_pass_on_simulated_cpus_with_the_same_report_every_run() {
    let a = threaded_reports();
    assert!(a.len() > 10 && a.iter().all(|r| r.contains("transfers [")), "{a:?}");
    assert_eq!(a, threaded_reports(), "two runs");
}

/// The simulated lock wait of a contention report.
fn waited(report: &str) -> f64 {
    let (_, rest) = report.split_once("waited for locks ").unwrap();
    rest.split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_measure_block_sums_its_parallel_blocks_contention() {
    let file = std::env::temp_dir().join(format!("foliomm-measure-{}.fmm", std::process::id()));
    // Two threads mapping and unmapping in one MM: munmap's mmap_lock
    // writers make the other's mmap and munmap wait.
    let body = "P.t1: a = mmap 1M rw\nP.t1: write a = 0x11\nP.t1: munmap a\n\
                P.t2: b = mmap 1M rw\nP.t2: write b = 0x22\nP.t2: munmap b\n";
    let text = format!("set sim_cpus 2\nmeasure churn\nrepeat 3\nparallel\n{body}end\nend\nend\n");
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(["run", "--check"]).arg(&file).output().unwrap();
    std::fs::remove_file(&file).unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{text}");
    let reports: Vec<&str> = text.lines().filter(|l| l.contains("on simulated CPUs: ")).collect();
    let (blocks, measure) = reports.split_at(reports.len() - 1);
    assert_eq!(blocks.len(), 3, "{text}");
    let sum: f64 = blocks.iter().map(|b| waited(b)).sum();
    assert!((waited(measure[0]) - sum).abs() < 1.0, "the measure's wait is its blocks': {text}");
    assert!(measure[0].contains("[mmap_lock"), "the waits are the mmap_lock's: {text}");
}

/// `bench rmap-scaling` of the `map` workload at 1 and 8 simulated CPUs.
fn rmap_scaling() -> String {
    foliomm(&["bench", "rmap-scaling", "--sim-cpus", "1,8", "--runs", "2", "--loops", "5", "--workloads", "map"])
}

#[test]
fn the_compound_lock_collapses_where_the_atomics_do_not() {
    let a = rmap_scaling();
    assert_eq!(a, rmap_scaling(), "two runs with one seed");
    // The rows of 8 CPUs of the tables (pairs as % change against
    // nr-mapped, folio transfers per pair, folio lock wait per pair), read
    // by the heading above them.
    let split = |l: &str| l.split('|').map(|c| c.trim().to_string()).collect::<Vec<_>>();
    let heading = split(a.lines().find(|l| l.starts_with("| CPUs ")).unwrap());
    let rows: Vec<Vec<String>> = a.lines().filter(|l| l.starts_with("| 8 ")).map(split).collect();
    let cell = |table: usize, name: &str| {
        let i = heading.iter().position(|h| h == name).unwrap();
        rows[table][i].trim_end_matches('%').parse::<f64>().unwrap()
    };
    let change = |name: &str| cell(0, name);
    let row = rows[0].join(" | ");
    assert!(change("compound-locked") < -10.0, "compound-locked falls behind the atomics at 8 CPUs: {row}");
    // The sleeping lock (seed 003's PREEMPT_RT alternative) serialises as
    // much, and each hand-over waits for a wake-up; but its waiters do not
    // read the folio's second line while they wait, as spinners do.
    let sleeping = "compound-locked/sleeping";
    assert!(change(sleeping) < -10.0, "{row}");
    assert!(cell(1, sleeping) < cell(1, "compound-locked"), "fewer folio line transfers: {:?}", rows[1]);
    assert!(cell(2, sleeping) > cell(2, "compound-locked"), "longer lock waits: {:?}", rows[2]);
    // large-mapcount's atomic shares nr-mapped's line: as many folio
    // transfers, and a rate within the base's spread over the seeds.
    let (large, base) = (cell(1, "large-mapcount"), cell(1, "nr-mapped"));
    assert!((large - base).abs() < 0.05 * base, "folio transfers per pair: {:?}", rows[1]);
    let spread = rows[0][heading.iter().position(|h| h == "nr-mapped").unwrap()]
        .split("(±")
        .nth(1)
        .unwrap()
        .trim_end_matches("%)")
        .parse::<f64>()
        .unwrap();
    assert!(change("large-mapcount").abs() < spread, "{row}");
}

/// `bench hugetlb-pmd-share` (seed 002) at 8 simulated CPUs over 1 GiB.
fn seed_002() -> String {
    let args = ["bench", "seed-002", "--sim-cpus", "8", "--no-host", "--runs", "2", "--loops", "1", "--size", "1G"];
    foliomm(&[&args[..], &["--frames", "sparse", "--apart"]].concat())
}

#[test]
fn seed_002s_faulters_wait_for_i_mmap_rwsem_where_it_guards_faults() {
    let a = seed_002();
    assert_eq!(a, seed_002(), "two runs with one seed");
    // The combined row: i-mmap-rwsem, no-lock, vma-lock, host ("-").
    let combined = a.lines().find(|l| l.starts_with("faults  |")).unwrap();
    let cells: Vec<f64> =
        combined.split('|').nth(1).unwrap().split_whitespace().filter_map(|c| c.parse().ok()).collect();
    // Every fault takes and lets go of the file's i_mmap_rwsem under
    // i-mmap-rwsem: its line moves between the faulters, and the forkers'
    // writers make them wait.
    assert!(cells[0] < 0.9 * cells[1] && cells[0] < 0.9 * cells[2], "{combined}");
    let transfers = a.lines().find(|l| l.trim_start().starts_with("model, i-mmap-rwsem") && l.contains("i_mmap_rwsem"));
    let moved = transfers.unwrap().split("i_mmap_rwsem ").nth(1).unwrap().split(',').next().unwrap();
    assert!(moved.parse::<f64>().unwrap() > 1.0, "take and release each move the line: {moved}");
}
