//! `foliomm compare-runs A B ...`: saved runs side by side, in the manner
//! of mmtests' compare-kernels: the settings the runs differ in, then for
//! each table, row and series found in the first run, each run's mean
//! (harmonic mean for rates) and its gain against the first run, marked
//! `*` where the change is more than noise: its 95% interval (Welch's t,
//! 95% for the table's comparisons together) excludes 0 and the two runs'
//! samples do not overlap. A run of fewer than [`MIN_ROUNDS`] rounds is
//! not judged (`?`, with a warning): its spread says too little of the
//! noise between runs. The deterministic counters follow each table,
//! compared exactly.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::saved::{SavedRun, Table};
use super::stats::{change, summarize};

/// The rounds each run needs before a change is judged.
const MIN_ROUNDS: usize = 5;

/// `compare-runs`' arguments.
#[derive(clap::Args)]
pub struct CompareRunsArgs {
    /// Saved runs (`bench ... --save NAME`), by file or by NAME; the first
    /// is the baseline.
    #[arg(required = true, num_args = 2..)]
    runs: Vec<PathBuf>,
}

/// A run's name: its file's, without `.json`.
fn name_of(path: &Path) -> String {
    path.file_stem().map_or_else(|| path.display().to_string(), |s| s.to_string_lossy().into_owned())
}

/// Prints the comparison; an error if the runs are of different benchmarks.
pub fn run(a: &CompareRunsArgs) -> Result<()> {
    let runs: Vec<SavedRun> = a.runs.iter().map(|p| SavedRun::load(p)).collect::<Result<_>>()?;
    let names: Vec<String> = a.runs.iter().map(|p| name_of(p)).collect();
    let base = &runs[0];
    if let Some((n, r)) = names.iter().zip(&runs).find(|(_, r)| r.bench != base.bench) {
        bail!("{n} is a run of {}, {} of {}", r.bench, names[0], base.bench);
    }
    println!("foliomm bench {}", base.bench);
    for (n, r) in names.iter().zip(&runs) {
        let m = &r.machine;
        println!("  {n}: commit {}, {} ({} cores), Linux {}", r.commit, m.cpu, m.cores, m.kernel);
    }
    for line in settings_that_differ(&runs, &names) {
        println!("  {line}");
    }
    for table in &base.tables {
        print_table(table, &runs, &names);
        print_counters(table, &runs, &names);
    }
    Ok(())
}

/// Each setting whose value is not the same in every run, with each run's
/// value (`-` where a run has none): `mapcount differs: a "nr-mapped", b "mm-id"`.
fn settings_that_differ(runs: &[SavedRun], names: &[String]) -> Vec<String> {
    let mut keys: Vec<&String> = runs.iter().filter_map(|r| r.settings.as_object()).flat_map(|o| o.keys()).collect();
    keys.sort();
    keys.dedup();
    let value = |r: &SavedRun, k: &str| r.settings.get(k).map_or("-".to_string(), |v| v.to_string());
    keys.into_iter()
        .filter(|k| runs.iter().any(|r| value(r, k) != value(&runs[0], k)))
        .map(|k| {
            let each: Vec<String> = names.iter().zip(runs).map(|(n, r)| format!("{n} {}", value(r, k))).collect();
            format!("setting {k} differs: {}", each.join(", "))
        })
        .collect()
}

/// The samples of `series` in row `row` of `table` in run `r`, if any.
fn samples_of<'r>(r: &'r SavedRun, table: &str, row: &str, series: &str) -> Option<&'r [f64]> {
    let s = r.tables.iter().find(|t| t.name == table)?.series(row, series)?;
    Some(&s.samples).filter(|s| !s.is_empty()).map(|s| s.as_slice())
}

fn print_table(table: &Table, runs: &[SavedRun], names: &[String]) {
    let stat = if table.higher_is_better { "Hmean" } else { "Amean" };
    // Every cell against the first run is one comparison of the family.
    let family = table.rows.iter().map(|r| r.series.len()).sum::<usize>() * (runs.len() - 1);
    let better = if table.higher_is_better { "higher" } else { "lower" };
    println!(
        "\n{} ({}, {better} is better); gain against {}, '*' more than noise, '~' noise, '?' too few rounds to tell",
        table.name, table.unit, names[0]
    );
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0).max(22);
    let head: String = names.iter().map(|n| format!("{n:>width$}")).collect();
    println!("{:<6} {:<24}{head}", "", "");
    let mut too_few = false;
    for row in &table.rows {
        for series in &row.series {
            let mut line = format!("{stat:<6} {:<24}", format!("{} {}", row.label, series.name));
            for (i, r) in runs.iter().enumerate() {
                let Some(samples) = samples_of(r, &table.name, &row.label, &series.name) else {
                    line += &format!("{:>width$}", "-");
                    continue;
                };
                let s = summarize(samples);
                let value = if table.higher_is_better { s.hmean } else { s.mean };
                if i == 0 {
                    line += &format!("{:>width$}", format!("{value:.6} (  base)  "));
                    continue;
                }
                let c = change(&series.samples, samples, family);
                let gain = if table.higher_is_better { c.pct } else { -c.pct };
                let judged = series.samples.len().min(samples.len()) >= MIN_ROUNDS;
                too_few |= !judged;
                let apart = summarize(&series.samples).min > maximum(samples) || s.min > maximum(&series.samples);
                let mark = match (judged, c.significant() && apart) {
                    (false, _) => '?',
                    (true, true) => '*',
                    (true, false) => '~',
                };
                line += &format!("{:>width$}", format!("{value:.6} ({gain:>+6.2}%){mark}"));
            }
            println!("{line}");
        }
    }
    if too_few {
        println!("warning: a run has fewer than {MIN_ROUNDS} rounds: its spread says too little of the noise between runs to judge a change ('?'); save runs with --runs {MIN_ROUNDS} or more");
    }
}

fn maximum(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::MIN, f64::max)
}

/// The deterministic counters of each series (costs per operation: the
/// same on every run of the same code and settings), each run's value and
/// its change against the first, exactly; only counters that differ.
fn print_counters(table: &Table, runs: &[SavedRun], names: &[String]) {
    let mut lines = Vec::new();
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0).max(18);
    for row in &table.rows {
        for series in &row.series {
            for (counter, base) in &series.counters {
                let values: Vec<Option<f64>> = runs
                    .iter()
                    .map(|r| {
                        let t = r.tables.iter().find(|t| t.name == table.name)?;
                        let s = t.series(&row.label, &series.name)?;
                        s.counters.iter().find(|(n, _)| n == counter).map(|(_, v)| *v)
                    })
                    .collect();
                if values.iter().all(|v| *v == Some(*base)) {
                    continue;
                }
                let cells: String = values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        None => format!("{:>width$}", "-"),
                        Some(v) if i == 0 || *base == 0.0 => format!("{:>width$}", format!("{v:.4}")),
                        Some(v) => format!("{:>width$}", format!("{v:.4} ({:+.1}%)", 100.0 * (v - base) / base)),
                    })
                    .collect();
                lines.push(format!("{:<40}{cells}", format!("{} {} {counter}", row.label, series.name)));
            }
        }
    }
    if lines.is_empty() {
        let any = table.rows.iter().flat_map(|r| &r.series).any(|s| !s.counters.is_empty());
        if any {
            println!("deterministic counters: the same in every run");
        }
        return;
    }
    let head: String = names.iter().map(|n| format!("{n:>width$}")).collect();
    println!("deterministic counters that differ (exact, per operation):\n{:<40}{head}", "");
    for l in lines {
        println!("{l}");
    }
}
