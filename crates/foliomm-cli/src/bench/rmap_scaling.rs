//! `foliomm bench rmap-scaling`: concurrent rmap writers on the same large
//! folios, per mapcount design, on 1 to 64 simulated CPUs: seed 003's
//! question ("contention on the lock is likely to behave worse than
//! contention on the atomics") and seed 000's atomic seqcount with
//! concurrent writers.
//!
//! Every simulated CPU runs a process of its own, in a loop:
//! - `map`: maps one shmem file of 2M THPs (`MAP_SHARED|MAP_POPULATE`, the
//!   seed-003 measurement's pair) and unmaps it, so that every process adds
//!   and removes PMD mappings of the same folios at once: compound-locked
//!   takes each folio's bit spinlock (`PG_locked` of its second page)
//!   around the update, the other designs update atomics in that page.
//! - `fork`: the processes are children of one parent that wrote an
//!   anonymous 2M THP; each forks a child that exits at once, so that every
//!   fork adds a PMD mapping of the one folio (`copy_huge_pmd`) and every
//!   exit removes one, the rmap-id designs entering the folio's atomic
//!   seqcount each time, mm-id taking its `_mm_ids` bit lock.
//! - `cow`: seed 000's vm-scalability case-anon-cow-seq on one THP: the
//!   processes are children of one parent that wrote an anonymous 2M THP;
//!   each writes the THP's pages in order, one per loop, so that its first
//!   write PTE-maps the THP in its MM and every write copies one page and
//!   removes that page's mapping of the shared folio, all children at once.
//! - `cow-rand`: case-anon-cow-rand the same way: each child writes the
//!   pages in an order of its own (page `(37 * n + 101 * cpu) mod 512` at
//!   its n-th write), so the children copy different pages of the folio.
//!
//! Beside the designs, rmap-id without its exclusive seqcount entry
//! (`all-shared`) and with the entry switched off at run time where
//! atomics are cheap (`all-auto`): under `--sim-profile cheap-atomics`
//! (seed 000's AMD EPYC, whose locked RMWs cost no more than plain stores)
//! `all-auto` runs as `all-shared`, under `two-socket-server` as `all`;
//! under the seed's Q/A alternative, a bit spinlock with an ordinary
//! seqcount (`all-locked`); and with its ideas of leaving out the RMW of a
//! zero sub-ID (`all-skip-zero`) and of giving a contended folio up as
//! "always assumed mapped shared" (`all-give-up`).
//!
//! Figures: pairs (map and unmap, or fork and exit; a COW write) per CPU-second of
//! simulated time, the harmonic mean over rounds (round r runs with the
//! seed plus r), as % change against nr-mapped; then the folio's cache-line
//! transfers and its lock wait per pair. Differs from Linux: the fixed
//! work of a fork and of a fault are the profile's, and the anon_vma and
//! page-cache locks are not simulated lines.

use std::collections::HashMap;

use anyhow::{ensure, Context, Result};
use foliomm::internals::folio::thp::ShmemHuge;
use foliomm::internals::mapcount::RmapIdStage;
use foliomm::internals::sync::cacheline::{Structure, Transfers};
use foliomm::{CompoundLock, Config, Design, MmapFlags, Prot};

use super::new_table;
use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::workers::{run_workers, Loops, SimArgs, SimRounds, Simulated};

#[derive(clap::Args)]
pub(super) struct RmapScalingArgs {
    /// The common options (--size: the shmem file each `map` pair maps,
    /// 2M by default; the benchmark compares designs, so no --mapcount).
    #[command(flatten)]
    pub(super) common: super::CommonArgs,
    /// Pairs each simulated CPU makes per round (1 to 10000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    loops: u32,
    /// The workloads, comma-separated: `map` (shmem THPs, seed 003),
    /// `fork` (an anonymous THP, seed 000), `cow` and `cow-rand` (seed
    /// 000's case-anon-cow-seq and -rand on one THP; --loops up to 512 pages).
    #[arg(long, value_delimiter = ',', default_value = "map,fork,cow,cow-rand")]
    workloads: Vec<Workload>,
    /// Simulated CPUs (required here; default 1,2,4,8,16,32,64).
    #[command(flatten)]
    sim: SimArgs,
}

/// What every simulated CPU's process does in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(super) enum Workload {
    /// munmap(mmap(shmem file of 2M THPs, MAP_SHARED|MAP_POPULATE)).
    Map,
    /// fork() of a process mapping an anonymous 2M THP; the child exits.
    Fork,
    /// A child's write to the next page of the THP it shares with its
    /// parent and the other children: a COW.
    Cow,
    /// A child's write to a page of that THP in an order of its own.
    CowRand,
}

impl Workload {
    fn title(self) -> &'static str {
        match self {
            Workload::Map => "map: munmap(mmap(shmem THPs, MAP_SHARED|MAP_POPULATE)) (seed 003)",
            Workload::Fork => "fork: fork() of a process mapping an anonymous THP, the child exits (seed 000)",
            Workload::Cow => "cow: each child COWs the next page of the THP all share (seed 000's case-anon-cow-seq)",
            Workload::CowRand => {
                "cow-rand: each child COWs the THP's pages in an order of its own (case-anon-cow-rand)"
            }
        }
    }
}

/// A column: a design, for seed 003's how it locks, for seed 000's its
/// stage.
type Column = (Design, CompoundLock, RmapIdStage);

/// The base design first (the atomics seed 003 led to), then the others;
/// seed 003's with its bit spinlock and with the sleeping lock it offered
/// for PREEMPT_RT (not unlocked: that one miscounts, which the checker
/// would report); rmap-id also without its exclusive entry, with it
/// switched by the profile, under the Q/A's bit spinlock, and with four
/// of the seed's ideas (skipping the sums of zero sub-IDs; giving a
/// contended folio up as always shared; two sums to a cache line; the
/// mapcount merged into the seqcount; two sums to a 128-bit atomic; the
/// sub-IDs from a per-CPU copy).
const COLUMNS: [Column; 17] = {
    use {
        CompoundLock::*,
        Design::*,
        RmapIdStage::{
            All, AllAuto, AllGiveUp, AllLocked, AllMerged, AllPacked, AllPercpu, AllShared, AllSkipZero, AllWide,
        },
    };
    [
        (NrMapped, BitSpinlock, All),
        (Subpage, BitSpinlock, All),
        (CompoundLocked, BitSpinlock, All),
        (CompoundLocked, Sleeping, All),
        (LargeMapcount, BitSpinlock, All),
        (RmapId, BitSpinlock, All),
        (RmapId, BitSpinlock, AllShared),
        (RmapId, BitSpinlock, AllAuto),
        (RmapId, BitSpinlock, AllLocked),
        (RmapId, BitSpinlock, AllSkipZero),
        (RmapId, BitSpinlock, AllGiveUp),
        (RmapId, BitSpinlock, AllPacked),
        (RmapId, BitSpinlock, AllMerged),
        (RmapId, BitSpinlock, AllWide),
        (RmapId, BitSpinlock, AllPercpu),
        (RmapIdPowersum, BitSpinlock, All),
        (MmId, BitSpinlock, All),
    ]
};

/// The column's heading: the design's name, `/sleeping` for the sleeping
/// lock, `/STAGE` for a stage other than `all`.
fn name((d, lock, stage): Column) -> String {
    match (lock, stage) {
        (CompoundLock::BitSpinlock, RmapIdStage::All) => d.name().to_string(),
        (CompoundLock::BitSpinlock, _) => format!("{}/{}", d.name(), stage.name()),
        _ => format!("{}/{}", d.name(), lock.name()),
    }
}

const PMD: u64 = 2 << 20;

type Key = (Workload, usize, Column);

/// `bench rmap-scaling` as the runner drives it.
pub(super) struct RmapScaling<'a> {
    args: &'a RmapScalingArgs,
    size: u64,
    cpus: Vec<usize>,
    simulated: SimRounds<Key>,
}

impl<'a> RmapScaling<'a> {
    pub(super) fn new(args: &'a RmapScalingArgs) -> Result<RmapScaling<'a>> {
        args.common.refuse("mapcount", "the benchmark compares every design")?;
        let mut sim = args.sim.clone();
        if sim.cpus.is_empty() {
            sim.cpus = vec![1, 2, 4, 8, 16, 32, 64];
        }
        let simulated = sim.simulated()?.map(|s| (s, HashMap::new()));
        Ok(RmapScaling { args, size: args.common.size_or("2M")?, cpus: sim.cpus, simulated })
    }

    fn table(&self, w: Workload) -> usize {
        self.args.workloads.iter().position(|&x| x == w).expect("a workload of the run")
    }
}

fn row(cpus: usize) -> String {
    format!("{cpus} CPUs")
}

impl Benchmark for RmapScaling<'_> {
    type Config = Key;
    const NAME: &'static str = "rmap-scaling";

    /// Simulated time does not depend on a warm machine.
    fn warm_up(&self) -> bool {
        false
    }

    fn settings(&self) -> serde_json::Value {
        let sim = self.simulated.as_ref().map(|(s, _)| serde_json::json!({ "profile": s.profile, "seed": s.seed }));
        serde_json::json!({ "size": self.size, "loops": self.args.loops, "simulated": sim })
    }

    fn tables(&self) -> Vec<Table> {
        let table = |w: &Workload| Table {
            name: format!("{w:?}: pairs per CPU-second"),
            unit: "pairs/s".into(),
            higher_is_better: true,
            rows: Vec::new(),
        };
        self.args.workloads.iter().map(table).collect()
    }

    fn plan(&self, _host: bool) -> Vec<Vec<Key>> {
        let each = self.args.workloads.iter().flat_map(|&w| self.cpus.iter().map(move |&n| (w, n)));
        vec![each.flat_map(|(w, n)| COLUMNS.map(|c| (w, n, c))).collect()]
    }

    fn place(&self, &(_, cpus, c): &Key) -> (String, String) {
        (row(cpus), name(c))
    }

    fn label(&self, &(w, cpus, c): &Key) -> String {
        format!("{w:?} {cpus} CPUs {}", name(c))
    }

    fn on_host(&self, _: &Key) -> bool {
        false
    }

    fn measure(&mut self, &(w, cpus, c): &Key) -> Result<Measurement> {
        let (sim, rounds) = self.simulated.as_mut().expect("always simulated");
        let sim = sim.next_round(rounds, (w, cpus, c));
        let (rates, transfers) = model(w, cpus, c, self.size, self.args, &sim)
            .with_context(|| format!("model, {}: {w:?} on {cpus} simulated CPUs", name(c)))?;
        let pairs = (cpus as u64 * self.args.loops as u64) as f64;
        let counters = [
            ("folio_transfers_per_pair", transfers.of(Structure::Folio) as f64 / pairs),
            ("folio_wait_ns_per_pair", transfers.waited_of(Structure::Folio) as f64 / pairs / 1e3),
            (
                "wait_ns_per_pair",
                Structure::ALL.map(|s| transfers.waited_of(s)).iter().sum::<u64>() as f64 / pairs / 1e3,
            ),
        ];
        let table = self.table(w);
        Ok(Measurement { samples: rates.into_iter().map(|r| (table, r)).collect(), ..Measurement::default() }
            .counting(counters))
    }

    fn print(&self, run: &SavedRun) {
        for &w in &self.args.workloads {
            print_workload(self, run, w);
        }
    }
}

/// One round of workload `w` on `cpus` simulated CPUs of a new machine of
/// design and compound lock `(d, compound_lock)`: each CPU's pairs per
/// second of its simulated time, and the CPUs' transfers and waits summed.
fn model(
    w: Workload,
    cpus: usize,
    (d, compound_lock, rmap_id_stage): Column,
    size: u64,
    a: &RmapScalingArgs,
    sim: &Simulated,
) -> Result<(Vec<f64>, Transfers)> {
    let memory = (cpus as u64 + 2) * (size + 4 * PMD) + (256 << 20);
    let nodes = sim.nodes();
    let m = super::new_machine(Config { memory, nodes, compound_lock, rmap_id_stage, ..a.common.config(d) })?;
    let shared = MmapFlags { shared: true, populate: true, ..MmapFlags::default() };
    let samples = match w {
        Workload::Map => {
            m.thp.set_shmem_enabled(ShmemHuge::Always);
            let f = m.memfd_create(size)?;
            // One pair fills the file with THPs before the clock starts.
            let mm = m.new_mm()?;
            let at = mm.mmap_file(0, size, Prot::RW, shared, Some((&f, 0)))?;
            ensure!(mm.page_info(at).pmd_mapped, "model: the file is not PMD-mapped");
            mm.munmap(at, size)?;
            run_workers(cpus, Loops::Each(a.loops), Some(sim), |_| {
                let (f, mm) = (f.clone(), m.new_mm().expect("a process's MM"));
                (mm, move |mm: &mut std::sync::Arc<foliomm::Mm>| {
                    let at = mm.mmap_file(0, size, Prot::RW, shared, Some((&f, 0)))?;
                    Ok(mm.munmap(at, size)?)
                })
            })?
        }
        Workload::Fork => {
            let (parent, at, _) = super::model_populate(&m, &mut m.new_cpu(), PMD, 9)?;
            ensure!(parent.page_info(at).pmd_mapped, "model: the THP is not PMD-mapped");
            let children: Vec<_> = (0..cpus).map(|_| parent.fork()).collect::<Result<_, _>>()?;
            run_workers(cpus, Loops::Each(a.loops), Some(sim), |i| {
                (children[i].clone(), |mm: &mut std::sync::Arc<foliomm::Mm>| {
                    mm.fork()?.exit();
                    Ok(())
                })
            })?
        }
        Workload::Cow | Workload::CowRand => {
            let (parent, at, _) = super::model_populate(&m, &mut m.new_cpu(), PMD, 9)?;
            ensure!(parent.page_info(at).pmd_mapped, "model: the THP is not PMD-mapped");
            let children: Vec<_> = (0..cpus).map(|_| parent.fork()).collect::<Result<_, _>>()?;
            let (step, offset) = if w == Workload::Cow { (1, 0) } else { (37, 101) };
            run_workers(cpus, Loops::Each(a.loops), Some(sim), |i| {
                let (mut cpu, mut n) = (m.new_cpu(), 0u64);
                (children[i].clone(), move |mm: &mut std::sync::Arc<foliomm::Mm>| {
                    let page = (step * n + offset * i as u64) % 512;
                    cpu.write(mm, at + page * 4096, &[0x33])?;
                    n += 1;
                    Ok(())
                })
            })?
        }
    };
    let violations = m.check();
    ensure!(violations.is_empty(), "model: the checker found {violations:?}");
    let mut transfers = Transfers::default();
    samples.iter().for_each(|s| transfers.add(&s.transfers));
    let rates = samples.iter().map(|s| a.loops as f64 / s.cpu.as_secs_f64()).collect();
    Ok((rates, transfers))
}

fn hmean(v: &[f64]) -> f64 {
    v.len() as f64 / v.iter().map(|x| 1.0 / x).sum::<f64>()
}

/// The workload's table: a row per CPU count, a column per design (the
/// base's pairs per CPU-second with the spread over its rounds, the
/// others as % change), then the folio's transfers and wait per pair.
fn print_workload(b: &RmapScaling, run: &SavedRun, w: Workload) {
    let table = &run.tables[b.table(w)];
    println!(
        "\n{}\n{} pairs per simulated CPU per round; Hmean pairs/cpu-sec over the rounds\n",
        w.title(),
        b.args.loops
    );
    let headings = COLUMNS.map(name);
    let mut t = new_table(["CPUs"].into_iter().chain(headings.iter().map(String::as_str)));
    for &n in &b.cpus {
        let base = table.samples(&row(n), &headings[0]).map(hmean);
        let cells = headings.each_ref().map(|h| match (table.samples(&row(n), h).map(hmean), base) {
            (Some(v), Some(b)) if *h != headings[0] => format!("{:+.1}%", 100.0 * (v / b - 1.0)),
            (Some(v), _) => {
                let s = table.samples(&row(n), h).unwrap_or_default();
                let (lo, hi) = s.iter().fold((f64::MAX, 0.0f64), |(l, h), &x| (l.min(x), h.max(x)));
                format!("{v:.0} (±{:.1}%)", 100.0 * (hi - lo) / v)
            }
            (None, _) => "-".into(),
        });
        t.add_row([n.to_string()].into_iter().chain(cells).collect::<Vec<_>>());
    }
    println!("{t}");
    for (what, counter) in [
        ("Folio cache-line transfers per pair", "folio_transfers_per_pair"),
        ("Folio lock wait per pair (ns)", "folio_wait_ns_per_pair"),
        ("All lock wait per pair (ns)", "wait_ns_per_pair"),
    ] {
        println!("\n{what}:\n");
        let mut t = new_table(["CPUs"].into_iter().chain(headings.iter().map(String::as_str)));
        for &n in &b.cpus {
            let cell = |h: &String| {
                let v = table.series(&row(n), h).and_then(|s| s.counter(counter));
                v.map_or("-".into(), |v| format!("{v:.2}"))
            };
            t.add_row([n.to_string()].into_iter().chain(headings.iter().map(cell)).collect::<Vec<_>>());
        }
        println!("{t}");
    }
}
