//! `foliomm bench pmd-sharing`: what hugetlb PMD sharing saves in page-table
//! memory (seed 002's subject), on the model and on the host kernel.
//!
//! A parent maps `--vmas` 1 GiB VMAs of one hugetlbfs file, at 1 GiB
//! boundaries (shareable: each covers a whole PUD window) or 2 MiB past
//! them (unshareable), and writes one huge page in each. `--children`
//! forked children then write the same page of every VMA and wait. The
//! page-table memory the machine gained per child is the figure: the
//! model's live page-table frames, the host's `PageTables` in
//! /proc/meminfo. A child sharing the parent's tables needs none for the
//! VMAs; one that cannot share needs a PMD table per VMA.

use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use foliomm::internals::machine::HugeSize;
use foliomm::internals::sync::atomic::Ordering::Relaxed;
use foliomm::{Config, MmapFlags, Prot};
use foliomm_host::sys::{memfd, Map, Workers};

use super::new_table;
use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::stats::summarize;

/// The 2 MiB huge pages the benchmark uses.
const HPAGE: u64 = 1 << 21;

#[derive(clap::Args)]
pub(super) struct PmdSharingArgs {
    /// 1 GiB VMAs the parent maps.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=256))]
    vmas: u64,
    /// Children forked.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    children: u64,
    /// The common options (no --size: the VMAs are 1 GiB each; --runs: one
    /// round of counts by default, more to see them repeat).
    #[command(flatten)]
    pub(super) common: super::CommonArgs,
}

const GIB: u64 = 1 << 30;
/// How long `PageTables` takes to show a change (vmstat folds its per-CPU
/// differences every second).
const SETTLE: Duration = Duration::from_millis(1500);
/// Where the parent's VMAs start: a PGD slot of their own.
const BASE: u64 = 1 << 40;

/// One configuration: the model or the host kernel, with the VMAs
/// shareable (aligned) or not.
#[derive(Clone, Copy)]
pub(super) struct Setup {
    host: bool,
    aligned: bool,
}

/// The series of the model and of the host kernel.
const RUNNERS: [&str; 2] = ["model (vma-lock)", "host kernel"];

/// `bench pmd-sharing` as the runner drives it.
pub(super) struct PmdSharing<'a> {
    args: &'a PmdSharingArgs,
}

impl<'a> PmdSharing<'a> {
    pub(super) fn new(args: &'a PmdSharingArgs) -> Result<PmdSharing<'a>> {
        args.common.refuse("size", "pmd-sharing maps --vmas VMAs of 1 GiB each")?;
        Ok(PmdSharing { args })
    }
}

/// The row of VMAs at 1 GiB boundaries (`aligned`) or 2 MiB past them.
fn layout(aligned: bool) -> &'static str {
    if aligned {
        "shareable"
    } else {
        "unshareable"
    }
}

impl Benchmark for PmdSharing<'_> {
    type Config = Setup;
    const NAME: &'static str = "pmd-sharing";
    /// Counts, not times: one round unless asked for more (which must agree).
    const RUNS: u32 = 1;

    /// Counts do not depend on a warm machine.
    fn warm_up(&self) -> bool {
        false
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "vmas": self.args.vmas, "children": self.args.children })
    }

    fn tables(&self) -> Vec<Table> {
        let name = "page-table memory gained per child".into();
        vec![Table { name, unit: "KiB".into(), higher_is_better: false, rows: Vec::new() }]
    }

    fn plan(&self, host: bool) -> Vec<Vec<Setup>> {
        let hosts = [false].into_iter().chain(host.then_some(true));
        vec![hosts.flat_map(|host| [true, false].map(|aligned| Setup { host, aligned })).collect()]
    }

    fn place(&self, c: &Setup) -> (String, String) {
        (layout(c.aligned).into(), RUNNERS[c.host as usize].into())
    }

    fn on_host(&self, c: &Setup) -> bool {
        c.host
    }

    fn measure(&mut self, c: &Setup) -> Result<Measurement> {
        let kb = if c.host { host(self.args, c.aligned)? } else { model(self.args, c.aligned)? };
        Ok(Measurement::of([kb]))
    }

    fn print(&self, run: &SavedRun) {
        let a = self.args;
        println!(
            "\nPage-table memory gained per child: {} VMAs of 1 GiB of one hugetlbfs file, {} children",
            a.vmas, a.children
        );
        let mut t = new_table(["", "shareable (KiB)", "unshareable (KiB)", "difference"]);
        let mean = |runner, aligned| run.tables[0].samples(layout(aligned), runner).map(|s| summarize(s).mean);
        let kb = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        for runner in &RUNNERS[..if a.common.no_host { 1 } else { 2 }] {
            let (shareable, unshareable) = (mean(runner, true), mean(runner, false));
            let diff = shareable.zip(unshareable).map(|(s, u)| u - s);
            t.add_row([runner.to_string(), kb(shareable), kb(unshareable), kb(diff)]);
        }
        println!("{t}");
    }
}

/// The address of VMA `i`: at a 1 GiB boundary, or 2 MiB past it.
fn vma_addr(i: u64, aligned: bool) -> u64 {
    BASE + i * 2 * GIB + if aligned { 0 } else { HPAGE }
}

/// The model's page-table KiB gained per child.
fn model(a: &PmdSharingArgs, aligned: bool) -> Result<f64> {
    let m =
        super::new_machine(Config { memory: a.vmas * HPAGE + (64 << 20), ..a.common.config(foliomm::Design::MmId) })?;
    ensure!(
        m.kernel.set_nr_hugepages(HugeSize::Pmd, a.vmas) == a.vmas,
        "the model's memory holds no {} huge pages",
        a.vmas
    );
    let file = m.hugetlbfs_create(a.vmas * 2 * GIB, HugeSize::Pmd)?;
    let parent = m.new_mm()?;
    let flags = MmapFlags { shared: true, noreserve: true, fixed: true, ..MmapFlags::default() };
    let mut cpu = m.new_cpu();
    for i in 0..a.vmas {
        let at = parent.mmap_file(vma_addr(i, aligned), GIB, Prot::RW, flags, Some((&file, i * 2 * GIB)))?;
        cpu.write_byte_per_page(&parent, at, 1, 1)?;
    }
    let tables = || m.stats.pgtable_alloc.load(Relaxed) - m.stats.pgtable_free.load(Relaxed);
    let before = tables();
    let mut children = Vec::new();
    for _ in 0..a.children {
        let child = parent.fork()?;
        for i in 0..a.vmas {
            cpu.write_byte_per_page(&child, vma_addr(i, aligned), 1, 2)?;
        }
        children.push(child);
    }
    let per_child = (tables() - before) as f64 * 4.0 / a.children as f64;
    let violations = m.check();
    ensure!(violations.is_empty(), "model: the checker found {violations:?}");
    Ok(per_child)
}

/// `PageTables` of /proc/meminfo, in KiB.
fn page_tables_kb() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo")?;
    let line = text.lines().find(|l| l.starts_with("PageTables:")).context("no PageTables in /proc/meminfo")?;
    line.split_whitespace().nth(1).context("bad PageTables line")?.parse().context("bad PageTables value")
}

/// The host's page-table KiB gained per child (the pool set to the pages
/// touched and restored).
fn host(a: &PmdSharingArgs, aligned: bool) -> Result<f64> {
    use foliomm_host::sysfs;
    sysfs::set(&sysfs::hugetlb_path(HugeSize::Pmd, "nr_hugepages"), &a.vmas.to_string()).map_err(anyhow::Error::msg)?;
    let r = host_children(a, aligned);
    sysfs::restore_all();
    r
}

fn host_children(a: &PmdSharingArgs, aligned: bool) -> Result<f64> {
    let fd = memfd(c"foliomm-pmd-sharing", a.vmas * 2 * GIB, true).context("memfd_create(MFD_HUGETLB)")?;
    let maps = (0..a.vmas)
        .map(|i| {
            let want = vma_addr(i, aligned);
            let m = Map::file(Some((fd.as_fd(), i * 2 * GIB))).shared(true).at(want as usize).noreserve();
            let m = m.map(GIB as usize).with_context(|| format!("mmap at {want:#x}"))?;
            m.write(0, 1);
            Ok(m)
        })
        .collect::<Result<Vec<_>>>()?;
    // The counter is folded from per-CPU differences about once a second.
    std::thread::sleep(SETTLE);
    let before = page_tables_kb()?;
    // Each child faults the first page of every inherited mapping and
    // stays until the workers are dropped.
    let mut children = Workers::fork(a.children as usize, |_| {
        maps.iter().for_each(|m| m.write(0, 2));
        []
    })
    .context("fork")?;
    children.start()?;
    children.reports().context("a child failed")?;
    std::thread::sleep(SETTLE);
    let after = page_tables_kb()?;
    drop(children);
    Ok(after.saturating_sub(before) as f64 / a.children as f64)
}
