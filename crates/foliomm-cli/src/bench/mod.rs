//! `foliomm bench`: fixed workloads timed on the model and, where permitted,
//! on the host kernel in the same run; reported as times and ratios, with a
//! seed's published figures beside where the workload comes from a seed.
//!
//! One file per benchmark, the seeds' figures in `published`; here the
//! arguments, the dispatch and the harness the benchmarks share.

mod compare_runs;
mod explain;
mod fault;
mod page_fault;
mod pmd_sharing;
mod progress;
mod published;
mod report;
mod rmap_scaling;
mod runner;
mod saved;
mod scale;
mod seed_000;
mod seed_000_host;
mod seed_000_results;
mod seed_000_tables;
mod seed_001;
mod seed_002;
mod seed_002_programs;
mod seed_003;
mod seed_004;
mod seed_004_validation;
mod shared_decisions;
mod stats;
mod tlb;
mod usemem;
mod workers;
mod zap_tradeoffs;

pub use seed_002_programs::{program_main as seed_002_program, PROGRAM_ARG as SEED_002_PROGRAM};

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use foliomm::internals::folio::thp::ThpMode;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Cpu, Design, Machine, Mm, MmapFlags, Prot};

pub use compare_runs::{run as compare_runs, CompareRunsArgs};
pub use report::{run as report, ReportArgs};

#[derive(clap::Args)]
#[command(subcommand_value_name = "BENCHMARK", subcommand_help_heading = "Benchmarks")]
pub struct BenchArgs {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(clap::Subcommand)]
enum Bench {
    /// Fault and munmap with 4K pages, 64K mTHP and 2M THP, model against host kernel
    ///
    /// memset is timed beside as the zeroing baseline.
    Fault(CommonArgs),
    /// munmap of PTE-mapped folios of each size, zap per-page and batched (seed 001)
    ///
    /// munmap of a region populated with PTE-mapped folios of each size,
    /// zap strategies per-page and batched, host kernel beside: the table
    /// of David Hildenbrand's "mm/memory: optimize unmap/zap with PTE-mapped
    /// THP" (v1, January 2024). Alias: seed-001.
    #[command(name = "zap-batching", alias = "seed-001")]
    Seed001(seed_001::Seed001Args),
    /// Faulting and writing a region with and without the software TLB
    Tlb(CommonArgs),
    /// Seed 000's micro benchmarks and vm-scalability cases, per mapcount design
    ///
    /// The 8 micro benchmarks of David Hildenbrand's "mm: precise \"mapped
    /// shared\" vs. \"mapped exclusively\" detection for PTE-mapped THP /
    /// partially-mappable folios" (WIP v1, November 2023) on PTE-mapped 2M THP
    /// and 64K mTHP, for every mapcount design, as % change against
    /// nr-mapped, with the seed's published rows beside; then its two
    /// vm-scalability cases as % change in throughput. Alias: seed-000.
    #[command(name = "mapped-shared", alias = "seed-000")]
    Seed000(Seed000Args),
    /// Page-fault scalability of the three VMA-lock designs (seed 004)
    ///
    /// will-it-scale page_fault1 in thread mode (a VMA per thread) and a
    /// contended variant (one VMA for all threads), for each thread count
    /// and VMA-lock design, as faults per CPU-second and per second with
    /// the host kernel beside; then the cache-line transfers per fault the
    /// model counts, by structure, and the seed's published rows: Suren
    /// Baghdasaryan's "reimplement per-vma lock as a refcount" (v9, January 2025).
    /// Alias: seed-004.
    #[command(name = "vma-lock-scaling", alias = "seed-004")]
    Seed004(seed_004::Seed004Args),
    /// munmap(mmap(2G, MAP_SHARED|MAP_POPULATE, memfd)) per mapcount design (seed 003)
    ///
    /// With 4K pages and with 2M shmem folios, with the file already
    /// PMD-mapped, or already PTE-mapped, elsewhere, and with 2M folios
    /// mapped by PTEs (4 KiB off a PMD boundary); under subpage,
    /// compound-locked, nr-mapped and mm-id; with the rmap cost per pair,
    /// the seed's figures and the host kernel beside: Hugh Dickins'
    /// measurement in "mm,thp,rmap: lock_compound_mapcounts() on THP
    /// mapcounts" (November 2022). Alias: seed-003.
    #[command(name = "shmem-rmap", alias = "seed-003")]
    Seed003(seed_003::Seed003Args),
    /// hugetlb fault and fork scalability of the PMD-sharing synchronization designs (seed 002)
    ///
    /// The seed's two programs over one shared hugetlb area: the faulting
    /// one (map, write-fault every page, unmap: faults per second) and the
    /// forking one (map, write-fault a few pages, fork, the child exits:
    /// forks per second), with 1 and N instances and combined, under
    /// i-mmap-rwsem, vma-lock and no-lock, with the host kernel, the
    /// seed's combined numbers and the model's cache-line transfers beside:
    /// Mike Kravetz's "hugetlb: Change huge pmd sharing synchronization
    /// again" (RFC v4, July 2022). Alias: seed-002.
    #[command(name = "hugetlb-pmd-share", alias = "seed-002")]
    Seed002(seed_002::Seed002Args),
    /// vm-scalability's usemem on private hugetlb memory, per hugetlb design and the host (seed 002)
    ///
    /// N processes each fault private hugetlb memory in before the clock
    /// (`usemem -n N --prealloc --prefault -O -U SIZE`) and write it
    /// through once: KB/s per process under i-mmap-rwsem, vma-lock and
    /// no-lock and on the host kernel, beside the seed's three runs of 48
    /// processes, where no timed fault means no difference: the run Mike
    /// Kravetz's "hugetlb: Change huge pmd sharing synchronization again"
    /// (RFC v4, July 2022) opens with.
    #[command(name = "usemem")]
    Usemem(usemem::UsememArgs),
    /// Concurrent rmap writers on the same folios per mapcount design, 1 to 64 simulated CPUs (seeds 003, 000)
    ///
    /// Every simulated CPU's process maps and unmaps one shmem file of 2M
    /// THPs (`map`), or forks a child that exits while mapping one
    /// anonymous THP they all share (`fork`): pairs per CPU-second as %
    /// change against nr-mapped (compound-locked's bit spinlock against
    /// the atomics; rmap-id's atomic seqcount), with the folio's
    /// cache-line transfers and lock wait per pair.
    #[command(name = "rmap-scaling")]
    RmapScaling(rmap_scaling::RmapScalingArgs),
    /// Page-table memory hugetlb PMD sharing saves per forked child (seed 002)
    ///
    /// A parent maps 1 GiB VMAs of one hugetlbfs file at 1 GiB boundaries
    /// (shareable) or 2 MiB past them (unshareable); children write a page
    /// of each; the page-table memory gained per child, model (live table
    /// frames) and host (/proc/meminfo PageTables).
    #[command(name = "pmd-sharing")]
    PmdSharing(pmd_sharing::PmdSharingArgs),
    /// How often each mapcount design decides "mapped shared?" wrongly, per consumer
    ///
    /// A fixed suite of workloads (scenarios/decisions/) on the model under
    /// every design; per consumer (COW reuse, MADV_PAGEOUT/COLD and their
    /// splits) the decisions made, the wrong "shared" answers (work missed)
    /// and the wrong "exclusive" ones. Counts: the same on every run.
    #[command(name = "shared-decisions")]
    SharedDecisions(shared_decisions::SharedDecisionsArgs),
    /// The model's time and host memory per process, VMA, GiB written and thread
    ///
    /// One parent forked 1 to 10,000 times; one process with 1,000 to
    /// 1,000,000 VMAs; 256M up to --max-ram written a byte per page; 1 to 8
    /// threads faulting at once. Each point runs in a process of its own,
    /// so its peak resident memory is its own; flat time and memory per
    /// unit along an axis is linear growth.
    Scale(scale::ScaleArgs),
}

/// The options every benchmark takes, with the same meaning everywhere; a
/// benchmark that has no use for one says so when it is given.
#[derive(clap::Args)]
struct CommonArgs {
    /// Region size, a multiple of 2M up to 512G, like 256M or 1G
    /// [default: the benchmark's].
    #[arg(long)]
    size: Option<String>,
    /// Rounds, each running every configuration once, after a warm-up
    /// round (2 to 1000); the tables show means [default: the benchmark's].
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=1000))]
    runs: Option<u32>,
    /// Skip the host kernel.
    #[arg(long)]
    no_host: bool,
    /// Mapcount design of the model's machines [default: the benchmark's;
    /// mm-id, the host kernel's, where the benchmark compares no designs].
    #[arg(long, value_enum)]
    mapcount: Option<Design>,
    /// Linux release (6.1 to 6.18) the model's machines follow where
    /// releases differ [default: each design's].
    #[arg(long)]
    kernel: Option<foliomm::KernelVersion>,
    /// How the model's frames keep their bytes: dense keeps every written
    /// frame's 4 KiB, so a fault's zeroing and a COW's copy take their real
    /// time, as in the kernels the seeds measured; sparse stores frames by
    /// content class (`set frames`), for machines larger than this host.
    #[arg(long, value_enum, default_value = "dense")]
    frames: Frames,
    #[command(flatten)]
    out: saved::OutputArgs,
}

/// `--frames`.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Frames {
    Sparse,
    Dense,
}

impl CommonArgs {
    /// `--size`, or `default`, in bytes.
    fn size_or(&self, default: &str) -> Result<u64> {
        region_size(self.size.as_deref().unwrap_or(default))
    }

    /// `--runs`, or `default`.
    fn runs_or(&self, default: u32) -> u32 {
        self.runs.unwrap_or(default)
    }

    /// A machine configuration of `design` (unless `--mapcount` says
    /// otherwise) following `--kernel`.
    fn config(&self, design: Design) -> Config {
        let dense_frames = self.frames == Frames::Dense;
        Config { mapcount: self.mapcount.unwrap_or(design), kernel: self.kernel, dense_frames, ..Config::default() }
    }

    /// An error if `flag` (`size`, `runs` or `mapcount`) was given to a
    /// benchmark that cannot take it; `why` says why.
    fn refuse(&self, flag: &str, why: &str) -> Result<()> {
        let given = match flag {
            "size" => self.size.is_some(),
            "runs" => self.runs.is_some(),
            _ => self.mapcount.is_some(),
        };
        if given {
            bail!("--{flag}: {why}");
        }
        Ok(())
    }

    /// The common settings in force, for a saved run.
    fn settings(&self) -> serde_json::Value {
        serde_json::json!({
            "no_host": self.no_host,
            "mapcount": self.mapcount.map(|d| d.name()),
            "kernel": self.kernel.map(|v| v.to_string()),
            "frames": if self.frames == Frames::Dense { "dense" } else { "sparse" },
        })
    }
}

#[derive(clap::Args)]
struct Seed000Args {
    #[command(flatten)]
    common: CommonArgs,
    /// The vm-scalability cases: how many children COW at once, each on its
    /// own thread [default: one per CPU, as the seed ran them].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    instances: Option<u16>,
    /// One row per code stage of the seed's series instead of per design:
    /// nr-mapped as the v6.7 baseline, then the rmap-id design at each
    /// stage from mapcount to all (`set rmap_id_stage`), with the seed's
    /// Intel and AMD rows beside each; zap and fork go PTE by PTE, as on
    /// the seed's v6.7 (`set zap per-page`).
    #[arg(long)]
    stages: bool,
}

/// The largest `--size`: half the largest model RAM, so that the region
/// and what the benchmark needs beside it fit a model machine.
const MAX_REGION: u64 = *foliomm::internals::machine::MEMORY_RANGE.end() / 2;

/// A `--size` argument in bytes: a multiple of 2M up to [`MAX_REGION`].
fn region_size(arg: &str) -> Result<u64> {
    let size = foliomm_scenario::lang::parse_size(arg).filter(|s| s % (2 << 20) == 0 && (1..=MAX_REGION).contains(s));
    let Some(size) = size else {
        bail!("--size: expected a multiple of 2M from 2M to 512G, like 128M or 1G, found '{arg}'")
    };
    Ok(size)
}

pub fn run(a: BenchArgs) -> Result<()> {
    match &a.bench {
        Bench::Fault(c) => runner::run(&mut fault::Fault::new(c)?, c),
        Bench::Seed001(s) => runner::run(&mut seed_001::Seed001::new(s)?, &s.common),
        Bench::Seed000(s) => runner::run(&mut seed_000::Seed000::new(s)?, &s.common),
        Bench::Tlb(c) => runner::run(&mut tlb::Tlb::new(c)?, c),
        Bench::Seed004(s) => runner::run(&mut seed_004::Seed004::new(s)?, &s.common),
        Bench::Seed003(s) => runner::run(&mut seed_003::Seed003::new(s)?, &s.common),
        Bench::Seed002(s) => runner::run(&mut seed_002::Seed002::new(s)?, &s.common),
        Bench::Usemem(s) => runner::run(&mut usemem::Usemem::new(s)?, &s.common),
        Bench::RmapScaling(s) => runner::run(&mut rmap_scaling::RmapScaling::new(s)?, &s.common),
        Bench::PmdSharing(s) => runner::run(&mut pmd_sharing::PmdSharing::new(s)?, &s.common),
        Bench::SharedDecisions(s) => shared_decisions::run_bench(s),
        Bench::Scale(s) => scale::run(s),
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// A terminal table in the seeds' style (pipes, a rule under the header),
/// every column but the first right-aligned.
pub(crate) fn new_table<T: Into<comfy_table::Cell>>(header: impl IntoIterator<Item = T>) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::ASCII_MARKDOWN).set_header(header);
    for c in t.column_iter_mut().skip(1) {
        c.set_cell_alignment(comfy_table::CellAlignment::Right);
    }
    t
}

/// The model memory a machine for one region has beyond the region.
const ROOM: u64 = 256 << 20;

/// A machine for one region of `size` with room to spare.
fn machine_for(size: u64, config: Config) -> Result<Arc<Machine>> {
    new_machine(Config { memory: size + ROOM, ..config })
}

/// [`machine_for`], backed by host memory before anything is timed when
/// its frames are dense (a warm arena, as the host kernel's RAM and memmap
/// are), for benches that time the model's own work against the host's.
fn warm_machine_for(size: u64, config: Config) -> Result<Arc<Machine>> {
    let (dense, mib) = (config.dense_frames, (size + ROOM) >> 20);
    let m = machine_for(size, config)?;
    if dense {
        m.phys
            .populate()
            .with_context(|| format!("backing the {mib} MiB of a dense model machine with host memory"))?;
    }
    Ok(m)
}

/// A model machine of `config`; with dense frames, one that could need
/// more host memory than is available (its frames and, 2% more, its
/// per-frame arrays) is refused with a clear error instead of running the
/// host out of memory.
fn new_machine(config: Config) -> Result<Arc<Machine>> {
    let available = foliomm_host::procfs::meminfo("MemAvailable");
    if config.dense_frames && config.memory + config.memory / 50 > available {
        bail!(
            "a model machine of {} MiB with dense frames can need as much host memory, and this host has {} MiB \
             available: pass --frames sparse (frames by content class) or a smaller --size",
            config.memory >> 20,
            available >> 20
        );
    }
    Ok(Machine::new(config)?)
}

/// Maps `size` bytes in a new MM of `m` so that write faults use folios of
/// `order` (PMD order through MADV_HUGEPAGE), and faults every page in with
/// one write each. Returns the MM, the address and the fault time.
fn model_populate(m: &Arc<Machine>, cpu: &mut Cpu, size: u64, order: u32) -> Result<(Arc<Mm>, u64, Duration)> {
    for o in foliomm::internals::folio::thp::anon_orders().filter(|&o| o != 9) {
        m.thp.set_order(o, if o == order { ThpMode::Always } else { ThpMode::Never })?;
    }
    let mm = m.new_mm()?;
    // 2 MiB-aligned, as the host's region is: eras before 6.7 do not
    // align anonymous mappings themselves.
    const PMD: u64 = 2 << 20;
    let raw = mm.mmap(0, size + PMD, Prot::RW, MmapFlags::default())?;
    let a = raw.next_multiple_of(PMD);
    for (start, end) in [(raw, a), (a + size, raw + size + PMD)].into_iter().filter(|(s, e)| s < e) {
        mm.munmap(start, end - start)?;
    }
    match order {
        9 => mm.madvise(a, size, Advice::HugePage)?,
        0 => mm.madvise(a, size, Advice::NoHugePage)?,
        _ => {}
    }
    let t = Instant::now();
    cpu.write_byte_per_page(&mm, a, size, 1)?;
    let fault = t.elapsed();
    let got = mm.page_info(a).folio_order;
    if got != order {
        bail!("model: expected folios of order {order}, got {got}");
    }
    Ok((mm, a, fault))
}

/// Splits every PMD mapping of `[a, a+size)` into PTEs by an mprotect round
/// trip on the first page of each 2 MiB, as the host side does.
fn model_split_pmds(mm: &Mm, a: u64, size: u64) -> Result<()> {
    for off in (0..size).step_by(2 << 20) {
        mm.mprotect(a + off, 4096, Prot(Prot::READ))?;
        mm.mprotect(a + off, 4096, Prot::RW)?;
    }
    Ok(())
}

/// The note for a host run of folio size `label` that the host backed
/// with folios of that size for only `share` of it, if under 99%.
fn host_share_note(label: &str, share: f64) -> Option<String> {
    (share < 0.99).then(|| {
        format!("note: the host backed only {:.0}% of the {label} run with folios of that size", 100.0 * share)
    })
}
