//! A fuzz run's summary (what `foliomm fuzz --json` prints) and `foliomm
//! fuzz merge`: shards run apart (processes, machines, a Slurm array)
//! combined into one summary per kernel, their findings de-duplicated by
//! minimized scenario.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// One run's (or shard's) outcome.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub generator: String,
    pub backend: String,
    /// The kernel the workloads ran on beside the model (`model` alone).
    pub kernel: String,
    pub seeds: String,
    pub workloads: u64,
    pub model_seconds: f64,
    pub kernel_seconds: f64,
    /// Workloads per class.
    pub findings: BTreeMap<String, u64>,
    /// The model counters that moved.
    pub coverage: BTreeSet<String>,
    /// The counters that moved with their magnitudes
    /// (`zap_batches>=2^3`): what `--feedback` steers by.
    #[serde(default)]
    pub features: BTreeSet<String>,
    /// The finding directories written.
    pub saved: Vec<String>,
    /// Fields the workloads did not record (`observe ... except`): ones a
    /// kernel showed differently run after run.
    #[serde(default)]
    pub avoided: BTreeSet<String>,
}

impl Summary {
    /// The summary in words.
    pub fn print(&self) {
        let rate = |s: f64| self.workloads as f64 / s.max(1e-9);
        let kernel = if self.kernel_seconds > 0.0 {
            format!(", kernel {:.1}/s", rate(self.kernel_seconds))
        } else {
            String::new()
        };
        println!(
            "{} workloads (seeds {}, generator {}) on {}: model {:.1}/s{kernel}",
            self.workloads,
            self.seeds,
            self.generator,
            self.kernel,
            rate(self.model_seconds)
        );
        if self.findings.is_empty() {
            println!("no findings");
        }
        for (c, n) in &self.findings {
            println!("  {c:<22} {n}");
        }
        let names: Vec<&str> = self.coverage.iter().map(String::as_str).collect();
        println!(
            "coverage: {} model counters moved, {} counter magnitudes ({})",
            names.len(),
            self.features.len(),
            names.join(" ")
        );
        if !self.avoided.is_empty() {
            let avoided: Vec<&str> = self.avoided.iter().map(String::as_str).collect();
            println!("not observed (the kernel varies them): {}", avoided.join(" "));
        }
    }

    /// Adds another shard's numbers to this one.
    fn add(&mut self, other: &Summary) {
        self.workloads += other.workloads;
        self.model_seconds += other.model_seconds;
        self.kernel_seconds += other.kernel_seconds;
        for (c, n) in &other.findings {
            *self.findings.entry(c.clone()).or_default() += n;
        }
        self.coverage.extend(other.coverage.iter().cloned());
        self.features.extend(other.features.iter().cloned());
        self.saved.extend(other.saved.iter().cloned());
        self.avoided.extend(other.avoided.iter().cloned());
    }
}

#[derive(clap::Args)]
pub struct MergeArgs {
    /// `foliomm fuzz --json` outputs of the shards.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print the merged summaries as JSON.
    #[arg(long)]
    json: bool,
}

/// The minimized scenario of a finding directory without its header (the
/// seed), to tell findings apart; the directory's name if it has none.
fn scenario_of(dir: &str) -> String {
    match std::fs::read_to_string(PathBuf::from(dir).join("scenario.fmm")) {
        Ok(text) => text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n"),
        Err(_) => dir.to_string(),
    }
}

/// The shards' summaries merged per kernel, each finding's scenario kept
/// once (the first directory that holds it).
pub fn merged(shards: &[Summary]) -> Vec<Summary> {
    let mut out: Vec<Summary> = Vec::new();
    for s in shards {
        match out.iter_mut().find(|m| m.kernel == s.kernel && m.generator == s.generator) {
            Some(m) => m.add(s),
            None => out.push(s.clone()),
        }
    }
    for m in &mut out {
        let mut seen = BTreeSet::new();
        m.saved.retain(|dir| seen.insert(scenario_of(dir)));
        m.seeds = "merged".into();
    }
    out
}

/// `foliomm fuzz merge`: prints the merged summaries.
pub fn merge(args: &MergeArgs) -> anyhow::Result<bool> {
    let mut shards = Vec::new();
    for f in &args.files {
        let text = std::fs::read_to_string(f).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", f.display()))?;
        let s: Summary = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{} is not a `foliomm fuzz --json` summary: {e}", f.display()))?;
        shards.push(s);
    }
    let all = merged(&shards);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&all)?);
    } else {
        for m in &all {
            m.print();
            println!("  distinct findings: {}", m.saved.len());
        }
    }
    Ok(true)
}
