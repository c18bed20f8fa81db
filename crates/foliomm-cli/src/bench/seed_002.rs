//! `foliomm bench hugetlb-pmd-share`: seed 002's two programs over a shared hugetlb
//! area, for the three hugetlb synchronization designs and the host kernel.
//!
//! The faulting program maps the area (`MAP_SHARED` of one hugetlbfs file
//! that every instance maps), write-faults every huge page and unmaps it,
//! in a loop: faults per second. The forking program maps the area,
//! write-faults a few pages, forks, and the child exits: forks per second.
//! Each runs with 1 and N instances (processes), then half the instances
//! fork while half fault. The seed ran 24 instances on 48 CPUs over 250 GB;
//! the area here is `--size` (1 GiB: one PMD table to share), and the
//! instance counts `--instances`; `--apart` keeps instances from sharing.
//!
//! The file's pages are faulted in once, untimed, before each round, as
//! the seed's programs ran long enough for that not to count; for the
//! same reason the faulting instances start at spread points of the area
//! (`first_skip`), so that their unmaps do not all fall together. Every
//! configuration runs once per round and the rounds interleave them; min,
//! max and avg are over every instance of every round. The model's
//! cache-line transfers per operation show which lines the instances fight
//! over (`i_mmap_rwsem`, the hugetlb VMA lock, the fault mutexes).

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{ensure, Result};
use foliomm::internals::machine::{HugeSize, HugetlbSync};
use foliomm::internals::shmem::Inode;
use foliomm::internals::sync::cacheline::{self, Structure, Transfers};
use foliomm::{Config, Design, MmapFlags, Prot};

use super::published::SEED_002;
use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::seed_002_programs::{area_at, first_skip, host, Program, Round, HPAGE};
use super::stats::{change, min_max_mean};
use super::workers::{run_workers, Loops, SimArgs, SimRounds, Simulated};

#[derive(clap::Args)]
pub(super) struct Seed002Args {
    /// The common options (--size: the shared hugetlb area, a multiple of
    /// 1G so that PMD tables can be shared, 1G by default; the seed's was
    /// 250G).
    #[command(flatten)]
    pub(super) common: super::CommonArgs,
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
    /// Map each instance's area 2 MiB x (its number mod 511, + 1) past the
    /// 1 GiB boundary, as mmap(NULL)'s randomized placement puts unrelated
    /// processes, so that no two of up to 511 instances share PMD tables
    /// (a fork's child gets no hugetlb entries: fork copies none since
    /// 6.0's lazy copies); without it every instance maps at the boundary
    /// and they all share.
    #[arg(long)]
    apart: bool,
    /// Make the pool's pages with HugeTLB Vmemmap Optimization on
    /// (`vm.hugetlb_optimize_vmemmap=1`, HVO), in the model and on the
    /// host: each 2 MiB page keeps one page of its memmap, so the model's
    /// host memory for a --size of hundreds of GiB drops by 3.5 GiB per
    /// 256 GiB.
    #[arg(long)]
    hvo: bool,
    /// Simulated CPUs, an instance each (`--sim-cpus` replaces
    /// `--instances`; no host kernel beside them).
    #[command(flatten)]
    sim: SimArgs,
}

/// Who runs the programs: a model design, or the host kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub(super) enum Runner {
    Model(#[serde(serialize_with = "design_name")] HugetlbSync),
    Host,
}

fn design_name<S: serde::Serializer>(d: &HugetlbSync, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(d.name())
}

/// `bench hugetlb-pmd-share` as the runner drives it.
pub(super) struct Seed002<'a> {
    args: &'a Seed002Args,
    size: u64,
    /// The instance sets: the programs of the instances that run at once.
    sets: Vec<Vec<Program>>,
    /// Simulated CPUs, and the rounds each configuration has run.
    simulated: SimRounds<(Runner, usize)>,
}

impl<'a> Seed002<'a> {
    pub(super) fn new(args: &'a Seed002Args) -> Result<Seed002<'a>> {
        let size = args.common.size_or("1G")?;
        ensure!(size.is_multiple_of(1 << 30), "--size: expected a multiple of 1G, found {} MiB", size >> 20);
        let simulated = args.sim.simulated()?.map(|s| (s, HashMap::new()));
        let instances: Vec<usize> = match simulated {
            Some(_) => args.sim.cpus.clone(),
            None => args.instances.iter().map(|&n| n as usize).collect(),
        };
        let mut sets: Vec<Vec<Program>> = Vec::new();
        for p in [Program::Fork, Program::Fault] {
            sets.extend(instances.iter().map(|&n| vec![p; n]));
        }
        let most = instances.iter().copied().max().unwrap_or(1).max(2);
        sets.push((0..most).map(|i| if i % 2 == 0 { Program::Fork } else { Program::Fault }).collect());
        Ok(Seed002 { args, size, sets, simulated })
    }

    /// The row of instance set `i`: `fork x2`, `combined x2`.
    fn row(&self, i: usize) -> String {
        let set = &self.sets[i];
        let what = if mixed(set) { "combined" } else { set[0].name() };
        format!("{what} x{}", set.len())
    }

    /// The combined run's set.
    fn combined(&self) -> usize {
        self.sets.len() - 1
    }
}

/// Whether `set` runs both programs.
fn mixed(set: &[Program]) -> bool {
    set.iter().any(|&p| p != set[0])
}

impl Benchmark for Seed002<'_> {
    /// A runner and an instance set.
    type Config = (Runner, usize);
    const NAME: &'static str = "hugetlb-pmd-share";

    /// Not on simulated CPUs: simulated time does not depend on a warm
    /// machine.
    fn warm_up(&self) -> bool {
        self.simulated.is_none()
    }
    const RUNS: u32 = 5;

    fn settings(&self) -> serde_json::Value {
        let a = self.args;
        serde_json::json!({ "size": self.size, "instances": a.instances, "loops": a.loops, "touched": a.touched, "apart": a.apart })
    }

    /// Per program, every instance's rate in every round: a row per
    /// instance set, a series per design and the host.
    fn tables(&self) -> Vec<Table> {
        ["hugetlb forks per second per instance", "hugetlb faults per second per instance"]
            .map(|name| Table { name: name.into(), unit: "ops/s".into(), higher_is_better: true, rows: Vec::new() })
            .into()
    }

    /// One group: every configuration interleaved with every other.
    fn plan(&self, host: bool) -> Vec<Vec<(Runner, usize)>> {
        let host = host && self.simulated.is_none();
        let runners = HugetlbSync::ALL.iter().map(|&(d, _)| Runner::Model(d)).chain(host.then_some(Runner::Host));
        vec![runners.flat_map(|r| (0..self.sets.len()).map(move |i| (r, i))).collect()]
    }

    fn place(&self, &(runner, i): &(Runner, usize)) -> (String, String) {
        (self.row(i), runner_name(runner))
    }

    fn on_host(&self, c: &(Runner, usize)) -> bool {
        c.0 == Runner::Host
    }

    fn measure(&mut self, &(runner, i): &(Runner, usize)) -> Result<Measurement> {
        let (programs, size, a) = (&self.sets[i], self.size, self.args);
        let simulated = self.simulated.as_mut().map(|(s, rounds)| s.next_round(rounds, (runner, i)));
        let Round { rates, transfers, ops } = match runner {
            Runner::Model(d) => model(d, programs, size, a, simulated.as_ref())?,
            Runner::Host => host(programs, size, (a.loops, a.touched, a.apart), a.hvo)?,
        };
        let samples = rates.iter().map(|&(p, r)| (p.table(), r)).collect();
        let counters = match runner {
            Runner::Model(_) => {
                let moved =
                    Structure::ALL.map(|s| (format!("{}_transfers_per_op", s.name()), transfers.of(s) as f64 / ops));
                let waited = Structure::ALL
                    .map(|s| (format!("{}_wait_ns_per_op", s.name()), transfers.waited_of(s) as f64 / ops / 1e3));
                moved.into_iter().chain(waited.into_iter().filter(|_| simulated.is_some())).collect()
            }
            Runner::Host => Vec::new(),
        };
        Ok(Measurement { samples, counters, notes: Vec::new() })
    }

    fn print(&self, run: &SavedRun) {
        print_tables(self, run);
    }
}

/// One round of `programs` (an instance each) on a new model machine, on
/// threads or on simulated CPUs.
fn model(
    design: HugetlbSync,
    programs: &[Program],
    size: u64,
    a: &Seed002Args,
    simulated: Option<&Simulated>,
) -> Result<Round> {
    let nodes = simulated.map_or(1, Simulated::nodes);
    let config = Config { memory: size + (256 << 20), nodes, hugetlb_sync: design, ..a.common.config(Design::MmId) };
    let m = super::new_machine(config)?;
    let pages = size / HPAGE;
    m.kernel.set_hugetlb_optimize_vmemmap(a.hvo);
    ensure!(m.kernel.set_nr_hugepages(HugeSize::Pmd, pages) == pages, "the model's memory holds no {pages} huge pages");
    let file = m.hugetlbfs_create(size, HugeSize::Pmd)?;
    // The file's pages exist before the clock starts (one untimed loop).
    model_loop(&m.new_mm()?, &file, &mut m.new_cpu(), Program::Fault, (area_at(false, 0), size), 0, None)?;
    // Each instance's MM, a faulting one's area mapped and partly faulted
    // (first_skip), before the clock starts.
    let instances = (0..programs.len())
        .map(|i| {
            let (mm, skip) = (m.new_mm()?, first_skip(programs, i, size));
            let started = (skip > 0)
                .then(|| start_midway(&mm, &file, &mut m.new_cpu(), (area_at(a.apart, i), size), skip))
                .transpose()?;
            Ok((mm, started))
        })
        .collect::<Result<Vec<_>>>()?;
    cacheline::forget();
    // Side by side throughout: a fault loop takes many fork loops.
    let samples = run_workers(programs.len(), Loops::Overlapping(a.loops), simulated, |i| {
        cacheline::account_as(i as u32 + 1);
        let (file, program, (mm, mut started)) = (file.clone(), programs[i], instances[i].clone());
        let at = area_at(a.apart, i);
        let step =
            move |cpu: &mut foliomm::Cpu| model_loop(&mm, &file, cpu, program, (at, size), a.touched, started.take());
        (m.new_cpu(), step)
    })?;
    let violations = m.check();
    ensure!(violations.is_empty(), "model: the checker found {violations:?}");
    let (mut transfers, mut all_ops) = (Transfers::default(), 0.0);
    let rates = samples
        .iter()
        .zip(programs)
        .enumerate()
        .map(|(i, (s, &p))| {
            transfers.add(&s.transfers);
            let ops = p.ops(s.loops, size, first_skip(programs, i, size));
            all_ops += ops;
            (p, ops / s.wall.as_secs_f64())
        })
        .collect();
    Ok(Round { rates, transfers, ops: all_ops })
}

/// One loop of `program` by the MM `mm`: map the area of `size` at `at`,
/// fault it all (or `touched` pages and fork), unmap. `started`: the area
/// was mapped at this address and faulted up to this huge page already
/// ([`start_midway`]).
fn model_loop(
    mm: &Arc<foliomm::Mm>,
    file: &Arc<Inode>,
    cpu: &mut foliomm::Cpu,
    program: Program,
    (at, size): (u64, u64),
    touched: u64,
    started: Option<(u64, u64)>,
) -> Result<()> {
    let (a, from) = match started {
        Some(s) => s,
        None => (mm.mmap_file(at, size, Prot::RW, shared(), Some((file, 0)))?, 0),
    };
    let faulted = if program == Program::Fault { size } else { touched * HPAGE };
    fault_pages(mm, cpu, a + from * HPAGE..a + faulted)?;
    if program == Program::Fork {
        mm.fork()?.exit();
    }
    mm.munmap(a, size)?;
    Ok(())
}

/// A faulting instance `skip` huge pages into its first loop: the area of
/// `size` mapped at `at` and faulted that far; its address and `skip`.
fn start_midway(
    mm: &Arc<foliomm::Mm>,
    file: &Arc<Inode>,
    cpu: &mut foliomm::Cpu,
    (at, size): (u64, u64),
    skip: u64,
) -> Result<(u64, u64)> {
    let a = mm.mmap_file(at, size, Prot::RW, shared(), Some((file, 0)))?;
    fault_pages(mm, cpu, a..a + skip * HPAGE)?;
    Ok((a, skip))
}

/// The programs' mappings' flags: `MAP_SHARED` (of the hugetlbfs file).
fn shared() -> MmapFlags {
    MmapFlags { shared: true, ..MmapFlags::default() }
}

/// Write-faults every huge page of `range` (a byte each).
fn fault_pages(mm: &Arc<foliomm::Mm>, cpu: &mut foliomm::Cpu, range: std::ops::Range<u64>) -> Result<()> {
    for page in range.step_by(HPAGE as usize) {
        cpu.write_byte_per_page(mm, page, 1, 1)?;
    }
    Ok(())
}

/// `model, DESIGN` or `host kernel`.
pub(super) fn runner_name(r: Runner) -> String {
    match r {
        Runner::Model(d) => format!("model, {}", d.name()),
        Runner::Host => "host kernel".to_string(),
    }
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

/// The seed's tables for each runner (min, max and mean per instance
/// set), then the combined numbers beside the seed's, the changes, and the
/// model's transfers per operation in the combined run.
fn print_tables(b: &Seed002, run: &SavedRun) {
    println!("\nSeed 002: shared hugetlb area of {} MiB, instances as processes\n", b.size >> 20);
    // Every instance's rate of program `p`, in every round, of set `i`.
    let rates = |runner: Runner, i: usize, p: Program| {
        run.tables[p.table()].samples(&b.row(i), &runner_name(runner)).filter(|r| !r.is_empty())
    };
    for (runner, _) in b.plan(true).concat().into_iter().filter(|&(_, i)| i == 0) {
        let sets = (0..b.sets.len())
            .filter(|&i| [Program::Fork, Program::Fault].iter().any(|&p| rates(runner, i, p).is_some()));
        let sets: Vec<usize> = sets.collect();
        if sets.is_empty() {
            continue;
        }
        println!("{}\n{}", runner_name(runner), "=".repeat(runner_name(runner).len()));
        for i in sets {
            print_set(b, runner, i, &rates);
        }
    }
    let combined = b.combined();
    let most = b.sets[combined].len();
    let combined_avg = |runner: Runner, p: Program| {
        rates(runner, combined, p).map_or("-".to_string(), |r| format!("{:.0}", min_max_mean(r).2))
    };
    println!("Just looking at the combined numbers ({most} instances; the seed: 24 instances on 48 CPUs):");
    println!(
        "{:7} | {:>12} {:>9} {:>9} {:>9} | seed: {:>12} {:>10} {:>11}",
        "", "i-mmap-rwsem", "no-lock", "vma-lock", "host", "i_mmap_rwsem", "No locking", "vma locking"
    );
    for (i, (label, p)) in [("forks", Program::Fork), ("faults", Program::Fault)].into_iter().enumerate() {
        let seed: Vec<f64> = SEED_002.iter().map(|(_, v)| v[4 + i]).collect();
        let runners = [HugetlbSync::IMmapRwsem, HugetlbSync::NoLock, HugetlbSync::VmaLock].map(Runner::Model);
        let cols: Vec<String> = runners.iter().chain(&[Runner::Host]).map(|&r| combined_avg(r, p)).collect();
        println!(
            "{label:7} | {:>12} {:>9} {:>9} {:>9} | seed: {:>12.0} {:>10.0} {:>11.0}",
            cols[0], cols[1], cols[2], cols[3], seed[0], seed[1], seed[2]
        );
    }
    print_changes(&|r, p| rates(r, combined, p));
    // Lock waits are simulated time: none on threads.
    let waits = b.simulated.as_ref().map(|_| ("lock wait (ns, simulated)", "_wait_ns_per_op"));
    for (what, suffix) in std::iter::once(("cache-line transfers", "_transfers_per_op")).chain(waits) {
        println!("\nModel: {what} per operation in the combined run:");
        for (d, _) in HugetlbSync::ALL {
            let Some(s) = run.tables[0].series(&b.row(combined), &runner_name(Runner::Model(d))) else { continue };
            let shown: Vec<String> = s
                .counters
                .iter()
                .filter(|(n, v)| n.ends_with(suffix) && *v >= 0.0005)
                .map(|(n, v)| format!("{} {v:.3}", n.trim_end_matches(suffix)))
                .collect();
            println!("  {:24} {}", runner_name(Runner::Model(d)), shown.join(", "));
        }
    }
}

/// One instance set's table under `runner`: a line per program, with the
/// seed's figures in the title.
fn print_set<'a>(b: &Seed002, runner: Runner, i: usize, rates: &dyn Fn(Runner, usize, Program) -> Option<&'a [f64]>) {
    let set = &b.sets[i];
    let title = match (mixed(set), set[0]) {
        (true, _) => "combine forking and faulting",
        (false, Program::Fork) => "fork program (forks per second)",
        (false, Program::Fault) => "faulting program (faults per second)",
    };
    let seed = match runner {
        Runner::Model(d) => SEED_002.iter().find(|(n, _)| *n == d.name()).map(|(_, v)| v),
        Runner::Host => None,
    };
    let seed_note = match (seed, mixed(set), set[0]) {
        (Some(v), false, Program::Fork) => format!("   (seed: 1: {:.0}, 24: {:.0})", v[0], v[1]),
        (Some(v), false, Program::Fault) => format!("   (seed: 1: {:.0}, 24: {:.0})", v[2], v[3]),
        (Some(v), true, _) => format!("   (seed, 24 + 24: {:.0} forks, {:.0} faults)", v[4], v[5]),
        (None, ..) => String::new(),
    };
    println!("{title}{seed_note}\ninstances min max avg");
    for p in [Program::Fork, Program::Fault] {
        let Some(r) = rates(runner, i, p) else { continue };
        let (min, max, avg) = min_max_mean(r);
        let n = set.iter().filter(|&&q| q == p).count();
        let label = if mixed(set) { format!(" ({}s)", p.name()) } else { String::new() };
        println!("{n} {min:.1} {max:.1} {avg:.1}{label}");
    }
    println!();
}
