//! `foliomm bench vma-lock-scaling`: page-fault scalability of the three VMA-lock
//! designs (seed 004's mmtests table): will-it-scale `page_fault1`, `2` and
//! `3` in thread mode and their contended variants, model and host kernel,
//! with the cache-line transfers per fault the model counts for each design
//! and thread count.
//!
//! Every configuration runs once per round and the rounds interleave them,
//! so that the machine's drift spreads over all; figures are harmonic means
//! over the rounds (as mmtests reports them) with the spread (max-min over
//! mean). A change is starred, as mmtests stars it, only when the two
//! configurations' ranges do not overlap.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use foliomm::internals::machine::VmaLockDesign;
use foliomm::internals::sync::cacheline::{Structure, Transfers};
use foliomm::{Config, Machine};

use super::new_table;
use super::page_fault::{self, Layout, Test};
use super::progress::Progress;
use super::published::SEED_004;
use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::seed_004_validation::{self as validation, Series};
use super::stats::change;
use super::workers::{SimArgs, SimRounds};

#[derive(clap::Args)]
pub(super) struct Seed004Args {
    /// The common options (--size: the region each thread faults, 128M by
    /// default; the report draws a line over thread count per design).
    #[command(flatten)]
    pub(super) common: super::CommonArgs,
    /// Thread counts, comma-separated (each 1 to 1024).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    threads: Vec<usize>,
    /// Loops over its region each thread makes per round (1 to 10000).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    loops: u32,
    /// Only this layout: `separate` (threads, a VMA each), `shared`
    /// (threads, one VMA: contended) or `processes` (a process each).
    #[arg(long, value_parser = ["separate", "shared", "processes"])]
    layout: Option<String>,
    /// The will-it-scale tests to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "page_fault1,page_fault2,page_fault3")]
    tests: Vec<Test>,
    /// Where the VMA lock lies against the fields a fault reads
    /// (`set vma_layout`): each design's own, or embedded in the VMA's
    /// first line (the 6.4 merge window's false sharing).
    #[arg(long, value_enum, default_value = "design")]
    vma_layout: foliomm::VmaLayout,
    /// Simulated CPUs instead of threads (`--sim-cpus` replaces
    /// `--threads`).
    #[command(flatten)]
    sim: SimArgs,
    /// With --sim-cpus: also run the model on threads and the host kernel
    /// at the same counts (1 and 2 on a 2-core machine), in the same
    /// interleaved rounds, and print the simulated figures against both as
    /// ratios: the validation of the cost profile.
    #[arg(long, requires = "cpus")]
    validate: bool,
}

/// Who serves the faults: a model design (on simulated CPUs with
/// --sim-cpus), the model on threads beside simulated CPUs (--validate),
/// or the host kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Backend {
    Model(VmaLockDesign),
    Threads(VmaLockDesign),
    Host,
}

impl Backend {
    fn name(self) -> String {
        match self {
            Backend::Model(d) => d.name().to_string(),
            Backend::Threads(d) => format!("{} on threads", d.name()),
            Backend::Host => "host".to_string(),
        }
    }
}

/// The baseline design first (the seed's "before"), then the others.
const DESIGNS: [VmaLockDesign; 3] = [VmaLockDesign::VmaRwsem, VmaLockDesign::MmapLock, VmaLockDesign::VmaRefcount];

/// One configuration: a test in a layout at a thread count, on a backend.
type Key = (Test, Layout, usize, Backend);

/// `bench vma-lock-scaling` as the runner drives it.
pub(super) struct Seed004<'a> {
    args: &'a Seed004Args,
    size: u64,
    layouts: Vec<Layout>,
    /// A machine per design, made and warmed once.
    machines: HashMap<VmaLockDesign, Arc<Machine>>,
    /// The thread (or simulated CPU) counts.
    threads: Vec<usize>,
    /// Simulated CPUs, and the rounds each configuration has run.
    simulated: SimRounds<Key>,
}

impl<'a> Seed004<'a> {
    pub(super) fn new(args: &'a Seed004Args) -> Result<Seed004<'a>> {
        if args.threads.is_empty() || args.threads.iter().any(|t| !(1..=1024).contains(t)) {
            bail!("--threads: expected thread counts from 1 to 1024, like 1,2,4");
        }
        let simulated = args.sim.simulated()?.map(|s| (s, HashMap::new()));
        let threads = if args.sim.cpus.is_empty() { args.threads.clone() } else { args.sim.cpus.clone() };
        let layouts = match args.layout.as_deref() {
            Some("separate") => vec![Layout::Separate],
            Some("shared") => vec![Layout::Shared],
            Some(_) => vec![Layout::Processes],
            None => vec![Layout::Separate, Layout::Shared, Layout::Processes],
        };
        let size = args.common.size_or("128M")?;
        Ok(Seed004 { args, size, layouts, machines: HashMap::new(), threads, simulated })
    }

    /// The index of the table of `test` in `layout`, per CPU-second or
    /// (`per_sec`) per second.
    fn table(&self, test: Test, layout: Layout, per_sec: bool) -> usize {
        let t = self.args.tests.iter().position(|&x| x == test).unwrap();
        let l = self.layouts.iter().position(|&x| x == layout).unwrap();
        (t * self.layouts.len() + l) * 2 + per_sec as usize
    }

    /// A machine of design `d` with room for `threads` threads' regions (a
    /// file test holds a thread's file and its private copies at once).
    fn machine(&self, d: VmaLockDesign, threads: usize) -> Result<Arc<Machine>> {
        let memory = 2 * threads as u64 * self.size + (256 << 20);
        let vma_layout = self.args.vma_layout;
        let nodes = self.simulated.as_ref().map_or(1, |(s, _)| s.nodes());
        let config = self.args.common.config(foliomm::Design::MmId);
        super::new_machine(Config { memory, nodes, vma_lock: d, vma_layout, ..config })
    }

    /// The designs, and the host kernel if `host` (beside simulated CPUs
    /// only to validate them, with the designs on threads).
    fn backends(&self, host: bool) -> Vec<Backend> {
        let validate = self.simulated.is_some() && self.args.validate;
        let host = host && (self.simulated.is_none() || validate);
        let threads = DESIGNS.iter().map(|&d| Backend::Threads(d)).filter(|_| validate);
        DESIGNS.iter().map(|&d| Backend::Model(d)).chain(threads).chain(host.then_some(Backend::Host)).collect()
    }
}

/// The row of `threads` threads.
fn row(threads: usize) -> String {
    format!("{threads} threads")
}

impl Benchmark for Seed004<'_> {
    type Config = Key;
    const NAME: &'static str = "vma-lock-scaling";

    /// Not on simulated CPUs alone: simulated time does not depend on a
    /// warm machine (each run gets a fresh one).
    fn warm_up(&self) -> bool {
        self.simulated.is_none() || self.args.validate
    }

    fn settings(&self) -> serde_json::Value {
        let sim = self
            .simulated
            .as_ref()
            .map(|(s, _)| serde_json::json!({ "profile": s.profile, "seed": s.seed, "quantum_ps": s.quantum }));
        serde_json::json!({ "size": self.size, "loops": self.args.loops, "simulated": sim })
    }

    /// Per test and layout, a table of faults per CPU-second and one of
    /// faults per second.
    fn tables(&self) -> Vec<Table> {
        let per = |(test, layout): (Test, Layout)| {
            ["faults per CPU-second", "faults per second"].map(|what| Table {
                name: format!("{test:?}, {layout:?}: {what}"),
                unit: "faults/s".into(),
                higher_is_better: true,
                rows: Vec::new(),
            })
        };
        let pairs = self.args.tests.iter().flat_map(|&t| self.layouts.iter().map(move |&l| (t, l)));
        pairs.flat_map(per).collect()
    }

    /// One group: every configuration interleaved with every other.
    fn plan(&self, host: bool) -> Vec<Vec<Key>> {
        let mut keys = Vec::new();
        for &t in &self.args.tests {
            for &l in &self.layouts {
                for &n in &self.threads {
                    keys.extend(self.backends(host).into_iter().map(|b| (t, l, n, b)));
                }
            }
        }
        vec![keys]
    }

    /// A machine per VMA-lock design, with room for the most threads'
    /// regions (a file test holds a thread's file and its private copies
    /// at once), each warmed with both thread layouts at the most threads:
    /// the first touch of model memory is host faults, and until the free
    /// lists have been churned once, allocations walk memory in order
    /// (faster than ever after).
    ///
    /// On simulated CPUs every measurement gets a fresh machine instead
    /// (its free lists as the last run left them would make the figures
    /// depend on the order of the runs), and nothing is warmed: simulated
    /// time does not see host faults.
    fn prepare(&mut self, _: &[Key], bar: &Progress) -> Result<()> {
        let most = *self.threads.iter().max().unwrap();
        for d in DESIGNS {
            bar.set_message(format!("warming {}", d.name()));
            let m = self.machine(d, most)?;
            for layout in [Layout::Shared, Layout::Separate]
                .into_iter()
                .filter(|_| self.simulated.is_none() || self.args.validate)
            {
                page_fault::model(&m, Test::PageFault1, layout, most, self.size, 1, None)?;
            }
            self.machines.insert(d, m);
        }
        Ok(())
    }

    fn place(&self, &(_, _, threads, b): &Key) -> (String, String) {
        (row(threads), b.name())
    }

    fn label(&self, &(test, layout, threads, b): &Key) -> String {
        format!("{test:?} {layout:?} {threads} threads {}", b.name())
    }

    fn on_host(&self, k: &Key) -> bool {
        k.3 == Backend::Host
    }

    fn measure(&mut self, &(test, layout, threads, b): &Key) -> Result<Measurement> {
        let (size, loops) = (self.size, self.args.loops);
        let simulated = self.simulated.as_mut().map(|(s, rounds)| s.next_round(rounds, (test, layout, threads, b)));
        let samples = match b {
            Backend::Model(d) if simulated.is_some() => {
                let m = self.machine(d, threads)?;
                page_fault::model(&m, test, layout, threads, size, loops, simulated.as_ref())
                    .with_context(|| format!("model, {}: {test:?}, {layout:?}, {threads} simulated CPUs", d.name()))?
            }
            Backend::Model(d) | Backend::Threads(d) => {
                page_fault::model(&self.machines[&d], test, layout, threads, size, loops, None)
                    .with_context(|| format!("model, {}: {test:?}, {layout:?}, {threads} threads", d.name()))?
            }
            Backend::Host => page_fault::host(test, layout, threads, size, loops)?,
        };
        let faults = samples.len() as u64 * loops as u64 * (size / 4096);
        let cpu: f64 = samples.iter().map(|s| s.cpu.as_secs_f64()).sum();
        let wall = samples.iter().map(|s| s.wall.as_secs_f64()).fold(0.0, f64::max);
        let mut transfers = Transfers::default();
        samples.iter().for_each(|s| transfers.add(&s.transfers));
        let per_fault = |n: u64| n as f64 / faults.max(1) as f64;
        let counters = match b {
            // The model's cache-line transfers per fault, by structure, and
            // on simulated CPUs the lock wait (ns) per fault.
            Backend::Model(_) | Backend::Threads(_) => {
                let moved = TRANSFERS.iter().zip(Structure::ALL).map(|(n, s)| (n.clone(), per_fault(transfers.of(s))));
                let waited =
                    WAITS.iter().zip(Structure::ALL).map(|(n, s)| (n.clone(), per_fault(transfers.waited_of(s)) / 1e3));
                moved.chain(waited.filter(|_| simulated.is_some())).collect()
            }
            Backend::Host => Vec::new(),
        };
        let samples = vec![
            (self.table(test, layout, false), faults as f64 / cpu),
            (self.table(test, layout, true), faults as f64 / wall),
        ];
        Ok(Measurement { samples, counters, notes: Vec::new() })
    }

    fn print(&self, run: &SavedRun) {
        // Simulated CPUs are never more than the machine has.
        let cores = match self.simulated {
            Some(_) => usize::MAX,
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        for &test in &self.args.tests {
            for &layout in &self.layouts {
                self.print_scaling(run, (test, layout), cores);
                let what = (test.name(), layout.name());
                let each = "each thread one simulated CPU";
                let title = format!("Cache-line transfers per fault, {}, {} (model; {each})", what.0, what.1);
                self.print_per_fault(run, (test, layout), cores, &title, &TRANSFERS);
                let title = format!("Lock wait per fault (ns), {}, {} (model on simulated CPUs)", what.0, what.1);
                self.print_per_fault(run, (test, layout), cores, &title, &WAITS);
                if self.args.validate {
                    let table = &run.tables[self.table(test, layout, false)];
                    let rows: Vec<_> = self.threads.iter().map(|&n| (n, row(n))).collect();
                    let series = DESIGNS.map(|d| Series {
                        design: d.name().into(),
                        simulated: Backend::Model(d).name(),
                        threads: Backend::Threads(d).name(),
                    });
                    validation::print(table, &rows, &series, &Backend::Host.name());
                }
            }
        }
        print_seed();
    }
}

/// The counters' names: `STRUCTURE_transfers_per_fault`.
static TRANSFERS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| per_structure("transfers_per_fault"));
/// The simulated lock waits' names: `STRUCTURE_wait_ns_per_fault`.
static WAITS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| per_structure("wait_ns_per_fault"));

/// A counter name per structure, `STRUCTURE_what`.
fn per_structure(what: &str) -> Vec<String> {
    Structure::ALL.iter().map(|s| format!("{}_{what}", s.name())).collect()
}

fn hmean(v: &[f64]) -> f64 {
    v.len() as f64 / v.iter().map(|x| 1.0 / x).sum::<f64>()
}

/// `hmean (±spread%)`, or `hmean (+x.xx%)` against `base`: starred (as
/// mmtests does) when the change's interval, 95% for the `family` of the
/// table's changes together, excludes 0, marked `~` when it does not.
fn cell(v: &[f64], base: Option<&[f64]>, family: usize) -> String {
    let h = hmean(v);
    let (lo, hi, _) = super::stats::min_max_mean(v);
    match base {
        None => format!("{h:>10.0} (±{:>4.1}%)", 100.0 * (hi - lo) / h),
        Some(b) => {
            let c = change(b, v, family);
            let (l, r) = if c.significant() { ('*', '*') } else { ('~', ' ') };
            format!("{h:>10.0} {l}{:>+6.2}%{r}", 100.0 * (h / hmean(b) - 1.0))
        }
    }
}

impl Seed004<'_> {
    fn print_scaling(&self, run: &SavedRun, (test, layout): (Test, Layout), cores: usize) {
        let a = self.args;
        println!(
            "\nSeed 004 page-fault scalability, {}, {}: {} MiB per worker, {} loops, harmonic mean of {} interleaved rounds",
            test.name(),
            layout.name(),
            self.size >> 20,
            a.loops,
            run.settings["rounds"]
        );
        // Each design but the base, at each thread count, for both metrics.
        let family = 2 * self.threads.len() * (DESIGNS.len() - 1);
        println!(
            "(the first column is the base, with its spread; the others as % change of the harmonic means, * where the"
        );
        println!(
            " change's interval (Welch's t, 95% for the {family} changes together) excludes 0, ~ where it does not;"
        );
        match self.simulated {
            Some(_) => println!(" simulated CPUs: the same figures on every run for the seed)\n"),
            None => println!(" rows marked ! have more threads than this machine's {cores} CPUs)\n"),
        }
        let backends = self.backends(!a.common.no_host);
        let mut head = format!("{:<22}", "");
        for b in &backends {
            let name = if *b == Backend::Host { "host kernel".to_string() } else { b.name() };
            head += &format!(" | {name:>20}");
        }
        println!("{head}");
        for (metric, per_sec) in [("faults/cpu", false), ("faults/sec", true)] {
            let table = &run.tables[self.table(test, layout, per_sec)];
            for &t in &self.threads {
                let mark = if t > cores { '!' } else { ' ' };
                let mut line = format!("Hmean {metric}-{t:<4}{mark:<3}");
                let get = |b: Backend| table.samples(&row(t), &b.name());
                let base = get(Backend::Model(DESIGNS[0]));
                for &b in &backends {
                    let text = match get(b) {
                        Some(v) if !matches!(b, Backend::Model(d) if d != DESIGNS[0]) => cell(v, None, family),
                        Some(v) => cell(v, base, family),
                        None => "-".to_string(),
                    };
                    line += &format!(" | {text:>20}");
                }
                println!("{line}");
            }
        }
    }

    /// A table of `counters` (one per structure) per thread count and
    /// design, if any row has them.
    fn print_per_fault(
        &self,
        run: &SavedRun,
        (test, layout): (Test, Layout),
        cores: usize,
        title: &str,
        counters: &[String],
    ) {
        let saved = &run.tables[self.table(test, layout, false)];
        let has = |t: usize, d: VmaLockDesign| saved.series(&row(t), d.name()).and_then(|s| s.counter(&counters[0]));
        if !self.threads.iter().any(|&t| DESIGNS.iter().any(|&d| has(t, d).is_some())) {
            return;
        }
        println!("\n{title}:\n");
        let header = ["threads", "design"].into_iter().chain(Structure::ALL.map(|s| s.name())).chain(["total"]);
        let mut table = new_table(header);
        for &t in &self.threads {
            for d in DESIGNS {
                let Some(s) = saved.series(&row(t), d.name()) else { continue };
                let mark = if t > cores { "!" } else { "" };
                let per: Vec<f64> = counters.iter().map(|c| s.counter(c).unwrap_or(0.0)).collect();
                let cells = per.iter().chain([&per.iter().sum()]).map(|v| format!("{v:.4}")).collect::<Vec<_>>();
                table
                    .add_row([format!("{t}{mark}"), d.name().to_string()].into_iter().chain(cells).collect::<Vec<_>>());
            }
        }
        println!("{table}");
    }
}

fn print_seed() {
    println!("\nThe seed's published rows (mmtests, vma-rwsem → vma-refcount, up to 56 CPUs):\n");
    for (metric, pick) in [("faults/cpu", 0), ("faults/sec", 1)] {
        for (cpus, cpu_before, cpu_after, sec_before, sec_after) in SEED_004 {
            let (b, a) = if pick == 0 { (cpu_before, cpu_after) } else { (sec_before, sec_after) };
            println!("Hmean {metric}-{cpus:<3} {b:>14.4} ( 0.00%) {a:>14.4} {:>+7.2}%", 100.0 * (a / b - 1.0));
        }
    }
}
