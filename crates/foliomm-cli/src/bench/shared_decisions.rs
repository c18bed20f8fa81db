//! `foliomm bench shared-decisions`: how often each mapcount design's
//! answer to "is this folio mapped by more than one process?" leads a
//! consumer (COW reuse, MADV_PAGEOUT/COLD, their splits) to the wrong
//! decision, over a fixed suite of workloads (`scenarios/decisions/`) run
//! on the model under every design. Counts, not times: the same on every
//! run and machine. A wrong "shared" is work missed (a copy that could have
//! been a reuse, a page not swapped out); a wrong "exclusive" is a shared
//! folio treated as private, a bug where correctness rests on it (COW
//! reuse: the checker fails the run) and an era's known imprecision
//! elsewhere.

use std::path::PathBuf;

use anyhow::{bail, Result};
use foliomm::internals::kernel::Consumer;
use foliomm::internals::mapcount::Design;
use foliomm_scenario::{parse, run, ModelBackend, RunOptions};

use crate::overrides::SettingFlags;

#[derive(clap::Args)]
pub struct SharedDecisionsArgs {
    /// Workload scenario files [default: scenarios/decisions/*.fmm].
    files: Vec<PathBuf>,
    /// Pair every design with this release (MAJOR.MINOR) instead of its
    /// own era's: the consumers then ask that release's question.
    #[arg(long, value_name = "MAJOR.MINOR")]
    kernel: Option<String>,
    /// Print the counts as JSON.
    #[arg(long)]
    json: bool,
}

/// Decisions made, wrong "shared", wrong "exclusive", per consumer.
type Counts = Vec<[u64; 3]>;

pub fn run_bench(a: &SharedDecisionsArgs) -> Result<()> {
    let files = match a.files.is_empty() {
        true => suite()?,
        false => a.files.clone(),
    };
    let mut rows: Vec<(Design, Counts)> = Vec::new();
    for (i, &design) in Design::ALL.iter().enumerate() {
        eprintln!("[{}/{}] {} over {} workloads", i + 1, Design::ALL.len(), design.name(), files.len());
        rows.push((design, counts_for(design, a.kernel.as_deref(), &files)?));
    }
    if a.json {
        let json: Vec<_> = rows
            .iter()
            .map(|(d, c)| {
                let per: serde_json::Map<_, _> = Consumer::ALL
                    .iter()
                    .zip(c)
                    .map(|(k, [n, s, e])| {
                        (
                            k.name().to_string(),
                            serde_json::json!({"decided": n, "wrong_shared": s, "wrong_exclusive": e}),
                        )
                    })
                    .collect();
                serde_json::json!({ "design": d.name(), "consumers": per })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&json)?);
        return Ok(());
    }
    let mut header = vec!["design".to_string()];
    header.extend(Consumer::ALL.iter().map(|c| format!("{} (decided / wrong shared / wrong excl.)", c.name())));
    let mut t = super::new_table(header);
    for (d, c) in &rows {
        let mut row = vec![d.name().to_string()];
        row.extend(c.iter().map(|[n, s, e]| format!("{n} / {s} / {e}")));
        t.add_row(row);
    }
    let era = a
        .kernel
        .as_ref()
        .map_or("each design on its own era's release".into(), |v| format!("every design on Linux {v}"));
    println!("\"Mapped shared?\" decisions per mapcount design over {} workloads, {era}\n\n{t}\n", files.len());
    println!("reproduce: {}", super::saved::reproducing_command("shared-decisions"));
    Ok(())
}

/// The default suite: `scenarios/decisions/*.fmm`, in name order.
fn suite() -> Result<Vec<PathBuf>> {
    let dir = PathBuf::from("scenarios/decisions");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        bail!("no workload files given and {} cannot be read (run from the repository root)", dir.display());
    };
    let mut files: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "fmm")).collect();
    files.sort();
    Ok(files)
}

/// The decision counters summed over `files` run under `design` (on
/// `kernel`, else its era's release); an error if a workload fails (a
/// wrong "exclusive" COW reuse fails the checker).
fn counts_for(design: Design, kernel: Option<&str>, files: &[PathBuf]) -> Result<Counts> {
    let release = kernel.map_or(String::new(), |v| format!("\nset kernel {v}"));
    let flag = parse(&format!("set mapcount {}{release}", design.name())).map_err(|e| anyhow::anyhow!("{e}"))?;
    let flags = SettingFlags { lines: flag, axes: Vec::new() };
    let mut sum = vec![[0u64; 3]; Consumer::ALL.len()];
    for file in files {
        let src = std::fs::read_to_string(file).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let mut steps = parse(&src).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        flags.apply(&mut steps);
        let out = run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
        if let Some(f) = &out.failure {
            bail!("{} under {}: {}", file.display(), design.name(), f.message);
        }
        for (name, v) in &out.counters {
            for (k, c) in Consumer::ALL.iter().enumerate() {
                for (j, what) in ["decided", "wrong_shared", "wrong_exclusive"].iter().enumerate() {
                    if *name == format!("{what}[{}]", c.name()) {
                        sum[k][j] += v;
                    }
                }
            }
        }
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn suite_files() -> Vec<PathBuf> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/decisions");
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
        files.sort();
        files
    }

    /// The precise designs decide right on the suite, rmap-id too where
    /// its consumers ask the folio question (at 6.8 khugepaged asks each
    /// page's mapcount instead, and takes a THP half-mapped by parent and
    /// child for exclusive); the designs that estimate from one page call
    /// a half-shared THP exclusive when paging out, and those before
    /// mm-id's era miss COW reuse of large folios.
    #[test]
    fn the_precise_designs_make_no_wrong_decision_and_the_estimates_do() {
        let files = suite_files();
        let at = |c: Consumer| c as usize;
        for (design, kernel) in [(Design::MmId, None), (Design::RmapId, Some("6.15"))] {
            let c = counts_for(design, kernel, &files).unwrap();
            assert!(c.iter().all(|[_, s, e]| *s == 0 && *e == 0), "{}: {c:?}", design.name());
            assert!(c[at(Consumer::CowReuse)][0] > 0 && c[at(Consumer::Pageout)][0] > 0, "{c:?}");
            assert!(c[at(Consumer::Collapse)][0] > 0, "{c:?}");
        }
        let rmap_id = counts_for(Design::RmapId, None, &files).unwrap();
        assert_eq!(rmap_id[at(Consumer::Collapse)][2], 1, "page_mapcount at 6.8: {rmap_id:?}");
        let old = counts_for(Design::NrMapped, None, &files).unwrap();
        assert!(old[at(Consumer::PageoutSplit)][2] > 0, "nr-mapped: {old:?}");
        assert!(old[at(Consumer::CowReuse)][1] > 0, "nr-mapped: {old:?}");
        assert_eq!(old[at(Consumer::CowReuse)][2], 0, "a wrong-exclusive COW reuse fails the run");
    }
}
