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

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use foliomm::mm::Advice;
use foliomm::sync::cacheline::{self, Transfers};
use foliomm::{Machine, MmapFlags, Prot};

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
}

impl Layout {
    pub(super) fn name(self) -> &'static str {
        match self {
            Layout::Separate => "separate VMAs",
            Layout::Shared => "one shared VMA (contended)",
        }
    }

    /// Thread `i`'s region of `size` bytes (in the shared VMA at `shared`).
    fn region(self, i: usize, size: u64, shared: u64) -> u64 {
        match self {
            Layout::Separate => BASE - (i as u64 + 1) * 2 * size,
            Layout::Shared => shared + i as u64 * size,
        }
    }
}

/// What one thread did: its wall and CPU time over the loops, and the
/// cache-line transfers into its simulated CPU (model only).
pub(super) struct Sample {
    pub wall: Duration,
    pub cpu: Duration,
    pub transfers: Transfers,
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
        Layout::Separate => 0,
    };
    let faults_before = m.stats.pgfault.load(std::sync::atomic::Ordering::Relaxed);
    cacheline::forget();
    let samples = run_threads(threads, loops, |i| {
        cacheline::account_as(i as u32 + 1);
        let cpu = m.new_cpu();
        let a = layout.region(i, size, shared);
        let (mm, file) = (mm.clone(), files.get(i).cloned().flatten());
        (cpu, move |cpu: &mut foliomm::Cpu| -> Result<()> {
            if layout == Layout::Separate {
                let flags = MmapFlags { noreplace: true, ..flags };
                mm.mmap_file(a, size, Prot::RW, flags, file.as_ref().map(|f| (f, 0)))?;
                mm.madvise(a, size, Advice::NoHugePage)?;
            }
            cpu.write_byte_per_page(&mm, a, size, 1)?;
            match layout {
                Layout::Separate => mm.munmap(a, size)?,
                Layout::Shared => mm.madvise(a, size, Advice::DontNeed)?,
            }
            Ok(())
        })
    })?;
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
    let flags = if test.shared() { libc::MAP_SHARED } else { libc::MAP_PRIVATE };
    let file_len = if layout == Layout::Shared { len * threads } else { len };
    let files = (0..if layout == Layout::Shared { 1 } else { threads })
        .map(|_| if test == Test::PageFault1 { Ok(-1) } else { memfd(file_len) })
        .collect::<Result<Vec<_>>>()?;
    let shared = match layout {
        Layout::Shared => {
            let a = map(std::ptr::null_mut(), len * threads, flags, files[0])?;
            advise(a, len * threads, libc::MADV_NOHUGEPAGE)?;
            a as u64
        }
        Layout::Separate => 0,
    };
    let samples = run_threads(threads, loops, |i| {
        let a = layout.region(i, size, shared) as *mut u8;
        let fd = files.get(i).copied().unwrap_or(-1);
        ((), move |_: &mut ()| -> Result<()> {
            let before = minor_faults();
            if layout == Layout::Separate {
                map(a, len, flags | libc::MAP_FIXED_NOREPLACE, fd)?;
                advise(a, len, libc::MADV_NOHUGEPAGE)?;
            }
            for off in (0..len).step_by(PAGE as usize) {
                // SAFETY: `a` maps `len` writable bytes (mapped above, or this
                // thread's chunk of the shared region).
                unsafe { a.add(off).write_volatile(1) };
            }
            match layout {
                // SAFETY: the region mapped above, used by this thread only.
                Layout::Separate => ensure!(unsafe { libc::munmap(a.cast(), len) } == 0, "munmap failed"),
                Layout::Shared => advise(a, len, libc::MADV_DONTNEED)?,
            }
            let faults = minor_faults() - before;
            ensure!(faults >= size / PAGE, "host: {faults} faults for {} pages (were THPs used?)", size / PAGE);
            Ok(())
        })
    });
    if shared != 0 {
        // SAFETY: the shared region mapped above; the threads have finished.
        unsafe { libc::munmap(shared as *mut libc::c_void, len * threads) };
    }
    for fd in files.into_iter().filter(|&fd| fd >= 0) {
        // SAFETY: a descriptor made above, no longer mapped.
        unsafe { libc::close(fd) };
    }
    samples
}

/// Runs `threads` threads: each makes its state with `setup(i)`, waits for
/// the others, then runs its loop `loops` times, timed.
fn run_threads<S, L>(threads: usize, loops: u32, setup: impl Fn(usize) -> (S, L) + Sync) -> Result<Vec<Sample>>
where
    L: FnMut(&mut S) -> Result<()>,
{
    let start = Barrier::new(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (setup, start) = (&setup, &start);
                s.spawn(move || {
                    let (mut state, mut lp) = setup(i);
                    cacheline::take();
                    start.wait();
                    let (t, c) = (Instant::now(), thread_cpu_time());
                    let mut result = Ok(());
                    for _ in 0..loops {
                        result = lp(&mut state);
                        if result.is_err() {
                            break;
                        }
                    }
                    let sample = Sample { wall: t.elapsed(), cpu: thread_cpu_time() - c, transfers: cacheline::take() };
                    cacheline::account_as(0);
                    result.map(|()| sample)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().map_err(|_| anyhow::anyhow!("a benchmark thread panicked"))?).collect()
    })
}

/// A memfd of `len` bytes.
fn memfd(len: usize) -> Result<i32> {
    // SAFETY: a NUL-terminated name; the descriptor is closed after the run.
    let fd = unsafe { libc::memfd_create(c"foliomm-bench".as_ptr(), 0) };
    ensure!(fd >= 0, "host memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: the descriptor made above.
    ensure!(unsafe { libc::ftruncate(fd, len as libc::off_t) } == 0, "host ftruncate failed");
    Ok(fd)
}

fn map(at: *mut u8, len: usize, flags: i32, fd: i32) -> Result<*mut u8> {
    let anon = if fd < 0 { libc::MAP_ANONYMOUS } else { 0 };
    // SAFETY: a new mapping of anonymous memory or of a memfd this benchmark
    // made; NOREPLACE keeps it off existing ones.
    let a = unsafe { libc::mmap(at.cast(), len, libc::PROT_READ | libc::PROT_WRITE, flags | anon, fd, 0) };
    if a == libc::MAP_FAILED {
        bail!("host mmap of {len} bytes: {}", std::io::Error::last_os_error());
    }
    Ok(a.cast())
}

fn advise(a: *mut u8, len: usize, advice: i32) -> Result<()> {
    // SAFETY: advice on a region this benchmark mapped.
    let r = unsafe { libc::madvise(a.cast(), len, advice) };
    (r == 0).then_some(()).with_context(|| format!("host madvise({advice}): {}", std::io::Error::last_os_error()))
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Minor faults of the calling thread so far (`RUSAGE_THREAD`).
fn minor_faults() -> u64 {
    // SAFETY: rusage is plain integers, for which zero is valid; getrusage
    // writes the one it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
        ru
    };
    ru.ru_minflt as u64
}
