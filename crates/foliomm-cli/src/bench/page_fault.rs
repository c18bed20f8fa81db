//! will-it-scale's `page_fault1`, `page_fault2` and `page_fault3` in
//! thread mode, on the model and on the host kernel: every thread maps a
//! region, writes one byte per 4K page, and unmaps it, in a loop. The
//! region is anonymous (`page_fault1`, with `MADV_NOHUGEPAGE`), a private
//! mapping of the thread's own shmem file (`page_fault2`: every fault
//! copies the file's page, `do_cow_fault`), or a shared one (`page_fault3`:
//! `do_shared_fault`). The contended variant has all threads fault their
//! own chunk of one shared VMA and drop it with `MADV_DONTNEED` (as
//! mmtests' `pft` faults one mapping from many threads).
//!
//! Differs from will-it-scale: each thread maps at its own address with a
//! gap below, so its region stays a VMA of its own (will-it-scale lets
//! `mmap` choose, and adjacent anonymous regions of different threads then
//! merge into one VMA); the files are memfds, where will-it-scale makes
//! them in `/tmp` (tmpfs on most systems).

use std::sync::Arc;
use std::time::{Duration, Instant};

use std::os::fd::AsFd;

use super::workers::{run_threads, run_workers, Loops, Sample, Simulated};
use anyhow::{ensure, Context, Result};
use foliomm::internals::mm::Advice;
use foliomm::internals::sync::cacheline::{self, Transfers};
use foliomm::{Machine, MmapFlags, Prot};
use foliomm_host::sys::{self, memfd, minor_faults, process_cpu_time, Map, Mapping, Workers};

const PAGE: u64 = 4096;
/// Where the first thread's region goes; each next one 2 regions lower.
const BASE: u64 = 0x6000_0000_0000;

/// Which will-it-scale test: what backs the faulted memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub(super) enum Test {
    /// Anonymous memory.
    PageFault1,
    /// A private mapping of a shmem file.
    PageFault2,
    /// A shared mapping of a shmem file.
    PageFault3,
}

impl Test {
    pub(super) fn name(self) -> &'static str {
        match self {
            Test::PageFault1 => "page_fault1 (anonymous)",
            Test::PageFault2 => "page_fault2 (private file, copy on write)",
            Test::PageFault3 => "page_fault3 (shared file)",
        }
    }

    fn shared(self) -> bool {
        self == Test::PageFault3
    }
}

/// Which address-space layout the threads fault in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Layout {
    /// A VMA per thread, mapped and unmapped every loop.
    Separate,
    /// One VMA for all, each thread its own chunk, dropped with MADV_DONTNEED.
    Shared,
    /// will-it-scale's process mode: every worker a process of its own
    /// (its own MM on the model, a forked child on the host), mapping and
    /// unmapping its region every loop.
    Processes,
}

impl Layout {
    pub(super) fn name(self) -> &'static str {
        match self {
            Layout::Separate => "threads, separate VMAs",
            Layout::Shared => "threads, one shared VMA (contended)",
            Layout::Processes => "processes",
        }
    }

    /// Thread `i`'s region of `size` bytes (in the shared VMA at `shared`).
    fn region(self, i: usize, size: u64, shared: u64) -> u64 {
        match self {
            Layout::Separate => BASE - (i as u64 + 1) * 2 * size,
            Layout::Shared => shared + i as u64 * size,
            Layout::Processes => BASE - 2 * size,
        }
    }

    /// Whether each worker maps and unmaps a region of its own every loop.
    fn maps_per_loop(self) -> bool {
        self != Layout::Shared
    }
}

/// One run of `threads` threads, `loops` loops each over `size` bytes, on
/// the model machine `m`. Checks the faults the model counted, then runs
/// the invariant checker.
pub(super) fn model(
    m: &Arc<Machine>,
    test: Test,
    layout: Layout,
    threads: usize,
    size: u64,
    loops: u32,
    simulated: Option<&Simulated>,
) -> Result<Vec<Sample>> {
    let mm = m.new_mm()?;
    let flags = MmapFlags { shared: test.shared(), ..MmapFlags::default() };
    // One file per thread, or one for the shared VMA.
    let file_size = if layout == Layout::Shared { size * threads as u64 } else { size };
    let files = (0..if layout == Layout::Shared { 1 } else { threads })
        .map(|_| (test != Test::PageFault1).then(|| m.memfd_create(file_size)).transpose())
        .collect::<Result<Vec<_>, _>>()?;
    let shared = match layout {
        Layout::Shared => {
            let file = files[0].as_ref().map(|f| (f, 0));
            let a = mm.mmap_file(0, size * threads as u64, Prot::RW, flags, file)?;
            mm.madvise(a, size * threads as u64, Advice::NoHugePage)?;
            a
        }
        Layout::Separate | Layout::Processes => 0,
    };
    let faults_before = m.stats.pgfault.load(std::sync::atomic::Ordering::Relaxed);
    cacheline::forget();
    let setup = |i: usize| {
        cacheline::account_as(i as u32 + 1);
        let cpu = m.new_cpu();
        let a = layout.region(i, size, shared);
        let mm = if layout == Layout::Processes { m.new_mm().expect("a worker's MM") } else { mm.clone() };
        let file = files.get(i).cloned().flatten();
        (cpu, move |cpu: &mut foliomm::Cpu| -> Result<()> {
            if layout.maps_per_loop() {
                let flags = MmapFlags { noreplace: true, ..flags };
                mm.mmap_file(a, size, Prot::RW, flags, file.as_ref().map(|f| (f, 0)))?;
                mm.madvise(a, size, Advice::NoHugePage)?;
            }
            cpu.write_byte_per_page(&mm, a, size, 1)?;
            match layout.maps_per_loop() {
                true => mm.munmap(a, size)?,
                false => mm.madvise(a, size, Advice::DontNeed)?,
            }
            Ok(())
        })
    };
    let samples = run_workers(threads, Loops::Each(loops), simulated, setup)?;
    let faults = m.stats.pgfault.load(std::sync::atomic::Ordering::Relaxed) - faults_before;
    let expected = threads as u64 * loops as u64 * (size / PAGE);
    ensure!(faults == expected, "model: {faults} faults, expected {expected}");
    let violations = m.check();
    ensure!(violations.is_empty(), "model: the checker found {:?}", violations);
    Ok(samples)
}

/// The same run on the host kernel, through its system calls.
pub(super) fn host(test: Test, layout: Layout, threads: usize, size: u64, loops: u32) -> Result<Vec<Sample>> {
    let len = size as usize;
    if layout == Layout::Processes {
        return host_processes(test, threads, len, loops);
    }
    // One file per thread, or one for the shared VMA.
    let file_len = if layout == Layout::Shared { len * threads } else { len };
    let files = (0..if layout == Layout::Shared { 1 } else { threads })
        .map(|_| (test != Test::PageFault1).then(|| memfd(c"foliomm-bench", file_len as u64, false)).transpose())
        .collect::<std::io::Result<Vec<_>>>()
        .context("host memfd")?;
    let map = |i: usize| Map::file(files.get(i).and_then(Option::as_ref).map(|f| (f.as_fd(), 0))).shared(test.shared());
    let shared = match layout {
        Layout::Shared => {
            let m = map(0).map(file_len).context("host mmap")?;
            m.advise(0..file_len, sys::Advice::NoHugePage)?;
            Some(m)
        }
        Layout::Separate | Layout::Processes => None,
    };
    run_threads(threads, Loops::Each(loops), |i| {
        let region = match &shared {
            Some(m) => HostRegion::Chunk(m, i * len),
            None => HostRegion::Own(map(i), layout.region(i, size, 0) as usize),
        };
        ((), move |_: &mut ()| host_loop(&region, len))
    })
}

/// Where a host worker faults.
enum HostRegion<'a> {
    /// A mapping of its own at an address, made and unmapped every loop.
    Own(Map<'a>, usize),
    /// Its chunk, at an offset, of the mapping all threads share.
    Chunk(&'a Mapping, usize),
}

/// One loop of a host worker over `len` bytes: map them (unless they are a
/// chunk of the shared mapping), write one byte per page, unmap (or
/// MADV_DONTNEED); checks that every page took a fault.
fn host_loop(region: &HostRegion, len: usize) -> Result<()> {
    let before = minor_faults();
    match *region {
        HostRegion::Own(map, addr) => {
            let m = map.at(addr).map(len).with_context(|| format!("host mmap of {len} bytes"))?;
            m.advise(0..len, sys::Advice::NoHugePage)?;
            m.write_every(0..len, PAGE as usize, 1);
            m.unmap().context("host munmap")?;
        }
        HostRegion::Chunk(m, off) => {
            m.write_every(off..off + len, PAGE as usize, 1);
            m.advise(off..off + len, sys::Advice::DontNeed)?;
        }
    }
    let (faults, pages) = (minor_faults() - before, len as u64 / PAGE);
    ensure!(faults >= pages, "host: {faults} faults for {pages} pages (were THPs used?)");
    Ok(())
}

/// will-it-scale's process mode on the host: `procs` forked workers, each
/// with its own memfd for the file tests, started together, each reporting
/// its wall and CPU time.
fn host_processes(test: Test, procs: usize, len: usize, loops: u32) -> Result<Vec<Sample>> {
    let mut workers = Workers::fork(procs, |_| {
        let Ok(fd) = (test != Test::PageFault1).then(|| memfd(c"foliomm-bench", len as u64, false)).transpose() else {
            return [0; 3];
        };
        let map = Map::file(fd.as_ref().map(|f| (f.as_fd(), 0))).shared(test.shared());
        let region = HostRegion::Own(map, Layout::Processes.region(0, len as u64, 0) as usize);
        let (t, c) = (Instant::now(), process_cpu_time());
        let ok = (0..loops).all(|_| host_loop(&region, len).is_ok());
        [t.elapsed().as_nanos() as u64, (process_cpu_time() - c).as_nanos() as u64, ok as u64]
    })
    .context("host fork")?;
    workers.start()?;
    let ns = Duration::from_nanos;
    let reports = workers.reports().context("host")?;
    reports
        .into_iter()
        .map(|(_, [wall, cpu, ok])| {
            ensure!(ok == 1, "host: a worker process failed");
            Ok(Sample { loops, wall: ns(wall), cpu: ns(cpu), transfers: Transfers::default() })
        })
        .collect()
}
