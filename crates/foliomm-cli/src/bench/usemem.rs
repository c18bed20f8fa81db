//! `foliomm bench usemem`: the vm-scalability run seed 002's cover letter
//! opens with, `./usemem -n 48 --prealloc --prefault -O -U 3448054972`:
//! each of N processes maps private hugetlb memory (`-U`), faults all of it
//! in before the clock (`--prealloc --prefault`), then writes it through
//! once: KB/s per process, min, max and average over every process of
//! every round, for the three hugetlb synchronization designs and the host
//! kernel. No fault is timed, so the seed saw no difference between its
//! kernels, and neither should the model: the point of the run is that
//! it does not show the regression.
//!
//! Differs from the seed: each process maps its own hugetlbfs memfd
//! privately rather than `MAP_HUGETLB` anonymous memory (the same kind of
//! VMA to the kernel: private hugetlb), and the sizes are `--size`.

use std::os::fd::AsFd;
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use foliomm::internals::machine::{HugeSize, HugetlbSync};
use foliomm::{Config, Design, MmapFlags, Prot};
use foliomm_host::sys::{memfd, Map, Workers};

use super::runner::{Benchmark, Measurement};
use super::saved::{SavedRun, Table};
use super::seed_002::{runner_name, Runner};
use super::workers::{host_rates, run_workers, Loops};

/// The 2 MiB huge pages the processes map.
const HPAGE: u64 = 1 << 21;

/// The seed's three runs of 48 processes (KB/s: min, max, avg), by the
/// design each kernel had.
const SEED: [(&str, [f64; 3]); 3] = [
    ("i-mmap-rwsem", [492006.0, 523305.0, 502552.0]),
    ("no-lock", [497107.0, 522704.0, 507234.0]),
    ("vma-lock", [494480.0, 532461.0, 505579.0]),
];

#[derive(clap::Args)]
pub(super) struct UsememArgs {
    /// The common options (--size: each process's memory, a multiple of 2M,
    /// 64M by default; the seed's was 3448054972 bytes).
    #[command(flatten)]
    pub(super) common: super::CommonArgs,
    /// Process counts, comma-separated (the seed's -n 48).
    #[arg(long, value_delimiter = ',', default_value = "1,2", value_parser = clap::value_parser!(u16).range(1..=64))]
    processes: Vec<u16>,
}

/// `bench usemem` as the runner drives it.
pub(super) struct Usemem<'a> {
    args: &'a UsememArgs,
    size: u64,
}

impl<'a> Usemem<'a> {
    pub(super) fn new(args: &'a UsememArgs) -> Result<Usemem<'a>> {
        Ok(Usemem { args, size: args.common.size_or("64M")? })
    }
}

impl Benchmark for Usemem<'_> {
    /// A runner and a process count.
    type Config = (Runner, u16);
    const NAME: &'static str = "usemem";
    const RUNS: u32 = 5;

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "size": self.size, "processes": self.args.processes })
    }

    fn tables(&self) -> Vec<Table> {
        let name = "usemem --prealloc --prefault -O -U: KB/s per process".into();
        vec![Table { name, unit: "KB/s".into(), higher_is_better: true, rows: Vec::new() }]
    }

    fn plan(&self, host: bool) -> Vec<Vec<(Runner, u16)>> {
        let runners = HugetlbSync::ALL.iter().map(|&(d, _)| Runner::Model(d)).chain(host.then_some(Runner::Host));
        vec![runners.flat_map(|r| self.args.processes.iter().map(move |&n| (r, n))).collect()]
    }

    fn place(&self, &(runner, n): &(Runner, u16)) -> (String, String) {
        (format!("{n} processes"), runner_name(runner))
    }

    fn on_host(&self, c: &(Runner, u16)) -> bool {
        c.0 == Runner::Host
    }

    fn measure(&mut self, &(runner, n): &(Runner, u16)) -> Result<Measurement> {
        let rates = match runner {
            Runner::Model(d) => model(d, n as usize, self.size, &self.args.common)?,
            Runner::Host => host(n as usize, self.size)?,
        };
        Ok(Measurement { samples: rates.into_iter().map(|r| (0, r)).collect(), ..Measurement::default() })
    }

    fn print(&self, run: &SavedRun) {
        let counts: Vec<String> = self.args.processes.iter().map(u16::to_string).collect();
        println!(
            "\nusemem: {} processes, each with private hugetlb memory of {} MiB",
            counts.join(", "),
            self.size >> 20
        );
        println!("(the seed, 48 processes of 3.2 GiB: samples min max avg)");
        for (name, [min, max, avg]) in SEED {
            println!("  seed, {name:13} 48 {min:.0} {max:.0} {avg:.0}");
        }
        let table = &run.tables[0];
        for (runner, n) in self.plan(true).concat() {
            let Some(r) = table.samples(&format!("{n} processes"), &runner_name(runner)).filter(|r| !r.is_empty())
            else {
                continue;
            };
            let avg = r.iter().sum::<f64>() / r.len() as f64;
            let (min, max) = r.iter().fold((f64::INFINITY, 0f64), |(a, b), &x| (a.min(x), b.max(x)));
            println!("  {:22} {:2} {min:.0} {max:.0} {avg:.0}  ({} samples)", runner_name(runner), n, r.len());
        }
    }
}

/// One round on a new model machine: `n` processes on threads, each with
/// its private hugetlb mapping faulted in before its timed write pass.
fn model(design: HugetlbSync, n: usize, size: u64, common: &super::CommonArgs) -> Result<Vec<f64>> {
    let config = Config { memory: n as u64 * size + (256 << 20), hugetlb_sync: design, ..common.config(Design::MmId) };
    let m = super::new_machine(config)?;
    let pages = n as u64 * size / HPAGE;
    ensure!(m.kernel.set_nr_hugepages(HugeSize::Pmd, pages) == pages, "the model's memory holds no {pages} huge pages");
    let samples = run_workers(n, Loops::Each(1), None, |_| {
        let mm = m.new_mm().expect("a process's MM");
        let file = m.hugetlbfs_create(size, HugeSize::Pmd).expect("a hugetlbfs file");
        let a = mm.mmap_file(0, size, Prot::RW, MmapFlags::default(), Some((&file, 0))).expect("the mapping");
        let mut cpu = m.new_cpu();
        // --prealloc --prefault: every huge page faulted in, untimed.
        cpu.write_byte_per_page(&mm, a, size, 1).expect("the prefault");
        (cpu, move |cpu: &mut foliomm::Cpu| cpu.fill(&mm, a, size, 2).map_err(anyhow::Error::from))
    })?;
    let violations = m.check();
    ensure!(violations.is_empty(), "model: the checker found {violations:?}");
    Ok(samples.iter().map(|s| (size >> 10) as f64 / s.wall.as_secs_f64()).collect())
}

/// One round on the host: the pool set to hold every process's memory
/// (and restored), a process each.
fn host(n: usize, size: u64) -> Result<Vec<f64>> {
    use foliomm_host::sysfs;
    let pages = n as u64 * size / HPAGE;
    sysfs::set(&sysfs::hugetlb_path(HugeSize::Pmd, "nr_hugepages"), &pages.to_string()).map_err(anyhow::Error::msg)?;
    let r = host_round(n, size);
    sysfs::restore_all();
    r
}

fn host_round(n: usize, size: u64) -> Result<Vec<f64>> {
    let workers = Workers::fork(n, |_| {
        let rate = (|| {
            let fd = memfd(c"foliomm-usemem", size, true).ok()?;
            let mut m = Map::file(Some((fd.as_fd(), 0))).map(size as usize).ok()?;
            m.write_every(0..size as usize, HPAGE as usize, 1);
            let t = Instant::now();
            m.fill(0..size as usize, 2);
            Some((size >> 10) as f64 / t.elapsed().as_secs_f64())
        })();
        [rate.unwrap_or(-1.0).to_bits()]
    })
    .context("host fork")?;
    let rates = host_rates(workers, "host: a process could not map or fill its hugetlb memory")?;
    Ok(rates.into_iter().map(|(_, rate)| rate).collect())
}
