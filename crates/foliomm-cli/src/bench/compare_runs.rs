//! `foliomm compare-runs A.json B.json ...`: saved runs side by side, in
//! the manner of mmtests' compare-kernels: for each table, row and series
//! found in the first run, each run's mean (harmonic mean for rates) and
//! its gain against the first run, marked `*` where the 95% interval of
//! the change (Welch's t, 95% for the table's comparisons together)
//! excludes 0 and `~` where it does not.

use std::path::PathBuf;

use anyhow::{bail, Result};

use super::saved::{SavedRun, Table};
use super::stats::{change, summarize};

/// `compare-runs`' arguments.
#[derive(clap::Args)]
pub struct CompareRunsArgs {
    /// Saved runs (`bench ... --save NAME`); the first is the baseline.
    #[arg(required = true, num_args = 2..)]
    runs: Vec<PathBuf>,
}

/// Prints the comparison; an error if the runs are of different benchmarks.
pub fn run(a: &CompareRunsArgs) -> Result<()> {
    let runs: Vec<SavedRun> = a.runs.iter().map(|p| SavedRun::load(p)).collect::<Result<_>>()?;
    let base = &runs[0];
    if let Some((p, r)) = a.runs.iter().zip(&runs).find(|(_, r)| r.bench != base.bench) {
        bail!("{} is a run of {}, the first is of {}", p.display(), r.bench, base.bench);
    }
    println!("foliomm bench {}", base.bench);
    for (i, (p, r)) in a.runs.iter().zip(&runs).enumerate() {
        let m = &r.machine;
        println!("  [{i}] {}: commit {}, {} ({} cores), Linux {}", p.display(), r.commit, m.cpu, m.cores, m.kernel);
    }
    for line in settings_that_differ(&runs) {
        println!("  {line}");
    }
    for table in &base.tables {
        print_table(table, &runs);
    }
    Ok(())
}

/// Each setting whose value is not the same in every run, with each run's
/// value (`-` where a run has none): `mapcount: [0] nr-mapped, [1] mm-id`.
fn settings_that_differ(runs: &[SavedRun]) -> Vec<String> {
    let mut keys: Vec<&String> = runs.iter().filter_map(|r| r.settings.as_object()).flat_map(|o| o.keys()).collect();
    keys.sort();
    keys.dedup();
    let value = |r: &SavedRun, k: &str| r.settings.get(k).map_or("-".to_string(), |v| v.to_string());
    keys.into_iter()
        .filter(|k| runs.iter().any(|r| value(r, k) != value(&runs[0], k)))
        .map(|k| {
            let each: Vec<String> = runs.iter().enumerate().map(|(i, r)| format!("[{i}] {}", value(r, k))).collect();
            format!("setting {k} differs: {}", each.join(", "))
        })
        .collect()
}

fn print_table(table: &Table, runs: &[SavedRun]) {
    let stat = if table.higher_is_better { "Hmean" } else { "Amean" };
    // Every cell against the first run is one comparison of the family.
    let family = table.rows.iter().map(|r| r.series.len()).sum::<usize>() * (runs.len() - 1);
    let better = if table.higher_is_better { "higher" } else { "lower" };
    println!("\n{} ({}, {better} is better); gain against [0], '*' significant, '~' noise (95% for the table's changes together)", table.name, table.unit);
    let head: String = (0..runs.len()).map(|i| format!("{:>22}", format!("[{i}]"))).collect();
    println!("{:<6} {:<24}{head}", "", "");
    for row in &table.rows {
        for series in &row.series {
            let find = |r: &SavedRun| {
                let t = r.tables.iter().find(|t| t.name == table.name)?;
                let row = t.rows.iter().find(|x| x.label == row.label)?;
                row.series.iter().find(|s| s.name == series.name).map(|s| s.samples.clone())
            };
            let mut line = format!("{stat:<6} {:<24}", format!("{} {}", row.label, series.name));
            for (i, r) in runs.iter().enumerate() {
                let Some(samples) = find(r).filter(|s| !s.is_empty()) else {
                    line += &format!("{:>22}", "-");
                    continue;
                };
                let s = summarize(&samples);
                let value = if table.higher_is_better { s.hmean } else { s.mean };
                if i == 0 {
                    line += &format!("{value:>12.6} ({:>7}) ", "base");
                    continue;
                }
                let c = change(&series.samples, &samples, family);
                let gain = if table.higher_is_better { c.pct } else { -c.pct };
                let mark = if c.significant() { '*' } else { '~' };
                line += &format!("{value:>12.6} ({gain:>+6.2}%){mark}");
            }
            println!("{line}");
        }
    }
}
