//! `foliomm bench seed-004`: page-fault scalability of the three VMA-lock
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

use super::page_fault::{self, Layout, Sample, Test};
use super::published::SEED_004;
use super::saved::{Row, SavedRun, Series, Table};
use super::stats::change;
use super::{new_table, progress};

#[derive(clap::Args)]
pub(super) struct Seed004Args {
    /// The common options (--size: the region each thread faults, 128M by
    /// default; the report draws a line over thread count per design).
    #[command(flatten)]
    common: super::CommonArgs,
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
}

/// Who serves the faults: a model design, or the host kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Backend {
    Model(VmaLockDesign),
    Host,
}

impl Backend {
    fn name(self) -> String {
        match self {
            Backend::Model(d) => d.name().to_string(),
            Backend::Host => "host".to_string(),
        }
    }
}

/// The baseline design first (the seed's "before"), then the others.
const DESIGNS: [VmaLockDesign; 3] = [VmaLockDesign::VmaRwsem, VmaLockDesign::MmapLock, VmaLockDesign::VmaRefcount];

/// What the rounds of one configuration measured.
#[derive(Default, serde::Serialize)]
struct Figures {
    /// Per round: faults per CPU-second, and per wall-second.
    per_cpu: Vec<f64>,
    per_sec: Vec<f64>,
    faults: u64,
    #[serde(skip)]
    transfers: Transfers,
}

type Key = (Test, Layout, usize, Backend);

pub(super) fn run(a: &Seed004Args) -> Result<()> {
    let size = a.common.size_or("128M")?;
    if a.threads.is_empty() || a.threads.iter().any(|t| !(1..=1024).contains(t)) {
        bail!("--threads: expected thread counts from 1 to 1024, like 1,2,4");
    }
    let layouts: Vec<Layout> = match a.layout.as_deref() {
        Some("separate") => vec![Layout::Separate],
        Some("shared") => vec![Layout::Shared],
        Some(_) => vec![Layout::Processes],
        None => vec![Layout::Separate, Layout::Shared, Layout::Processes],
    };
    let most = *a.threads.iter().max().unwrap();
    let mut backends: Vec<Backend> = DESIGNS.iter().map(|&d| Backend::Model(d)).collect();
    if !a.common.no_host {
        backends.push(Backend::Host);
    }
    let machines = machines(a, most, size)?;
    let configs = a.tests.len() * layouts.len() * a.threads.len() * backends.len();
    let runs = a.common.runs_or(3);
    let steps = ((runs as usize + 1) * configs + DESIGNS.len()) as u64;
    let bar = progress(steps);
    warm(&machines, most, size, &bar)?;
    let mut figures: HashMap<Key, Figures> = HashMap::new();
    let mut host_note = None;
    let keys: Vec<Key> = a
        .tests
        .iter()
        .flat_map(|&t| layouts.iter().map(move |&l| (t, l)))
        .flat_map(|(t, l)| a.threads.iter().map(move |&n| (t, l, n)))
        .flat_map(|(t, l, n)| backends.iter().map(move |&b| (t, l, n, b)))
        .collect();
    // A warm-up round (0) first, not kept, as every benchmark's.
    for round in 0..=runs {
        for &(test, layout, threads, b) in &keys {
            let which = if round == 0 { "warm-up".to_string() } else { format!("round {round}/{runs}") };
            bar.set_message(format!("{which} {test:?} {layout:?} {threads} threads {}", b.name()));
            bar.inc(1);
            let samples = match b {
                Backend::Model(d) => page_fault::model(&machines[&d], test, layout, threads, size, a.loops)
                    .with_context(|| format!("model, {}: {test:?}, {layout:?}, {threads} threads", d.name()))?,
                Backend::Host if host_note.is_some() => continue,
                Backend::Host => match page_fault::host(test, layout, threads, size, a.loops) {
                    Ok(s) => s,
                    Err(e) => {
                        host_note = Some(format!("host kernel skipped: {e:#}"));
                        continue;
                    }
                },
            };
            if round > 0 {
                record(figures.entry((test, layout, threads, b)).or_default(), &samples, size, a.loops);
            }
        }
    }
    bar.finish_and_clear();
    let mut settings = a.common.settings();
    for (k, v) in [("size", size), ("loops", a.loops as u64), ("rounds", runs as u64)] {
        settings[k] = v.into();
    }
    let notes = host_note.iter().cloned().collect();
    if a.common.out.emit(|| SavedRun { notes, ..saved(&figures, a, &layouts, &backends, settings) })? {
        return Ok(());
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for &test in &a.tests {
        for &layout in &layouts {
            print_scaling(&figures, (test, layout), &a.threads, &backends, cores, size, a);
            print_transfers(&figures, (test, layout), &a.threads, cores);
        }
    }
    print_seed();
    if let Some(n) = host_note {
        println!("\n{n}");
    }
    Ok(())
}

/// A machine per VMA-lock design, with room for `most` threads' regions of
/// `size` (a file test holds a thread's file and its private copies at once).
fn machines(a: &Seed004Args, most: usize, size: u64) -> Result<HashMap<VmaLockDesign, Arc<Machine>>> {
    DESIGNS
        .iter()
        .map(|&d| {
            let memory = 2 * most as u64 * size + (256 << 20);
            Ok((d, Machine::new(Config { memory, vma_lock: d, ..a.common.config(foliomm::Design::MmId) })?))
        })
        .collect()
}

/// Warms each machine with both layouts at the most threads: the first
/// touch of model memory is host faults, and until the free lists have
/// been churned once, allocations walk memory in order (faster than ever
/// after).
fn warm(
    machines: &HashMap<VmaLockDesign, Arc<Machine>>,
    most: usize,
    size: u64,
    bar: &super::progress::Progress,
) -> Result<()> {
    for (d, m) in machines {
        bar.set_message(format!("warming {}", d.name()));
        for layout in [Layout::Shared, Layout::Separate] {
            page_fault::model(m, Test::PageFault1, layout, most, size, 1)?;
        }
        bar.inc(1);
    }
    Ok(())
}

/// The run as a saved run: per test and layout, a table of faults per
/// CPU-second and one of faults per second, a row per thread count, a
/// series per design and the host.
fn saved(
    figures: &HashMap<Key, Figures>,
    a: &Seed004Args,
    layouts: &[Layout],
    backends: &[Backend],
    settings: serde_json::Value,
) -> SavedRun {
    let mut tables = Vec::new();
    for &test in &a.tests {
        for &layout in layouts {
            for (what, per_cpu) in [("faults per CPU-second", true), ("faults per second", false)] {
                let rows = a
                    .threads
                    .iter()
                    .map(|&n| Row {
                        label: format!("{n} threads"),
                        series: backends
                            .iter()
                            .filter_map(|&b| figures.get(&(test, layout, n, b)).map(|f| (b, f)))
                            .map(|(b, f)| Series {
                                name: b.name(),
                                samples: if per_cpu { f.per_cpu.clone() } else { f.per_sec.clone() },
                                counters: transfers_per_fault(b, f),
                            })
                            .collect(),
                        published: Vec::new(),
                    })
                    .collect();
                let name = format!("{test:?}, {layout:?}: {what}");
                tables.push(Table { name, unit: "faults/s".into(), higher_is_better: true, rows });
            }
        }
    }
    SavedRun::new("seed-004", settings, tables)
}

/// The model's cache-line transfers per fault, by structure (none for the
/// host kernel, which the model cannot count).
fn transfers_per_fault(b: Backend, f: &Figures) -> Vec<(String, f64)> {
    if b == Backend::Host {
        return Vec::new();
    }
    let per_fault = |s: Structure| f.transfers.of(s) as f64 / f.faults.max(1) as f64;
    Structure::ALL.iter().map(|&s| (format!("{}_transfers_per_fault", s.name()), per_fault(s))).collect()
}

/// Adds one round's samples to `f`.
fn record(f: &mut Figures, samples: &[Sample], size: u64, loops: u32) {
    let faults = samples.len() as u64 * loops as u64 * (size / 4096);
    let cpu: f64 = samples.iter().map(|s| s.cpu.as_secs_f64()).sum();
    let wall = samples.iter().map(|s| s.wall.as_secs_f64()).fold(0.0, f64::max);
    f.per_cpu.push(faults as f64 / cpu);
    f.per_sec.push(faults as f64 / wall);
    f.faults += faults;
    for s in samples {
        f.transfers.add(&s.transfers);
    }
}

fn hmean(v: &[f64]) -> f64 {
    v.len() as f64 / v.iter().map(|x| 1.0 / x).sum::<f64>()
}

fn range(v: &[f64]) -> (f64, f64) {
    (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(0.0, f64::max))
}

/// `hmean (±spread%)`, or `hmean (+x.xx%)` against `base`: starred (as
/// mmtests does) when the change's interval, 95% for the `family` of the
/// table's changes together, excludes 0, marked `~` when it does not.
fn cell(v: &[f64], base: Option<&[f64]>, family: usize) -> String {
    let h = hmean(v);
    let (lo, hi) = range(v);
    match base {
        None => format!("{h:>10.0} (±{:>4.1}%)", 100.0 * (hi - lo) / h),
        Some(b) => {
            let c = change(b, v, family);
            let (l, r) = if c.significant() { ('*', '*') } else { ('~', ' ') };
            format!("{h:>10.0} {l}{:>+6.2}%{r}", 100.0 * (h / hmean(b) - 1.0))
        }
    }
}

fn print_scaling(
    figures: &HashMap<Key, Figures>,
    (test, layout): (Test, Layout),
    threads: &[usize],
    backends: &[Backend],
    cores: usize,
    size: u64,
    a: &Seed004Args,
) {
    println!(
        "\nSeed 004 page-fault scalability, {}, {}: {} MiB per worker, {} loops, harmonic mean of {} interleaved rounds",
        test.name(),
        layout.name(),
        size >> 20,
        a.loops,
        a.common.runs_or(3)
    );
    // Each design but the base, at each thread count, for both metrics.
    let family = 2 * threads.len() * (DESIGNS.len() - 1);
    println!(
        "(the first column is the base, with its spread; the others as % change of the harmonic means, * where the"
    );
    println!(" change's interval (Welch's t, 95% for the {family} changes together) excludes 0, ~ where it does not;");
    println!(" rows marked ! have more threads than this machine's {cores} CPUs)\n");
    let mut head = format!("{:<22}", "");
    for b in backends {
        let name = if *b == Backend::Host { "host kernel".to_string() } else { b.name() };
        head += &format!(" | {name:>20}");
    }
    println!("{head}");
    for (metric, pick) in [("faults/cpu", 0), ("faults/sec", 1)] {
        for &t in threads {
            let mark = if t > cores { '!' } else { ' ' };
            let mut line = format!("Hmean {metric}-{t:<4}{mark:<3}");
            let get = |b: Backend| {
                figures.get(&(test, layout, t, b)).map(|f| if pick == 0 { &f.per_cpu } else { &f.per_sec })
            };
            let base = get(Backend::Model(DESIGNS[0]));
            for &b in backends {
                let text = match get(b) {
                    Some(v) if b == Backend::Model(DESIGNS[0]) || b == Backend::Host => cell(v, None, family),
                    Some(v) => cell(v, base.map(|v| v.as_slice()), family),
                    None => "-".to_string(),
                };
                line += &format!(" | {text:>20}");
            }
            println!("{line}");
        }
    }
}

fn print_transfers(figures: &HashMap<Key, Figures>, (test, layout): (Test, Layout), threads: &[usize], cores: usize) {
    println!(
        "\nCache-line transfers per fault, {}, {} (model; each thread one simulated CPU):\n",
        test.name(),
        layout.name()
    );
    let header = ["threads", "design"].into_iter().chain(Structure::ALL.map(|s| s.name())).chain(["total"]);
    let mut table = new_table(header);
    for &t in threads {
        for d in DESIGNS {
            let Some(f) = figures.get(&(test, layout, t, Backend::Model(d))) else { continue };
            let mark = if t > cores { "!" } else { "" };
            let per = |n: u64| format!("{:.4}", n as f64 / f.faults as f64);
            let cells = Structure::ALL.iter().map(|&s| per(f.transfers.of(s)));
            let total = per(f.transfers.transfers.iter().sum());
            table.add_row(
                [format!("{t}{mark}"), d.name().to_string()]
                    .into_iter()
                    .chain(cells)
                    .chain([total])
                    .collect::<Vec<_>>(),
            );
        }
    }
    println!("{table}");
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
