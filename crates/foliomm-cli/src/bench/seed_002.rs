//! `foliomm bench seed-002`: seed 002's two programs over a shared hugetlb
//! area, for the three hugetlb synchronization designs and the host kernel.
//!
//! The faulting program maps the area (`MAP_SHARED` of one hugetlbfs file
//! that every instance maps), write-faults every huge page and unmaps it,
//! in a loop: faults per second. The forking program maps the area,
//! write-faults a few pages, forks, and the child exits: forks per second.
//! Each runs with 1 and N instances (processes), then half the instances
//! fork while half fault. The seed ran 24 instances on 48 CPUs over 250 GB;
//! the area here is `--size` (1 GiB: one PMD table to share), and the
//! instance counts `--instances`.
//!
//! The file's pages are faulted in once, untimed, before each round, as
//! the seed's programs ran long enough for that not to count. Every
//! configuration runs once per round and the rounds interleave them; min,
//! max and avg are over every instance of every round. The model's
//! cache-line transfers per operation show which lines the instances fight
//! over (`i_mmap_rwsem`, the hugetlb VMA lock, the fault mutexes).

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use foliomm::internals::machine::{HugeSize, HugetlbSync};
use foliomm::internals::shmem::Inode;
use foliomm::internals::sync::cacheline::{self, Structure, Transfers};
use foliomm::{Config, Design, Machine, MmapFlags, Prot};
use foliomm_host::sys::{fork_child_that_exits, memfd, Map, Workers};

use super::page_fault::run_threads;
use super::progress;
use super::published::SEED_002;
use super::saved::{Row, SavedRun, Series, Table};
use super::stats::change;

/// The 2 MiB huge pages the benchmark uses.
const HPAGE: u64 = 1 << 21;

#[derive(clap::Args)]
pub(super) struct Seed002Args {
    /// The common options (--size: the shared hugetlb area, a multiple of
    /// 1G so that PMD tables can be shared, 1G by default; the seed's was
    /// 250G).
    #[command(flatten)]
    common: super::CommonArgs,
    /// Instance counts (processes), comma-separated; the combined run uses
    /// the largest, half forking and half faulting.
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u16).range(1..=1024))]
    instances: Vec<u16>,
    /// Loops each instance makes per round (1 to 10000).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    loops: u32,
    /// Huge pages the forking program write-faults before each fork (0 to
    /// 1024, and at most the area's).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(..=1024))]
    touched: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
enum Program {
    Fork,
    Fault,
}

/// Who runs the programs: a model design, or the host kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
enum Runner {
    Model(#[serde(serialize_with = "design_name")] HugetlbSync),
    Host,
}

fn design_name<S: serde::Serializer>(d: &HugetlbSync, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

/// The rates (operations per second) of every instance of one
/// configuration over every round, and the model's transfers per operation.
#[derive(serde::Serialize)]
struct Figures {
    runner: Runner,
    /// The programs the instances ran, one per instance.
    programs: Vec<Program>,
    /// Per program: every instance's rate in every round.
    rates: Vec<(Program, Vec<f64>)>,
    /// Per structure: line transfers per operation (model only).
    transfers: Vec<(&'static str, f64)>,
}

pub(super) fn run(a: &Seed002Args) -> Result<()> {
    let size = a.common.size_or("1G")?;
    ensure!(size.is_multiple_of(1 << 30), "--size: expected a multiple of 1G, found {} MiB", size >> 20);
    let max = a.instances.iter().copied().max().unwrap_or(1).max(2);
    let mut configs: Vec<Vec<Program>> = Vec::new();
    for p in [Program::Fork, Program::Fault] {
        configs.extend(a.instances.iter().map(|&n| vec![p; n as usize]));
    }
    configs.push((0..max).map(|i| if i % 2 == 0 { Program::Fork } else { Program::Fault }).collect());
    let mut runners: Vec<Runner> = HugetlbSync::ALL.iter().map(|&(d, _)| Runner::Model(d)).collect();
    if !a.common.no_host {
        runners.push(Runner::Host);
    }
    let mut figs: Vec<Figures> = Vec::new();
    for &runner in &runners {
        for programs in &configs {
            let rates = [Program::Fork, Program::Fault].map(|p| (p, Vec::new())).to_vec();
            figs.push(Figures { runner, programs: programs.clone(), rates, transfers: Vec::new() });
        }
    }
    let rounds = a.common.runs_or(5);
    let bar = progress((rounds as u64 + 1) * figs.len() as u64);
    let mut host_note = None;
    // A warm-up round first, not kept.
    for round in 0..=rounds {
        for f in figs.iter_mut() {
            bar.set_message(format!(
                "{} {} instances, round {round}/{rounds}",
                runner_name(f.runner),
                f.programs.len()
            ));
            let (rates, transfers) = match f.runner {
                Runner::Model(d) => model(d, &f.programs, size, a)?,
                Runner::Host if host_note.is_some() => (Vec::new(), Transfers::default()),
                Runner::Host => host(&f.programs, size, a).unwrap_or_else(|e| {
                    host_note = Some(format!("{e:#}"));
                    (Vec::new(), Transfers::default())
                }),
            };
            if round == 0 {
                bar.inc(1);
                continue;
            }
            for (p, r) in rates {
                f.rates.iter_mut().find(|(q, _)| *q == p).unwrap().1.push(r);
            }
            let ops = f.rates.iter().map(|(_, r)| r.len()).sum::<usize>().max(1) as f64;
            f.transfers = Structure::ALL.iter().map(|&s| (s.name(), transfers.of(s) as f64 / ops)).collect();
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let mut settings = a.common.settings();
    settings["size"] = size.into();
    settings["rounds"] = rounds.into();
    settings["instances"] = serde_json::json!(a.instances);
    let notes = host_note.iter().cloned().collect();
    if a.common.out.emit(|| SavedRun { notes, ..saved(&figs, settings) })? {
        return Ok(());
    }
    print_tables(&figs, size, max as usize, host_note);
    Ok(())
}

/// One round of `programs` (an instance each) on a new model machine.
fn model(
    design: HugetlbSync,
    programs: &[Program],
    size: u64,
    a: &Seed002Args,
) -> Result<(Vec<(Program, f64)>, Transfers)> {
    let config = Config { memory: size + (256 << 20), hugetlb_sync: design, ..a.common.config(Design::MmId) };
    let m = Machine::new(config)?;
    let pages = size / HPAGE;
    ensure!(m.kernel.set_nr_hugepages(HugeSize::Pmd, pages) == pages, "the model's memory holds no {pages} huge pages");
    let file = m.hugetlbfs_create(size, HugeSize::Pmd)?;
    // The file's pages exist before the clock starts, as in the seed's
    // long runs (one untimed faulting loop).
    model_loop(&m.new_mm()?, &file, &mut m.new_cpu(), Program::Fault, size, 0)?;
    cacheline::forget();
    let samples = run_threads(programs.len(), a.loops, |i| {
        cacheline::account_as(i as u32 + 1);
        let (file, program) = (file.clone(), programs[i]);
        let mm = m.new_mm().expect("an instance's MM");
        (m.new_cpu(), move |cpu: &mut foliomm::Cpu| model_loop(&mm, &file, cpu, program, size, a.touched))
    })?;
    let violations = m.check();
    ensure!(violations.is_empty(), "model: the checker found {violations:?}");
    let mut transfers = Transfers::default();
    let rates = samples
        .iter()
        .zip(programs)
        .map(|(s, &p)| {
            transfers.add(&s.transfers);
            let ops = a.loops as f64 * if p == Program::Fault { (size / HPAGE) as f64 } else { 1.0 };
            (p, ops / s.wall.as_secs_f64())
        })
        .collect();
    Ok((rates, transfers))
}

/// One loop of `program` by the MM `mm`: map the area at a 1 GiB boundary,
/// fault it all (or `touched` pages and fork), unmap.
fn model_loop(
    mm: &Arc<foliomm::Mm>,
    file: &Arc<Inode>,
    cpu: &mut foliomm::Cpu,
    program: Program,
    size: u64,
    touched: u64,
) -> Result<()> {
    let flags = MmapFlags { shared: true, ..MmapFlags::default() };
    let a = mm.mmap_file(1 << 30, size, Prot::RW, flags, Some((file, 0)))?;
    let faulted = if program == Program::Fault { size } else { touched * HPAGE };
    for page in (a..a + faulted).step_by(HPAGE as usize) {
        cpu.write_byte_per_page(mm, page, 1, 1)?;
    }
    if program == Program::Fork {
        mm.fork()?.exit();
    }
    mm.munmap(a, size)?;
    Ok(())
}

/// One round of `programs` on the host: a hugetlbfs memfd every instance
/// maps, the pool set to hold it (and restored), an instance per process.
fn host(programs: &[Program], size: u64, a: &Seed002Args) -> Result<(Vec<(Program, f64)>, Transfers)> {
    use foliomm_host::sysfs;
    sysfs::set(&sysfs::hugetlb_path(HugeSize::Pmd, "nr_hugepages"), &(size / HPAGE).to_string())
        .map_err(anyhow::Error::msg)?;
    let r = host_round(programs, size, a);
    sysfs::restore_all();
    Ok((r?, Transfers::default()))
}

fn host_round(programs: &[Program], size: u64, a: &Seed002Args) -> Result<Vec<(Program, f64)>> {
    let fd = memfd(c"foliomm-seed-002", size, true).context("memfd_create(MFD_HUGETLB)")?;
    let map = Map::file(Some((fd.as_fd(), 0))).shared(true).near(1 << 30);
    // The file's pages exist before the clock starts (one untimed loop).
    ensure!(host_loop(map, Program::Fault, size, 0), "host: cannot fault the hugetlbfs file in");
    let mut workers = Workers::fork(programs.len(), |i| {
        let p = programs[i];
        let t = Instant::now();
        let ok = (0..a.loops).all(|_| host_loop(map, p, size, a.touched));
        let ops = a.loops as f64 * if p == Program::Fault { (size / HPAGE) as f64 } else { 1.0 };
        [if ok { ops / t.elapsed().as_secs_f64() } else { -1.0 }.to_bits()]
    })
    .context("host fork")?;
    workers.start()?;
    // The reports come in any order; each names its instance.
    let reports = workers.reports().context("host")?;
    reports
        .into_iter()
        .map(|(i, [rate])| {
            let rate = f64::from_bits(rate);
            ensure!(rate > 0.0, "host: an instance failed");
            Ok((programs[i], rate))
        })
        .collect()
}

/// The host side of [`model_loop`]; false if a system call failed.
fn host_loop(map: Map, program: Program, size: u64, touched: u64) -> bool {
    let Ok(m) = map.map(size as usize) else { return false };
    let faulted = if program == Program::Fault { size } else { touched * HPAGE };
    m.write_every(0..faulted as usize, HPAGE as usize, 1);
    (program != Program::Fork || fork_child_that_exits().is_ok()) && m.unmap().is_ok()
}

/// The seed's tables for each runner, then the combined numbers beside the
/// seed's, then the model's transfers per operation in the combined run.
/// `model, DESIGN` or `host kernel`.
fn runner_name(r: Runner) -> String {
    match r {
        Runner::Model(d) => format!("model, {}", d.name()),
        Runner::Host => "host kernel".to_string(),
    }
}

/// The run as a saved run: one table of rates (every instance's, every
/// round), a row per program and instance count, a series per design and
/// the host.
fn saved(figs: &[Figures], settings: serde_json::Value) -> SavedRun {
    let mut rows: Vec<Row> = Vec::new();
    for f in figs {
        let mixed = f.programs.iter().any(|&p| p != f.programs[0]);
        for (p, samples) in f.rates.iter().filter(|(_, r)| !r.is_empty()) {
            let what = if *p == Program::Fork { "forks/s" } else { "faults/s" };
            let label = format!("{}{} x{}", if mixed { "combined: " } else { "" }, what, f.programs.len());
            // Cache-line transfers per operation (the model's, deterministic).
            let counters = f.transfers.iter().map(|(s, v)| (format!("{s}_transfers_per_op"), *v)).collect();
            let series = Series { name: runner_name(f.runner), samples: samples.clone(), counters };
            match rows.iter_mut().find(|r| r.label == label) {
                Some(r) => r.series.push(series),
                None => rows.push(Row { label, series: vec![series], published: Vec::new() }),
            }
        }
    }
    let table = Table {
        name: "hugetlb fault and fork rates per instance".into(),
        unit: "ops/s".into(),
        higher_is_better: true,
        rows,
    };
    SavedRun::new("seed-002", settings, vec![table])
}

/// The combined run's change of each design against `i-mmap-rwsem` (the
/// seed's baseline), with its interval, beside the seed's change.
fn print_changes<'a>(rates: &dyn Fn(Runner, Program) -> Option<&'a [f64]>) {
    let base = Runner::Model(HugetlbSync::IMmapRwsem);
    let others = [HugetlbSync::NoLock, HugetlbSync::VmaLock];
    println!("\nChange against i-mmap-rwsem, combined run (Welch's t, 95% for the 4 changes together; '~': noise):");
    for (i, (label, p)) in [("forks", Program::Fork), ("faults", Program::Fault)].into_iter().enumerate() {
        let cells: Vec<String> = others
            .iter()
            .map(|&d| {
                let seed = |name: &str| SEED_002.iter().find(|(n, _)| *n == name).map_or(f64::NAN, |(_, v)| v[4 + i]);
                let seed_pct = 100.0 * (seed(d.name()) / seed("i-mmap-rwsem") - 1.0);
                let model = match (rates(base, p), rates(Runner::Model(d), p)) {
                    (Some(a), Some(b)) => change(a, b, 4).to_string(),
                    _ => "-".into(),
                };
                format!("{} {model} (seed {seed_pct:+.0}%)", d.name())
            })
            .collect();
        println!("{label:7} | {}", cells.join(" | "));
    }
}

fn print_tables(figs: &[Figures], size: u64, combined: usize, host_note: Option<String>) {
    let stats = |v: &[f64]| {
        let avg = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        (min, v.iter().copied().fold(0.0, f64::max), avg)
    };
    let name = runner_name;
    println!("\nSeed 002: shared hugetlb area of {} MiB, instances as processes\n", size >> 20);
    let mut current = None;
    for f in figs.iter().filter(|f| f.rates.iter().any(|(_, r)| !r.is_empty())) {
        if current != Some(f.runner) {
            current = Some(f.runner);
            println!("{}\n{}", name(f.runner), "=".repeat(name(f.runner).len()));
        }
        let mixed = f.programs.iter().any(|&p| p != f.programs[0]);
        let title = match (mixed, f.programs[0]) {
            (true, _) => "combine forking and faulting",
            (false, Program::Fork) => "fork program (forks per second)",
            (false, Program::Fault) => "faulting program (faults per second)",
        };
        let seed = match f.runner {
            Runner::Model(d) => SEED_002.iter().find(|(n, _)| *n == d.name()).map(|(_, v)| v),
            Runner::Host => None,
        };
        let seed_note = match (seed, mixed, f.programs[0]) {
            (Some(v), false, Program::Fork) => format!("   (seed: 1: {:.0}, 24: {:.0})", v[0], v[1]),
            (Some(v), false, Program::Fault) => format!("   (seed: 1: {:.0}, 24: {:.0})", v[2], v[3]),
            (Some(v), true, _) => format!("   (seed, 24 + 24: {:.0} forks, {:.0} faults)", v[4], v[5]),
            (None, ..) => String::new(),
        };
        println!("{title}{seed_note}\ninstances min max avg");
        for (p, r) in f.rates.iter().filter(|(_, r)| !r.is_empty()) {
            let (min, max, avg) = stats(r);
            let n = f.programs.iter().filter(|&&q| q == *p).count();
            let label = if mixed {
                format!(" ({})", if *p == Program::Fork { "forks" } else { "faults" })
            } else {
                String::new()
            };
            println!("{n} {min:.1} {max:.1} {avg:.1}{label}");
        }
        println!();
    }
    // Every instance's rate in every round of the combined run.
    let combined_rates = |runner: Runner, p: Program| {
        figs.iter()
            .find(|f| {
                f.runner == runner && f.programs.len() == combined && f.programs.iter().any(|&q| q != f.programs[0])
            })
            .and_then(|f| f.rates.iter().find(|(q, _)| *q == p))
            .map(|(_, r)| r.as_slice())
            .filter(|r| !r.is_empty())
    };
    let combined_avg = |runner: Runner, p: Program| {
        combined_rates(runner, p).map_or("-".to_string(), |r| format!("{:.0}", stats(r).2))
    };
    println!("Just looking at the combined numbers ({combined} instances; the seed: 24 instances on 48 CPUs):");
    println!(
        "{:7} | {:>12} {:>9} {:>9} {:>9} | seed: {:>12} {:>10} {:>11}",
        "", "i-mmap-rwsem", "no-lock", "vma-lock", "host", "i_mmap_rwsem", "No locking", "vma locking"
    );
    for (i, label) in ["forks", "faults"].into_iter().enumerate() {
        let p = if i == 0 { Program::Fork } else { Program::Fault };
        let seed: Vec<f64> = SEED_002.iter().map(|(_, v)| v[4 + i]).collect();
        let cols: Vec<String> = [
            Runner::Model(HugetlbSync::IMmapRwsem),
            Runner::Model(HugetlbSync::NoLock),
            Runner::Model(HugetlbSync::VmaLock),
            Runner::Host,
        ]
        .iter()
        .map(|&r| combined_avg(r, p))
        .collect();
        println!(
            "{label:7} | {:>12} {:>9} {:>9} {:>9} | seed: {:>12.0} {:>10.0} {:>11.0}",
            cols[0], cols[1], cols[2], cols[3], seed[0], seed[1], seed[2]
        );
    }
    print_changes(&|r, p| combined_rates(r, p));
    println!("\nModel: cache-line transfers per operation in the combined run:");
    for f in figs.iter().filter(|f| {
        matches!(f.runner, Runner::Model(_))
            && f.programs.len() == combined
            && f.programs.iter().any(|&q| q != f.programs[0])
    }) {
        let shown: Vec<String> =
            f.transfers.iter().filter(|(_, v)| *v >= 0.005).map(|(n, v)| format!("{n} {v:.2}")).collect();
        println!("  {:24} {}", name(f.runner), shown.join(", "));
    }
    if let Some(n) = host_note {
        println!("host kernel skipped: {n}");
    }
}
