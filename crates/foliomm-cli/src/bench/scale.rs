//! `bench scale`: how the model's time and the host memory it needs grow
//! with the number of processes, the VMAs of one process, the model RAM a
//! workload writes (in base pages, and in 2 MiB hugetlb pages with HVO)
//! and the threads faulting at once. Each measurement runs
//! in a child process of its own (`foliomm bench scale --one AXIS N`), so
//! that its peak resident memory (`VmHWM`) is its own. Only the work is
//! measured, not the machine's creation: its time, and the peak resident
//! memory less the resident memory when it began, divided by the units.
//! Growth is linear where the time and memory per unit stay flat along an
//! axis.

use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use foliomm::{Config, HugeSize, Machine, MmapFlags, Prot};

use super::new_table;
use super::progress::Progress;

const K: u64 = 1024;
const M: u64 = 1024 * K;
const G: u64 = 1024 * M;

#[derive(clap::Args)]
pub struct ScaleArgs {
    /// The most processes: one parent forked this many times, every child
    /// alive at the end, each sharing 64K the parent wrote.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_procs: u64,
    /// The most VMAs of one process (4K mappings a page apart).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    max_vmas: u64,
    /// The most model RAM written, one byte per page, like 4G (at most
    /// 512G; the host needs about 2% of it in base pages: the memmap, and a
    /// state word per frame instead of its 4 KiB; 0.3% in hugetlb pages).
    #[arg(long, default_value = "64G")]
    max_ram: String,
    /// The most threads of one process faulting 64M each at once.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    max_threads: u64,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Measure one point in this process and print it as JSON (what the
    /// benchmark runs in each child).
    #[arg(long, num_args = 2, value_names = ["AXIS", "N"], hide = true)]
    one: Option<Vec<String>>,
}

/// What the benchmark varies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Axis {
    Processes,
    Vmas,
    Ram,
    /// Model RAM written through a hugetlb mapping whose 2 MiB pages have
    /// an optimized memmap (HVO), the pool made as part of the work.
    HugetlbRam,
    Threads,
}

impl Axis {
    const ALL: [Axis; 5] = [Axis::Processes, Axis::Vmas, Axis::Ram, Axis::HugetlbRam, Axis::Threads];

    fn name(self) -> &'static str {
        match self {
            Axis::Processes => "processes",
            Axis::Vmas => "vmas",
            Axis::Ram => "ram",
            Axis::HugetlbRam => "hugetlb-ram",
            Axis::Threads => "threads",
        }
    }

    /// `n` as a row shows it: a size for RAM, else a count.
    fn size_text(self, n: u64) -> String {
        match self {
            Axis::Ram | Axis::HugetlbRam if n.is_multiple_of(G) => format!("{}G", n / G),
            Axis::Ram | Axis::HugetlbRam => format!("{}M", n / M),
            _ => n.to_string(),
        }
    }

    /// The unit a row is divided by, and its name.
    fn unit(self, n: u64) -> (f64, &'static str) {
        match self {
            Axis::Ram | Axis::HugetlbRam => (n as f64 / G as f64, "GiB"),
            Axis::Processes => (n as f64, "process"),
            Axis::Vmas => (n as f64, "VMA"),
            Axis::Threads => (n as f64, "thread"),
        }
    }

    /// The sizes measured up to the largest `args` allows.
    fn sizes(self, a: &ScaleArgs, max_ram: u64) -> Vec<u64> {
        let (first, factor, max) = match self {
            Axis::Processes => (1, 10, a.max_procs),
            Axis::Vmas => (1000, 10, a.max_vmas),
            Axis::Ram | Axis::HugetlbRam => (256 * M, 4, max_ram),
            Axis::Threads => (1, 2, a.max_threads),
        };
        let mut sizes: Vec<u64> =
            std::iter::successors(Some(first), |&n| Some(n * factor)).take_while(|&n| n < max).collect();
        sizes.push(max);
        sizes
    }
}

/// One measured point.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
struct Point {
    axis: String,
    n: u64,
    /// The work's time.
    seconds: f64,
    /// The peak resident memory less the resident memory when the work
    /// began, in KiB.
    grown_kib: u64,
}

/// When the measured work began: time and resident memory.
struct Start {
    at: Instant,
    rss_kib: u64,
}

impl Start {
    fn now() -> Result<Start> {
        Ok(Start { rss_kib: status_kib("VmRSS")?, at: Instant::now() })
    }

    /// The point of `n` on `axis` whose work began at `self`.
    fn point(self, axis: Axis, n: u64) -> Result<Point> {
        let seconds = self.at.elapsed().as_secs_f64();
        let grown_kib = status_kib("VmHWM")?.saturating_sub(self.rss_kib);
        Ok(Point { axis: axis.name().into(), n, seconds, grown_kib })
    }
}

pub fn run(a: &ScaleArgs) -> Result<()> {
    let max_ram = foliomm_scenario::lang::parse_size(&a.max_ram)
        .filter(|s| (256 * M..=512 * G).contains(s) && s % (4 * M) == 0)
        .with_context(|| format!("--max-ram: expected a multiple of 4M from 256M to 512G, found '{}'", a.max_ram))?;
    if let Some(one) = &a.one {
        let p = measure(&one[0], one[1].parse().context("--one: N is a number")?)?;
        println!("{}", serde_json::to_string(&p)?);
        return Ok(());
    }
    let plan: Vec<(Axis, u64)> =
        Axis::ALL.iter().flat_map(|&x| x.sizes(a, max_ram).into_iter().map(move |n| (x, n))).collect();
    let progress = Progress::new(plan.len() as u64);
    let mut points = Vec::new();
    for (axis, n) in plan {
        progress.set_message(format!("{} {}", axis.name(), axis.size_text(n)));
        points.push((axis, in_child(axis.name(), n)?));
        progress.inc(1);
    }
    if a.json {
        let all: Vec<&Point> = points.iter().map(|(_, p)| p).collect();
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    print_table(&points);
    println!("\nreproduce: {}", super::saved::reproducing_command("scale"));
    Ok(())
}

/// Runs `foliomm bench scale --one AXIS N` and reads its point.
fn in_child(axis: &str, n: u64) -> Result<Point> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe).args(["bench", "scale", "--one", axis, &n.to_string()]).output()?;
    if !out.status.success() {
        bail!("{axis} {n}: the measuring process failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("{axis} {n}: no point in its output"))
}

fn print_table(points: &[(Axis, Point)]) {
    println!("Scale of the model: the work's time and the host memory it grew by (peak resident), per unit\n");
    let mut t = new_table(["what", "n", "seconds", "time per unit", "host MiB", "host memory per unit"]);
    for (axis, p) in points {
        let (units, unit) = axis.unit(p.n);
        let grown = p.grown_kib as f64 * 1024.0;
        t.add_row(vec![
            axis.name().to_string(),
            axis.size_text(p.n),
            format!("{:.3}", p.seconds),
            format!("{:.2} µs/{unit}", p.seconds / units * 1e6),
            format!("{:.1}", grown / M as f64),
            format!("{:.0} B/{unit}", grown / units),
        ]);
    }
    println!("{t}");
    for axis in Axis::ALL {
        let rows: Vec<&Point> = points.iter().filter(|(x, _)| *x == axis).map(|(_, p)| p).collect();
        let [.., before, last] = rows[..] else { continue };
        let per = |p: &Point| p.seconds / axis.unit(p.n).0;
        println!(
            "{}: time per unit at {} is {:.2}x that at {} (1.00: linear)",
            axis.name(),
            axis.size_text(last.n),
            per(last) / per(before),
            axis.size_text(before.n)
        );
    }
    println!("threads: wall time; on this machine's {} CPUs, threads beyond them take turns", num_cpus());
    println!(
        "ram: most of it is the memmap, 64 bytes per 4 KiB frame as Linux's struct page (1.56%); hugetlb-ram keeps \
         one page of memmap per 2 MiB page (HVO: the memmap 0.2%)"
    );
}

/// The CPUs this process may run on.
fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Measures one point in this process. What the work built is left to the
/// process's exit (`mem::forget`), so that taking it down is not timed.
fn measure(axis: &str, n: u64) -> Result<Point> {
    let Some(&axis) = Axis::ALL.iter().find(|x| x.name() == axis) else {
        bail!("--one: unknown axis '{axis}' (processes, vmas, ram, hugetlb-ram, threads)")
    };
    let start = match axis {
        Axis::Processes => processes(n)?,
        Axis::Vmas => vmas(n)?,
        Axis::Ram => ram(n)?,
        Axis::HugetlbRam => hugetlb_ram(n)?,
        Axis::Threads => threads(n)?,
    };
    start.point(axis, n)
}

/// A parent writes 64K and forks `n` children that stay alive.
fn processes(n: u64) -> Result<Start> {
    let m = Machine::new(Config { memory: 4 * G, ..Config::default() })?;
    let (p, mut cpu) = (m.new_mm()?, m.new_cpu());
    let a = p.mmap(0, 64 * K, Prot::RW, MmapFlags::default())?;
    cpu.write(&p, a, &[1; 64 * K as usize])?;
    let start = Start::now()?;
    let children: Vec<_> = (0..n).map(|_| p.fork()).collect::<foliomm::Result<_>>()?;
    std::mem::forget(children);
    Ok(start)
}

/// One process maps `n` pages a page apart, each its own VMA.
fn vmas(n: u64) -> Result<Start> {
    let m = Machine::new(Config { memory: 4 * G, max_map_count: n as usize + 16, ..Config::default() })?;
    let p = m.new_mm()?;
    let base = p.mmap(0, 2 * n * 4 * K, Prot::RW, MmapFlags::default())?;
    p.munmap(base, 2 * n * 4 * K)?;
    let start = Start::now()?;
    for i in 0..n {
        p.mmap(base + 2 * i * 4 * K, 4 * K, Prot::RW, MmapFlags { fixed: true, ..MmapFlags::default() })?;
    }
    std::mem::forget(m);
    Ok(start)
}

/// One process writes a byte in every page of `bytes`.
fn ram(bytes: u64) -> Result<Start> {
    // Room for the page tables (one per 2 MiB) besides what is written.
    let m = Machine::new(Config { memory: bytes + bytes / 256 + 256 * M, ..Config::default() })?;
    let (p, mut cpu) = (m.new_mm()?, m.new_cpu());
    let a = p.mmap(0, bytes, Prot::RW, MmapFlags::default())?;
    let start = Start::now()?;
    cpu.write_byte_per_page(&p, a, bytes, 1)?;
    std::mem::forget(m);
    Ok(start)
}

/// A pool of `bytes` of 2 MiB huge pages made with HVO on, then one
/// process writes a byte in every 4 KiB of a hugetlb mapping of them.
fn hugetlb_ram(bytes: u64) -> Result<Start> {
    let m = Machine::new(Config { memory: bytes + 256 * M, ..Config::default() })?;
    let start = Start::now()?;
    m.kernel.set_hugetlb_optimize_vmemmap(true);
    let pages = bytes / (2 * M);
    if m.kernel.set_nr_hugepages(HugeSize::Pmd, pages) != pages {
        bail!("hugetlb-ram {bytes}: the model's memory holds fewer than {pages} huge pages");
    }
    let (p, mut cpu) = (m.new_mm()?, m.new_cpu());
    let a = p.mmap(0, bytes, Prot::RW, MmapFlags { hugetlb: Some(HugeSize::Pmd), ..MmapFlags::default() })?;
    cpu.write_byte_per_page(&p, a, bytes, 1)?;
    std::mem::forget(m);
    Ok(start)
}

/// `n` threads of one process each fault 64M of their own.
fn threads(n: u64) -> Result<Start> {
    let m = Machine::new(Config { memory: n * 64 * M + 256 * M, ..Config::default() })?;
    let p = m.new_mm()?;
    let regions: Vec<u64> =
        (0..n).map(|_| p.mmap(0, 64 * M, Prot::RW, MmapFlags::default())).collect::<foliomm::Result<_>>()?;
    let start = Start::now()?;
    std::thread::scope(|s| {
        let jobs: Vec<_> = regions
            .iter()
            .map(|&a| {
                let (m, p) = (&m, &p);
                s.spawn(move || m.new_cpu().write_byte_per_page(p, a, 64 * M, 1))
            })
            .collect();
        jobs.into_iter().try_for_each(|j| j.join().expect("a faulting thread panicked"))
    })?;
    std::mem::forget(m);
    Ok(start)
}

/// The value of `field` (`VmRSS`, `VmHWM`) in this process's
/// `/proc/self/status`, in KiB.
fn status_kib(field: &str) -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status.lines().find(|l| l.starts_with(&format!("{field}:")));
    let value = line.and_then(|l| l.split_whitespace().nth(1)).and_then(|v| v.parse().ok());
    value.with_context(|| format!("no {field} in /proc/self/status"))
}
