//! The one loop every benchmark runs on. A [`Benchmark`] says what it
//! measures (its configurations, one measurement, its tables, the seed's
//! figures, how to print); [`run`] owns the rest: the warm-up round, the
//! interleaved rounds (A B C, A B C, ..., so that a burst of load on a
//! shared machine lands on every configuration), progress, the host kernel
//! dropped with a note when it cannot run, and the one schema ([`SavedRun`])
//! that `--json`, `--csv`, `--save` and the printed tables all come from.

use anyhow::Result;

use super::progress::Progress;
use super::saved::{Row, SavedRun, Series, Table};
use super::CommonArgs;

/// A benchmark as [`run`] drives it.
pub trait Benchmark {
    /// One configuration measured once per round (a design on a case, the
    /// host kernel on it): a description, cheap to make; what it needs to
    /// run (machines) is made by [`Benchmark::prepare`].
    type Config;
    /// The `bench` subcommand, the name a saved run carries.
    const NAME: &'static str;
    /// Kept rounds when `--runs` is not given.
    const RUNS: u32 = 3;

    /// The benchmark's own options in force (size, loops, ...), saved
    /// with the run beside the common ones.
    fn settings(&self) -> serde_json::Value;
    /// The tables, without series (rows only where every row must show,
    /// sampled or not): a measurement names them by index.
    fn tables(&self) -> Vec<Table>;
    /// The configurations in groups: a group's run in interleaved rounds,
    /// the groups one after another (so only one group's machines exist
    /// at a time). Without `host`, none on the host kernel.
    fn plan(&self, host: bool) -> Vec<Vec<Self::Config>>;
    /// Whether a warm-up round, not kept, comes first (false for counts
    /// and simulated times, which do not depend on a warm machine).
    fn warm_up(&self) -> bool {
        true
    }
    /// Makes what `group` needs before its first round.
    fn prepare(&mut self, _group: &[Self::Config], _bar: &Progress) -> Result<()> {
        Ok(())
    }
    /// The row and the series `c`'s samples belong to.
    fn place(&self, c: &Self::Config) -> (String, String);
    /// What the progress calls `c`: its row and series unless the tables
    /// need saying too.
    fn label(&self, c: &Self::Config) -> String {
        let (row, series) = self.place(c);
        format!("{row}, {series}")
    }
    /// Whether `c` runs on the host kernel: its failure drops the host from
    /// the rest of the run, with a note, instead of ending the run.
    fn on_host(&self, c: &Self::Config) -> bool;
    /// Measures `c` once.
    fn measure(&mut self, c: &Self::Config) -> Result<Measurement>;
    /// The seed's figures beside `row` of table `table`, by the seed's names.
    fn published(&self, _table: usize, _row: &str) -> Vec<(String, f64)> {
        Vec::new()
    }
    /// What the whole run says beside its tables (why a row departs from
    /// the seed), saved with it and printed after the tables.
    fn conclude(&self, _run: &SavedRun) -> Vec<String> {
        Vec::new()
    }
    /// Prints the run's tables (the run's notes follow them).
    fn print(&self, run: &SavedRun);
}

/// What one measurement of a configuration gave.
#[derive(Default)]
pub struct Measurement {
    /// Samples by table index (one per table usually; one per instance
    /// where instances ran at once); none where the case does not apply.
    pub samples: Vec<(usize, f64)>,
    /// Deterministic counters (costs per operation), on the configuration's
    /// series in every table it sampled; the last round's are kept.
    pub counters: Vec<(String, f64)>,
    /// What the reader should know (the host backed only part of the run
    /// with the folio size asked); the last round's are kept.
    pub notes: Vec<String>,
}

impl Measurement {
    /// One sample in each of tables 0, 1, ...
    pub fn of(values: impl IntoIterator<Item = f64>) -> Measurement {
        Measurement { samples: values.into_iter().enumerate().collect(), ..Measurement::default() }
    }

    /// One sample in table `table` only.
    pub fn on(table: usize, value: f64) -> Measurement {
        Measurement { samples: vec![(table, value)], ..Measurement::default() }
    }

    /// With `counters`.
    pub fn counting(self, counters: impl IntoIterator<Item = (&'static str, f64)>) -> Measurement {
        Measurement { counters: counters.into_iter().map(|(n, v)| (n.to_string(), v)).collect(), ..self }
    }
}

/// Runs `b` with the common options `common`: measures, then saves or
/// prints the run as `--save`, `--json` and `--csv` ask, or prints its
/// tables and notes.
pub fn run<B: Benchmark>(b: &mut B, common: &CommonArgs) -> Result<()> {
    let rounds = common.runs_or(B::RUNS);
    let plan = b.plan(!common.no_host);
    let mut settings = common.settings();
    merge(&mut settings, b.settings());
    settings["rounds"] = rounds.into();
    let mut run = SavedRun::new(B::NAME, settings, b.tables());
    let notes = measure_into(b, &plan, rounds, &mut run)?;
    let concluded = b.conclude(&run);
    run.notes = notes.into_iter().chain(concluded).collect();
    if common.out.emit(|| run.clone())? {
        return Ok(());
    }
    b.print(&run);
    if !run.notes.is_empty() {
        println!("\n{}", run.notes.join("\n"));
    }
    println!("\nreproduce: {}", run.command);
    Ok(())
}

/// Measures every group of `plan` in `rounds` interleaved rounds (after a
/// warm-up round if [`Benchmark::warm_up`]) into `run`'s tables, with progress on
/// stderr. Returns the notes: each configuration's of its last round, then
/// why the host kernel was dropped, if it was.
fn measure_into<B: Benchmark>(
    b: &mut B,
    plan: &[Vec<B::Config>],
    rounds: u32,
    run: &mut SavedRun,
) -> Result<Vec<String>> {
    let first = if b.warm_up() { 0 } else { 1 };
    let steps: usize = plan.iter().map(|g| g.len()).sum::<usize>() * (rounds + 1 - first) as usize;
    let bar = Progress::new(steps as u64);
    let mut host_note: Option<String> = None;
    let mut last_notes: Vec<Vec<String>> = Vec::new();
    for group in plan {
        b.prepare(group, &bar)?;
        let mut notes = vec![Vec::new(); group.len()];
        for round in first..=rounds {
            for (c, notes) in group.iter().zip(&mut notes) {
                let when = if round == 0 { "warm-up".to_string() } else { format!("round {round}/{rounds}") };
                bar.set_message(format!("{}: {when}", b.label(c)));
                bar.inc(1);
                if b.on_host(c) && host_note.is_some() {
                    continue;
                }
                let m = match b.measure(c) {
                    Ok(m) => m,
                    Err(e) if b.on_host(c) => {
                        host_note = Some(format!("host kernel skipped: {e:#}"));
                        continue;
                    }
                    Err(e) => return Err(e.context(b.label(c))),
                };
                if round > 0 {
                    notes.clone_from(&m.notes);
                    let (row, series) = b.place(c);
                    record(run, b, &row, &series, m);
                }
            }
        }
        last_notes.extend(notes);
    }
    bar.finish_and_clear();
    Ok(last_notes.into_iter().flatten().chain(host_note).collect())
}

/// Adds `m`'s samples and counters to the series `series` of row `row`.
fn record<B: Benchmark>(run: &mut SavedRun, b: &B, row: &str, series: &str, m: Measurement) {
    for &(t, v) in &m.samples {
        let table = &mut run.tables[t];
        let r = match table.rows.iter().position(|r| r.label == row) {
            Some(i) => &mut table.rows[i],
            None => {
                let published = b.published(t, row);
                table.rows.push(Row { label: row.into(), series: Vec::new(), published });
                table.rows.last_mut().unwrap()
            }
        };
        let s = match r.series.iter().position(|s| s.name == series) {
            Some(i) => &mut r.series[i],
            None => {
                r.series.push(Series::timed(series, Vec::new()));
                r.series.last_mut().unwrap()
            }
        };
        s.samples.push(v);
        s.counters.clone_from(&m.counters);
    }
}

/// Adds the keys of `more` (an object) to `into`.
fn merge(into: &mut serde_json::Value, more: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(more)) = (into.as_object_mut(), more) {
        into.extend(more);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two groups of a model and a host configuration; the host fails on
    /// its second measurement. Each measurement's value is its place in
    /// the order of measurements, so the samples show the order.
    struct Fake {
        measured: Vec<(usize, bool)>,
    }

    impl Benchmark for Fake {
        /// The group and whether on the host.
        type Config = (usize, bool);
        const NAME: &'static str = "fake";
        const RUNS: u32 = 2;

        fn settings(&self) -> serde_json::Value {
            serde_json::json!({ "size": 1 })
        }

        fn tables(&self) -> Vec<Table> {
            ["a", "b"]
                .map(|n| Table { name: n.into(), unit: "s".into(), higher_is_better: false, rows: Vec::new() })
                .into()
        }

        fn plan(&self, host: bool) -> Vec<Vec<(usize, bool)>> {
            (0..2).map(|g| std::iter::once((g, false)).chain(host.then_some((g, true))).collect()).collect()
        }

        fn place(&self, &(g, host): &(usize, bool)) -> (String, String) {
            (format!("row {g}"), if host { "host" } else { "model" }.into())
        }

        fn on_host(&self, c: &(usize, bool)) -> bool {
            c.1
        }

        fn measure(&mut self, &c: &(usize, bool)) -> Result<Measurement> {
            self.measured.push(c);
            let n = self.measured.len() as f64;
            if c.1 && self.measured.iter().filter(|m| m.1).count() == 2 {
                anyhow::bail!("no permission");
            }
            let notes = vec![format!("note {n}")];
            Ok(Measurement { notes, ..Measurement::of([n, -n]).counting([("count", n)]) })
        }

        fn published(&self, table: usize, row: &str) -> Vec<(String, f64)> {
            vec![(format!("{row} of {table}"), 1.0)]
        }

        fn print(&self, _: &SavedRun) {}
    }

    #[test]
    fn rounds_interleave_after_a_warm_up_and_a_failing_host_is_dropped() {
        let mut fake = Fake { measured: Vec::new() };
        let plan = fake.plan(true);
        let mut run = SavedRun::new(Fake::NAME, serde_json::json!({}), fake.tables());
        let notes = measure_into(&mut fake, &plan, Fake::RUNS, &mut run).unwrap();
        // Group 0: warm-up (model, host), round 1 (model, host fails),
        // round 2 (model): the host is not asked again, nor in group 1.
        let order: Vec<(usize, bool)> = fake.measured.clone();
        assert_eq!(
            order,
            [(0, false), (0, true), (0, false), (0, true), (0, false), (1, false), (1, false), (1, false)]
        );
        let a = &run.tables[0];
        assert_eq!(a.samples("row 0", "model"), Some(&[3.0, 5.0][..]), "the warm-up is not kept");
        assert_eq!(a.samples("row 0", "host"), None, "the host's warm-up is not kept, its failure drops it");
        assert_eq!(run.tables[1].samples("row 1", "model"), Some(&[-7.0, -8.0][..]));
        assert_eq!(a.series("row 1", "model").unwrap().counter("count"), Some(8.0), "the last round's counters");
        assert_eq!(a.rows[1].published, vec![("row 1 of 0".to_string(), 1.0)]);
        assert_eq!(notes, ["note 5", "note 8", "host kernel skipped: no permission"]);
    }
}
