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
        Layout::Separate | Layout::Processes => 0,
    };
    let faults_before = m.stats.pgfault.load(std::sync::atomic::Ordering::Relaxed);
    cacheline::forget();
    let samples = run_threads(threads, loops, |i| {
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
    if layout == Layout::Processes {
        return host_processes(test, flags, threads, size, loops);
    }
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
        Layout::Separate | Layout::Processes => 0,
    };
    let samples = run_threads(threads, loops, |i| {
        let a = layout.region(i, size, shared) as *mut u8;
        let fd = files.get(i).copied().unwrap_or(-1);
        ((), move |_: &mut ()| host_loop(layout, flags, a, size, fd))
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

/// One loop of a host worker over its `size` bytes at `a`: map them (unless
/// they are a chunk of the shared VMA), write one byte per page, unmap (or
/// MADV_DONTNEED); checks that every page took a fault.
fn host_loop(layout: Layout, flags: i32, a: *mut u8, size: u64, fd: i32) -> Result<()> {
    let len = size as usize;
    let before = minor_faults();
    if layout.maps_per_loop() {
        map(a, len, flags | libc::MAP_FIXED_NOREPLACE, fd)?;
        advise(a, len, libc::MADV_NOHUGEPAGE)?;
    }
    for off in (0..len).step_by(PAGE as usize) {
        // SAFETY: `a` maps `len` writable bytes (mapped above, or this
        // worker's chunk of the shared region).
        unsafe { a.add(off).write_volatile(1) };
    }
    match layout.maps_per_loop() {
        // SAFETY: the region mapped above, used by this worker only.
        true => ensure!(unsafe { libc::munmap(a.cast(), len) } == 0, "munmap failed"),
        false => advise(a, len, libc::MADV_DONTNEED)?,
    }
    let faults = minor_faults() - before;
    ensure!(faults >= size / PAGE, "host: {faults} faults for {} pages (were THPs used?)", size / PAGE);
    Ok(())
}

/// will-it-scale's process mode on the host: `procs` forked children, each
/// with its own memfd for the file tests, released together through a
/// pipe, each reporting its wall and CPU time through another. A child
/// calls only system calls and allocation-free code (the parent may have
/// other threads), and leaves with `_exit`.
fn host_processes(test: Test, flags: i32, procs: usize, size: u64, loops: u32) -> Result<Vec<Sample>> {
    let (go, report) = (pipe()?, pipe()?);
    let mut pids = Vec::with_capacity(procs);
    for _ in 0..procs {
        match fork_worker()? {
            0 => {
                let fd = if test == Test::PageFault1 { Ok(-1) } else { memfd(size as usize) };
                let mut byte = 0u8;
                // SAFETY: a read of one byte into a local, from the go pipe.
                unsafe { libc::read(go[0], (&mut byte as *mut u8).cast(), 1) };
                let (t, c) = (Instant::now(), process_cpu_time());
                let a = Layout::Processes.region(0, size, 0) as *mut u8;
                let ok =
                    fd.is_ok_and(|fd| (0..loops).all(|_| host_loop(Layout::Processes, flags, a, size, fd).is_ok()));
                let out: [u64; 3] =
                    [t.elapsed().as_nanos() as u64, (process_cpu_time() - c).as_nanos() as u64, ok as u64];
                // SAFETY: 24 bytes from a local array into the report pipe
                // (atomic: below PIPE_BUF), then the child ends.
                unsafe {
                    libc::write(report[1], out.as_ptr().cast(), 24);
                    libc::_exit(0);
                }
            }
            pid => pids.push(pid),
        }
    }
    // SAFETY: one byte per child into the go pipe; a buffer of them.
    unsafe { libc::write(go[1], vec![1u8; procs].as_ptr().cast(), procs) };
    let mut samples = Vec::with_capacity(procs);
    for _ in 0..procs {
        let mut out = [0u64; 3];
        // SAFETY: 24 bytes into a local array from the report pipe.
        let n = unsafe { libc::read(report[0], out.as_mut_ptr().cast(), 24) };
        ensure!(n == 24 && out[2] == 1, "host: a worker process failed");
        let ns = |v: u64| Duration::from_nanos(v);
        samples.push(Sample { wall: ns(out[0]), cpu: ns(out[1]), transfers: Transfers::default() });
    }
    for pid in pids {
        // SAFETY: reaping a child forked above.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    for fd in go.into_iter().chain(report) {
        // SAFETY: the pipe ends made above.
        unsafe { libc::close(fd) };
    }
    Ok(samples)
}

/// Forks a worker process that dies with this one (`PR_SET_PDEATHSIG`):
/// a benchmark killed mid-run leaves no worker waiting on its pipes.
/// Returns 0 in the worker, its PID in the caller. The worker may only run
/// code that takes no lock another thread of the caller may hold, and must
/// end in `_exit`.
pub(super) fn fork_worker() -> Result<libc::pid_t> {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: see the function's documentation for the child's obligations.
    match unsafe { libc::fork() } {
        -1 => bail!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            // SAFETY: prctl and getppid on the calling process; if the
            // parent died before the prctl, the worker ends at once.
            unsafe {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
            }
            Ok(0)
        }
        pid => Ok(pid),
    }
}

pub(super) fn pipe() -> Result<[i32; 2]> {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    ensure!(unsafe { libc::pipe(fds.as_mut_ptr()) } == 0, "pipe: {}", std::io::Error::last_os_error());
    Ok(fds)
}

/// Runs `threads` threads: each makes its state with `setup(i)`, waits for
/// the others, then runs its loop `loops` times, timed.
pub(super) fn run_threads<S, L>(
    threads: usize,
    loops: u32,
    setup: impl Fn(usize) -> (S, L) + Sync,
) -> Result<Vec<Sample>>
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
    cpu_time(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the calling process (`CLOCK_PROCESS_CPUTIME_ID`).
fn process_cpu_time() -> Duration {
    cpu_time(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(clock, &mut ts) };
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
