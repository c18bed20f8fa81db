//! The fuzz targets' check ([`foliomm_scenario::fuzz::check`]) run on stable
//! in the default test run: over every shipped scenario and a fixed number
//! of mutations of each (a line dropped, doubled or swapped, a number
//! changed, a byte replaced), from a fixed seed. `FOLIOMM_FUZZ_MUTATIONS`
//! sets the mutations per file (default 8); `cargo fuzz` (fuzz/) searches
//! far more.

use std::path::{Path, PathBuf};

use foliomm_scenario::fuzz::check;

fn corpus() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files = Vec::new();
    for dir in ["", "cow", "threads", "shmem", "hugetlb"].map(|d| root.join(d)) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            if e.path().extension().is_some_and(|x| x == "fmm") {
                files.push(e.path());
            }
        }
    }
    files.sort();
    files
}

/// One mutation of `src`, chosen by `r`.
fn mutate(src: &str, r: &mut impl FnMut() -> u64) -> String {
    let mut lines: Vec<String> = src.lines().map(str::to_string).collect();
    if lines.is_empty() {
        return src.to_string();
    }
    let n = lines.len() as u64;
    let (i, j) = ((r() % n) as usize, (r() % n) as usize);
    match r() % 5 {
        0 => drop(lines.remove(i)),
        1 => lines.insert(i, lines[j].clone()),
        2 => lines.swap(i, j),
        3 => {
            // A number becomes another (sizes, offsets, values).
            let numbers = ["0", "1", "4K", "2M", "0xffffffffffffffff", "3", "1G", "255", "256"];
            let line = &mut lines[i];
            if let Some(pos) = line.find(|c: char| c.is_ascii_digit()) {
                let end = line[pos..].find(|c: char| !c.is_ascii_alphanumeric()).map_or(line.len(), |e| pos + e);
                line.replace_range(pos..end, numbers[(r() % numbers.len() as u64) as usize]);
            }
        }
        _ => {
            let line = &mut lines[i];
            if !line.is_empty() {
                let at = (r() % line.len() as u64) as usize;
                if line.is_char_boundary(at) && line.is_char_boundary(at + 1) {
                    let c = b"[]..=:,xK 0a-"[(r() % 13) as usize] as char;
                    line.replace_range(at..at + 1, &c.to_string());
                }
            }
        }
    }
    lines.join("\n")
}

#[test]
fn fuzz_check_finds_nothing_in_the_corpus_and_its_mutations() {
    let per_file: u64 = std::env::var("FOLIOMM_FUZZ_MUTATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    let mut r = foliomm::internals::xorshift(0x5eed);
    let mut runs = 0;
    for f in corpus() {
        let src = std::fs::read_to_string(&f).unwrap();
        let mut inputs = vec![src.clone()];
        inputs.extend((0..per_file).map(|_| mutate(&src, &mut r)));
        for input in inputs {
            runs += 1;
            let found = match std::panic::catch_unwind(|| check(&input)) {
                Ok(r) => r.err(),
                Err(p) => Some(format!("a panic: {}", p.downcast_ref::<String>().map_or("?", |s| s.as_str()))),
            };
            if let Some(bug) = found {
                panic!("{} (mutated):\n{input}\n--- found: {bug}", f.display());
            }
        }
    }
    eprintln!("{runs} fuzz inputs checked");
}
