//! Saved benchmark runs (`bench ... --save NAME`): one self-contained JSON
//! file per run, with the machine, the foliomm commit, the settings, every
//! sample and the seed's published figures, so that runs from several
//! builds and machines can be compared (`foliomm compare-runs`) and drawn
//! (`foliomm report`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// How every benchmark reports besides its tables: one schema, a
/// [`SavedRun`], for `--json`, `--csv` and `--save`.
#[derive(clap::Args)]
pub struct OutputArgs {
    /// Print the run as JSON (the schema `--save` writes) instead of tables.
    #[arg(long)]
    json: bool,
    /// Print the run's samples and counters as CSV, a line per value,
    /// instead of tables.
    #[arg(long, conflicts_with = "json")]
    csv: bool,
    /// Save every sample, the deterministic counters, the machine and the
    /// settings as NAME.json (for `foliomm compare-runs` and `foliomm report`).
    #[arg(long, value_name = "NAME")]
    save: Option<PathBuf>,
}

impl OutputArgs {
    /// Saves the run `make` builds if `--save` asked for it (saying where),
    /// prints it if `--json` or `--csv` did; returns true if it printed
    /// (the caller then prints no tables).
    pub fn emit(&self, make: impl FnOnce() -> SavedRun) -> Result<bool> {
        if self.save.is_none() && !self.json && !self.csv {
            return Ok(false);
        }
        let run = make();
        if let Some(name) = &self.save {
            let path = run.save(name)?;
            eprintln!("saved {}", path.display());
        }
        if self.json {
            println!("{}", serde_json::to_string_pretty(&run)?);
        } else if self.csv {
            run.write_csv(std::io::stdout())?;
        }
        Ok(self.json || self.csv)
    }
}

/// The format's version; a file of another version is refused.
pub const SCHEMA: u32 = 1;

/// One benchmark run.
#[derive(Clone, Serialize, Deserialize)]
pub struct SavedRun {
    pub schema: u32,
    /// The `bench` subcommand (`seed-001`).
    pub bench: String,
    pub machine: MachineInfo,
    /// `git describe` of the build (`unknown` outside a checkout).
    pub commit: String,
    /// The benchmark's options and the model's settings.
    pub settings: serde_json::Value,
    pub tables: Vec<Table>,
    /// What the run says beside its tables: host kernels skipped or
    /// partly backed, and why a row differs from the seed.
    #[serde(default)]
    pub notes: Vec<String>,
    /// The command line that reproduces the run ([`reproducing_command`]).
    #[serde(default)]
    pub command: String,
}

/// The command line that reproduces this run: its arguments with the
/// benchmark's own name (not an alias) and without the options that only
/// say where the output goes (`--save`, `--json`, `--csv`), each quoted
/// for a shell where it needs to be.
pub fn reproducing_command(bench: &str) -> String {
    let mut out = vec!["foliomm".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--save" => {
                args.next();
            }
            "--json" | "--csv" => {}
            a if a.starts_with("--save=") => {}
            _ if out.len() == 2 && out[1] == "bench" => out.push(bench.to_string()),
            _ => out.push(arg),
        }
    }
    let quoted =
        out.into_iter().map(|a| match a.chars().all(|c| c.is_ascii_alphanumeric() || "-_.,=/:+".contains(c)) {
            true => a,
            false => format!("'{}'", a.replace('\'', "'\\''")),
        });
    quoted.collect::<Vec<_>>().join(" ")
}

/// Where a run ran.
#[derive(Clone, Serialize, Deserialize)]
pub struct MachineInfo {
    pub cpu: String,
    pub cores: usize,
    pub kernel: String,
    /// THP `enabled` and `shmem_enabled` as selected on the host.
    pub thp: String,
    pub shmem_thp: String,
}

/// A table of the benchmark: rows (a folio size, a thread count) by series
/// (a design, the host kernel).
#[derive(Clone, Serialize, Deserialize)]
pub struct Table {
    pub name: String,
    /// Unit of the samples (`s`, `ops/s`).
    pub unit: String,
    /// Whether more is better (rates) rather than less (times).
    pub higher_is_better: bool,
    pub rows: Vec<Row>,
}

/// One row: its samples per series, and the seed's published figures.
#[derive(Clone, Serialize, Deserialize)]
pub struct Row {
    pub label: String,
    pub series: Vec<Series>,
    /// The seed's figures for this row, by the seed's column names (an
    /// object in JSON).
    #[serde(with = "foliomm_scenario::named_values")]
    pub published: Vec<(String, f64)>,
}

/// Every sample of one series in one row, in the order taken, and the
/// deterministic counters of its configuration (costs per operation that
/// do not depend on timing: cache-line transfers, atomic RMWs, ...).
#[derive(Clone, Serialize, Deserialize)]
pub struct Series {
    pub name: String,
    pub samples: Vec<f64>,
    /// By name (an object in JSON).
    #[serde(default, with = "foliomm_scenario::named_values")]
    pub counters: Vec<(String, f64)>,
}

impl Table {
    /// The series `series` of row `row`, if it has samples.
    pub fn series(&self, row: &str, series: &str) -> Option<&Series> {
        self.rows.iter().find(|r| r.label == row)?.series.iter().find(|s| s.name == series)
    }

    /// The samples of series `series` in row `row`, if any.
    pub fn samples(&self, row: &str, series: &str) -> Option<&[f64]> {
        self.series(row, series).map(|s| s.samples.as_slice())
    }
}

impl Series {
    /// The counter `name`, if the series has it.
    pub fn counter(&self, name: &str) -> Option<f64> {
        self.counters.iter().find(|(n, _)| n == name).map(|&(_, v)| v)
    }

    /// Samples without counters.
    pub fn timed(name: impl Into<String>, samples: Vec<f64>) -> Series {
        Series { name: name.into(), samples, counters: Vec::new() }
    }
}

/// A line of `--csv`: one sample or one counter of one series.
#[derive(Serialize)]
struct CsvLine<'a> {
    table: &'a str,
    row: &'a str,
    series: &'a str,
    /// `sample` (with its round) or the counter's name.
    what: &'a str,
    round: Option<usize>,
    /// Six significant digits ([`significant`]).
    value: String,
    unit: &'a str,
}

/// `v` with six significant digits, trailing zeros dropped: what a timer
/// or a per-operation cost can claim, without float noise (`0.000172`,
/// not `0.00017199999999999998`).
fn significant(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return v.to_string();
    }
    let decimals = (5 - v.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{v:.decimals$}");
    match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
    }
}

impl SavedRun {
    /// A run of `bench` on this machine and build.
    pub fn new(bench: &str, settings: serde_json::Value, tables: Vec<Table>) -> SavedRun {
        let commit = option_env!("FOLIOMM_COMMIT").unwrap_or("unknown").to_string();
        let machine = MachineInfo::here();
        let command = reproducing_command(bench);
        SavedRun { schema: SCHEMA, bench: bench.into(), machine, commit, settings, tables, notes: Vec::new(), command }
    }

    /// Writes every sample and counter as CSV, a line each, after `#`
    /// lines that say what the run was (its benchmark, the command that
    /// reproduces it, commit, machine and settings; `comment='#'` in
    /// pandas, `--comment-char` elsewhere).
    pub fn write_csv(&self, mut out: impl std::io::Write) -> Result<()> {
        let m = &self.machine;
        writeln!(out, "# foliomm bench {} at commit {}", self.bench, self.commit)?;
        writeln!(out, "# reproduce: {}", self.command)?;
        writeln!(
            out,
            "# machine: {} ({} cores), Linux {}, THP {}, shmem THP {}",
            m.cpu, m.cores, m.kernel, m.thp, m.shmem_thp
        )?;
        writeln!(out, "# settings: {}", self.settings)?;
        let mut w = csv::Writer::from_writer(out);
        for t in &self.tables {
            for r in &t.rows {
                for s in &r.series {
                    let line = |what, round, value, unit| CsvLine {
                        table: &t.name,
                        row: &r.label,
                        series: &s.name,
                        what,
                        round,
                        value,
                        unit,
                    };
                    for (i, &v) in s.samples.iter().enumerate() {
                        w.serialize(line("sample", Some(i + 1), significant(v), &t.unit))?;
                    }
                    for (name, v) in &s.counters {
                        w.serialize(line(name, None, significant(*v), ""))?;
                    }
                }
            }
        }
        w.flush()?;
        Ok(())
    }

    /// Writes the run to `name` (`.json` added if missing); returns the path.
    pub fn save(&self, name: &Path) -> Result<PathBuf> {
        let path =
            if name.extension().is_some_and(|e| e == "json") { name.into() } else { name.with_extension("json") };
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        Ok(path)
    }

    /// Reads a saved run (its file, or NAME for NAME.json), refusing another
    /// schema version.
    pub fn load(path: &Path) -> Result<SavedRun> {
        // A run named as `--save` named it: NAME for NAME.json.
        let named = path.with_extension("json");
        let path = if !path.exists() && path.extension().is_none() && named.exists() { &named } else { path };
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
        match value.get("schema").and_then(|s| s.as_u64()) {
            Some(v) if v == SCHEMA as u64 => {}
            Some(v) => bail!("{}: schema version {v}, this foliomm reads version {SCHEMA}", path.display()),
            None => bail!("{}: not a saved foliomm run (no schema version)", path.display()),
        }
        serde_json::from_value(value).with_context(|| format!("{}: not a saved foliomm run", path.display()))
    }
}

impl MachineInfo {
    /// This machine, from /proc and sysfs.
    fn here() -> MachineInfo {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpuinfo = read("/proc/cpuinfo");
        let cpu =
            cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|v| v.trim_start_matches([' ', '\t', ':']));
        let selected = |p: &str| foliomm_host::sysfs::read_selected(p).unwrap_or_else(|_| "unknown".into());
        MachineInfo {
            cpu: cpu.unwrap_or("unknown").to_string(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            thp: selected("/sys/kernel/mm/transparent_hugepage/enabled"),
            shmem_thp: selected("/sys/kernel/mm/transparent_hugepage/shmem_enabled"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn six_significant_digits() {
        assert_eq!(super::significant(0.00017199999999999998), "0.000172");
        assert_eq!(super::significant(1234567.89), "1234568");
        assert_eq!(super::significant(2.5), "2.5");
        assert_eq!(super::significant(0.0), "0");
    }
}
