//! Saved benchmark runs end to end: two small `bench zap-batching --save` runs
//! on the model, `compare-runs` of them, and `report` of them checked in
//! headless Chromium where it is installed (Debian's `chromium` package):
//! no console error, every plot drew. The same for a scenario's trace
//! (`run --trace`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn foliomm(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(args).output().unwrap();
    assert!(out.status.success(), "foliomm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Two saved seed-001 runs (16 MiB, model only) in a fresh directory.
fn two_runs(dir: &Path) -> [PathBuf; 2] {
    std::fs::create_dir_all(dir).unwrap();
    ["a", "b"].map(|n| {
        let path = dir.join(n);
        foliomm(&["bench", "seed-001", "--size", "16M", "--runs", "2", "--no-host", "--save", path.to_str().unwrap()]);
        path.with_extension("json")
    })
}

#[test]
fn saved_runs_compare_and_report() {
    let dir = std::env::temp_dir().join(format!("foliomm-report-test-{}", std::process::id()));
    let [a, b] = two_runs(&dir);
    let run: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    assert_eq!(run["schema"], 1);
    assert_eq!(run["tables"][0]["rows"].as_array().unwrap().len(), 9, "a row per folio size");
    assert_eq!(run["tables"][0]["rows"][0]["series"][0]["samples"].as_array().unwrap().len(), 2);
    // Runs named as --save named them, without .json.
    let cmp = foliomm(&["compare-runs", a.with_extension("").to_str().unwrap(), b.to_str().unwrap()]);
    let text = String::from_utf8(cmp.stdout).unwrap();
    // 9 folio sizes and the swap row, 2 strategies each.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("Amean")).collect();
    assert_eq!(rows.len(), 20, "{text}");
    // An A/A comparison of 2 rounds each: columns named for the runs, no
    // change called significant, a warning that 2 rounds cannot tell, and
    // the deterministic counters the same.
    assert!(text.lines().any(|l| l.split_whitespace().eq(["a", "b"])), "{text}");
    assert!(rows.iter().all(|l| !l.contains("%)*") && l.contains("%)?")), "{text}");
    assert!(text.contains("warning: a run has fewer than 5 rounds"), "{text}");
    assert!(text.contains("deterministic counters: the same in every run"), "{text}");
    let html = dir.join("r.html");
    foliomm(&["report", a.to_str().unwrap(), b.to_str().unwrap(), "-o", html.to_str().unwrap()]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert_self_contained(&page);
    assert_eq!(page.matches("<svg").count(), 2, "one plot per table (folio sizes, swap entries)");
    check_in_browser(&html, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench mapped-shared --stages --save`: a table per folio size, a row per
/// benchmark, a series per stage named with its design, a sample per round.
#[test]
fn seed_000_stages_save_a_series_per_stage() {
    let dir = std::env::temp_dir().join(format!("foliomm-seed-000-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("s");
    let args = ["bench", "seed-000", "--size", "4M", "--runs", "2", "--instances", "1", "--stages", "--save"];
    foliomm(&[&args[..], &[path.to_str().unwrap()]].concat());
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path.with_extension("json")).unwrap()).unwrap();
    // Run by its alias, saved by its name, with the command that
    // reproduces it under that name.
    assert_eq!(run["bench"], "mapped-shared");
    assert!(
        run["command"].as_str().unwrap().starts_with("foliomm bench mapped-shared --size 4M"),
        "{}",
        run["command"]
    );
    let tables = run["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 2, "2 MiB THP and 64 KiB mTHP");
    let munmap = &tables[0]["rows"][1];
    assert_eq!(munmap["label"], "munmap");
    let names: Vec<&str> = munmap["series"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "nr-mapped",
            "rmap-id mapcount",
            "rmap-id rmap-id",
            "rmap-id 123",
            "rmap-id batch",
            "rmap-id exclusive",
            "rmap-id nocmpxchg",
            "rmap-id all",
            "rmap-id all-shared",
            "rmap-id all-32bit",
            "rmap-id all-locked",
            "rmap-id all-skip-zero",
            "rmap-id all-give-up",
            "rmap-id all-anon",
            "rmap-id all-skip-entire",
            "rmap-id all-pmd",
            "rmap-id all-packed",
            "rmap-id all-merged",
            "rmap-id all-wide",
            "rmap-id all-percpu"
        ]
    );
    assert!(munmap["series"].as_array().unwrap().iter().all(|s| s["samples"].as_array().unwrap().len() == 2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `bench fault` and `bench tlb` save too: fault a table each for the
/// faults and the munmaps (a row per folio size), tlb a table per action
/// with the TLB on and off as series.
#[test]
fn fault_and_tlb_save_their_samples() {
    let dir = std::env::temp_dir().join(format!("foliomm-fault-tlb-save-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let load = |bench: &str, extra: &[&str]| -> serde_json::Value {
        let path = dir.join(bench);
        let args = [&["bench", bench, "--size", "4M", "--runs", "2", "--save", path.to_str().unwrap()], extra].concat();
        foliomm(&args);
        serde_json::from_str(&std::fs::read_to_string(path.with_extension("json")).unwrap()).unwrap()
    };
    let fault = load("fault", &["--no-host"]);
    let tables = fault["tables"].as_array().unwrap();
    assert_eq!(tables.len(), 3, "faults, munmaps, memset");
    assert_eq!(tables[1]["rows"].as_array().unwrap().len(), 3, "4K, 64K, 2M");
    assert_eq!(tables[1]["rows"][2]["series"][0]["samples"].as_array().unwrap().len(), 2);
    let tlb = load("tlb", &[]);
    assert_eq!(tlb["tables"].as_array().unwrap().len(), 2, "fault, write");
    let rows = tlb["tables"][1]["rows"].as_array().unwrap();
    assert_eq!((rows.len(), rows[0]["series"].as_array().unwrap().len()), (1, 2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every benchmark takes the common flags and prints one schema with
/// `--json` (the saved run's, samples and deterministic counters) and the
/// same values with `--csv`, a line each.
#[test]
fn every_bench_takes_the_common_flags_and_writes_one_schema() {
    let common = ["--no-host", "--json", "--kernel", "6.13"];
    let benches: [(&str, &[&str], bool); 9] = [
        ("fault", &["--size", "4M", "--runs", "2"], false),
        ("tlb", &["--size", "4M", "--runs", "2"], false),
        ("zap-batching", &["--size", "4M", "--runs", "2", "--mapcount", "mm-id"], true),
        ("mapped-shared", &["--size", "4M", "--runs", "2", "--instances", "1"], true),
        ("shmem-rmap", &["--size", "4M", "--runs", "2", "--iterations", "1"], true),
        (
            "vma-lock-scaling",
            &[
                "--size",
                "4M",
                "--runs",
                "2",
                "--threads",
                "1",
                "--loops",
                "1",
                "--tests",
                "page_fault1",
                "--layout",
                "separate",
            ],
            true,
        ),
        (
            "hugetlb-pmd-share",
            &["--size", "1G", "--runs", "2", "--instances", "1", "--loops", "1", "--touched", "1"],
            true,
        ),
        ("pmd-sharing", &["--vmas", "2", "--children", "1"], false),
        ("usemem", &["--size", "4M", "--runs", "2", "--processes", "1,2"], false),
    ];
    for (bench, own, counts) in benches {
        let args = [&["bench", bench][..], own, &common].concat();
        let run: serde_json::Value = serde_json::from_slice(&foliomm(&args).stdout).unwrap();
        assert_eq!((run["schema"].as_u64(), run["bench"].as_str()), (Some(1), Some(bench)));
        assert_eq!(run["settings"]["kernel"], "6.13", "{bench}");
        let series: Vec<&serde_json::Value> = run["tables"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["rows"].as_array().unwrap())
            .flat_map(|r| r["series"].as_array().unwrap())
            .collect();
        assert!(!series.is_empty() && series.iter().all(|s| !s["samples"].as_array().unwrap().is_empty()), "{bench}");
        let counted = series.iter().any(|s| !s["counters"].as_object().unwrap().is_empty());
        assert_eq!(counted, counts, "{bench}: deterministic counters saved");
    }
    let csv = foliomm(&["bench", "seed-001", "--size", "4M", "--runs", "2", "--no-host", "--csv"]);
    let csv = String::from_utf8(csv.stdout).unwrap();
    // What the run was, in '#' lines, then the header.
    let (meta, data): (Vec<&str>, Vec<&str>) = csv.lines().partition(|l| l.starts_with('#'));
    assert!(
        meta[0].starts_with("# foliomm bench zap-batching at commit")
            && meta[1].starts_with("# reproduce: foliomm bench zap-batching --size 4M"),
        "{csv}"
    );
    assert_eq!(data.first(), Some(&"table,row,series,what,round,value,unit"));
    // 9 folio sizes, 2 strategies: 2 samples and 3 counters each; the swap
    // row, 2 strategies: 2 samples and 1 counter each.
    assert_eq!(data.len(), 1 + 9 * 2 * (2 + 3) + 2 * (2 + 1), "{csv}");
    // Values carry six significant digits at most.
    let digits = |v: &str| v.trim_start_matches(['0', '.', '-']).chars().filter(char::is_ascii_digit).count();
    assert!(data[1..].iter().all(|l| digits(l.split(',').nth(5).unwrap()) <= 6), "{csv}");
    let refused =
        Command::new(env!("CARGO_BIN_EXE_foliomm")).args(["bench", "pmd-sharing", "--size", "4M"]).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--size: pmd-sharing"));
}

/// `compare-runs` names the settings two runs differ in.
#[test]
fn compare_runs_shows_the_settings_that_differ() {
    let dir = std::env::temp_dir().join(format!("foliomm-settings-differ-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let runs = ["nr-mapped", "mm-id"].map(|d| {
        let path = dir.join(d);
        foliomm(&[
            "bench",
            "seed-001",
            "--size",
            "4M",
            "--runs",
            "2",
            "--no-host",
            "--mapcount",
            d,
            "--save",
            path.to_str().unwrap(),
        ]);
        path.with_extension("json")
    });
    let cmp = foliomm(&["compare-runs", runs[0].to_str().unwrap(), runs[1].to_str().unwrap()]);
    let text = String::from_utf8(cmp.stdout).unwrap();
    assert!(text.contains(r#"setting mapcount differs: nr-mapped "nr-mapped", mm-id "mm-id""#), "{text}");
    assert!(!text.contains("setting size differs"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A run whose series hold one sample each (counts: `pmd-sharing`) has no
/// intervals: the report prints and plots the values without error bars
/// (it used to loop forever plotting infinite ones).
#[test]
fn a_report_of_single_samples_draws_no_error_bars() {
    let dir = std::env::temp_dir().join(format!("foliomm-report-single-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = dir.join("pmd");
    foliomm(&["bench", "pmd-sharing", "--vmas", "2", "--children", "1", "--no-host", "--save", run.to_str().unwrap()]);
    let html = dir.join("r.html");
    let mut child = Command::new(env!("CARGO_BIN_EXE_foliomm"))
        .args(["report", run.with_extension("json").to_str().unwrap(), "-o", html.to_str().unwrap()])
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("report of single samples did not finish in 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<td>8.00 KiB</td>") && !page.contains("inf"), "{page}");
    assert_eq!(page.matches("<svg").count(), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_trace_shows_each_step_and_its_pages() {
    let dir = std::env::temp_dir().join(format!("foliomm-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/cow/thp--child-writes.fmm");
    let (html, json) = (dir.join("t.html"), dir.join("t.json"));
    for out in [&html, &json] {
        foliomm(&["run", "--trace", out.to_str().unwrap(), scenario.to_str().unwrap()]);
    }
    let run: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let steps = run["steps"].as_array().unwrap();
    // After the fork, the parent and the child map the same THP: each
    // page's folio mapcount is 2 and it is maybe shared.
    let fork = steps.iter().find(|s| s["text"].as_str().unwrap().ends_with("fork C")).unwrap();
    let pages = fork["trace"].as_array().unwrap();
    assert!(pages.iter().any(|p| p["proc"] == "C") && pages.iter().any(|p| p["proc"] == "P"));
    assert!(pages.iter().all(|p| p["page"]["folio_mapcount"] == 2 && p["page"]["maybe_shared"] == true), "{pages:?}");
    // The mm-id design's own fields: both MM-ID slots taken, the bit set.
    let field = |p: &serde_json::Value, name: &str| {
        p["fields"].as_array().unwrap().iter().find(|f| f[0] == name).map(|f| f[1].as_i64().unwrap())
    };
    for p in pages {
        let ids = (field(p, "_mm_id[0]"), field(p, "_mm_id[1]"));
        assert!(matches!(ids, (Some(a), Some(b)) if a > 0 && b > 0 && a != b), "{p}");
        assert_eq!(field(p, "maybe shared bit"), Some(1), "{p}");
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<section>").count(), steps.len(), "a section per step");
    assert_self_contained(&page);
    check_in_browser(&html, &dir);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Fails if `page` loads anything from elsewhere: a script, a stylesheet
/// or an image by URL (the SVG namespace URI loads nothing).
fn assert_self_contained(page: &str) {
    for needle in ["<script", "<link", "src=", "url(", "@import"] {
        assert!(!page.contains(needle), "the page loads something ({needle})");
    }
}

/// Takes a screenshot of the page at `url` and looks at it: the page drew
/// (much of it is not white) and the plots' first two lines are on it, in
/// plotters' first two palette colours (red and green). The runs compared
/// are A/A, so one line may lie mostly under the other: each colour is
/// asked for only where its legend swatch and a few points would put it.
fn check_screenshot(chromium: &str, url: &str, dir: &Path) {
    let shot = dir.join("shot.png");
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1200,3000"])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium screenshot failed: {}", String::from_utf8_lossy(&out.stderr));
    let decoder = png::Decoder::new(std::fs::File::open(&shot).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let channels = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    let near = |p: &[u8], c: [u8; 3]| (0..3).all(|i| p[i].abs_diff(c[i]) < 40);
    let count = |c: [u8; 3]| pixels.iter().filter(|p| near(p, c)).count();
    let ink = pixels.iter().filter(|p| !near(p, [255, 255, 255])).count();
    assert!(ink > pixels.len() / 50, "the page is nearly blank: {ink} of {} pixels", pixels.len());
    let (red, green) = (count([230, 25, 75]), count([60, 180, 75]));
    assert!(red > 50 && green > 50, "the plot's lines are not on the page: {red} red, {green} green pixels");
}

/// Renders `html` in headless Chromium: no console error, and (a report)
/// the plot's lines have points, or (a trace) its tables drew. Skipped,
/// saying so, without Chromium.
fn check_in_browser(html: &Path, dir: &Path) {
    let Some(chromium) = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].into_iter().find(|p| Path::new(p).exists())
    else {
        eprintln!("skipped the browser check: no Chromium (apt-get install chromium)");
        return;
    };
    let url = format!("file://{}", html.display());
    let profile = dir.join("profile");
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", &url])
        .output()
        .unwrap();
    let (dom, log) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "chromium failed: {log}");
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:?}");
    if dom.contains("<svg") {
        let drawn = dom.matches("<polyline").count() + dom.matches("<path").count();
        assert!(drawn > 0, "no line drawn in the rendered plot");
        assert!(!dom.contains("points=\"\""), "an empty line in the plot");
        check_screenshot(chromium, &url, dir);
    } else {
        assert!(dom.contains("<table") && dom.contains("F1"), "no page table drawn in the trace");
    }
}
