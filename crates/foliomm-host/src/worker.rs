//! The worker: the program each scenario process runs. Each of its threads
//! reads one request per line from its own socket, performs it on the
//! process's address space with real system calls and memory accesses, and
//! answers one line. `SpawnThread` starts an OS thread with a socket of its
//! own; `fork` forks the worker itself: the child connects to the controller
//! with a new socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Release},
};
use std::sync::{Arc, OnceLock};

use foliomm::internals::mm::Advice;
use foliomm::Errno;
use std::collections::HashMap;

use foliomm_scenario::op::{pattern_byte, Access, GupKind, MmapRequest, Op, Peek, Reply};
use foliomm_scenario::Observation;

use crate::files;
use crate::procfs::{check_access, maps, MapsEntry, Procfs};
use crate::protocol::{done, value, Answer, Call, Hello, Refused};
use crate::sys::gup::{HostGup, Uring};
use crate::sys::scenario as sys;

const PAGE: u64 = 4096;

/// Connects to the controller and says hello; a worker whose controller is
/// gone (killed) has no one to serve and exits.
fn connect(socket: &Path, name: &str) -> BufReader<UnixStream> {
    let hello = serde_json::to_string(&Hello { name: name.into() }).unwrap();
    match UnixStream::connect(socket).and_then(|mut s| writeln!(s, "{hello}").map(|()| s)) {
        Ok(s) => BufReader::new(s),
        Err(_) => std::process::exit(1),
    }
}

/// What the threads of one worker process share.
struct Process {
    socket: PathBuf,
    name: String,
    procfs: Procfs,
    uffds: crate::uffd::Uffds,
}

impl Process {
    fn new(socket: &Path, name: &str) -> Arc<Process> {
        // An open /proc/self/pagemap stays bound to the process that opened
        // it: a forked child opens its own.
        let procfs = Procfs::open().expect("cannot open /proc/self/pagemap or /proc/kpageflags (needs root)");
        Arc::new(Process { socket: socket.into(), name: name.into(), procfs, uffds: Default::default() })
    }

    fn thread_name(&self, tid: u32) -> String {
        if tid == 0 {
            self.name.clone()
        } else {
            format!("{}/{tid}", self.name)
        }
    }
}

/// The environment variable that keeps a worker's threads on one CPU too
/// (see [`crate::HostBackend`]'s swap runs).
pub const ONE_CPU: &str = "FOLIOMM_WORKER_ONE_CPU";

/// Whether this worker's threads stay on its first CPU ([`ONE_CPU`], or
/// since it let memory go: [`madvise`]); a forked child inherits it.
static THREADS_ON_ONE_CPU: AtomicBool = AtomicBool::new(false);

/// Whether the scenario placed this worker on a CPU (`cpu N`): the worker
/// then stays where it was put; a forked child inherits it.
static PLACED: AtomicBool = AtomicBool::new(false);

/// Node 0's CPUs the worker may use, as it found them before it put
/// itself on the first ([`crate::sys::node0_cpus`]); a forked child
/// inherits them.
static NODE0: OnceLock<Vec<usize>> = OnceLock::new();

/// Puts the calling thread on the worker's first CPU (`one`) or on all of
/// [`NODE0`] (best effort: a CPU the kernel refuses leaves it where it is).
fn run_on_node0(one: bool) {
    let cpus = NODE0.get().map_or(&[][..], Vec::as_slice);
    let cpus = if one { &cpus[..cpus.len().min(1)] } else { cpus };
    if !cpus.is_empty() {
        let _ = crate::sys::run_on(cpus);
    }
}

/// Runs the worker until the controller says `Exit` or goes away.
pub fn worker_main(socket: &Path, name: &str) -> ! {
    // The first of node 0's CPUs, before any thread: the model runs a
    // scenario's sequential steps on one CPU, so every folio a step leaves
    // in a CPU's LRU batch (with a reference) is in the one batch that the
    // next step's `lru_add_drain` empties, as in the model (a worker that
    // moved to another CPU later would leave them behind). Threads of a
    // `parallel` block get node 0's CPUs unless [`THREADS_ON_ONE_CPU`].
    THREADS_ON_ONE_CPU.store(std::env::var_os(ONE_CPU).is_some(), Release);
    let _ = NODE0.set(crate::sys::node0_cpus().unwrap_or_default());
    run_on_node0(true);
    // Children are reaped by the kernel; the controller learns of an exit
    // when the child's socket closes (after its address space is gone).
    sys::reap_children_automatically();
    sys::keep_heap_apart();
    populate_own_mappings();
    serve(Process::new(socket, name), 0);
    std::process::exit(0)
}

/// Faults in every page the worker has mapped readable before a scenario
/// starts (`MADV_POPULATE_READ`, best effort: nothing before 5.14), so
/// that code of its own first run in a later step adds no page table to
/// `VmPTE` (where a code page's 2 MiB range begins depends on ASLR).
fn populate_own_mappings() {
    for m in maps().iter().filter(|m| m.read) {
        let _ = sys::madvise(m.start, m.end - m.start, libc::MADV_POPULATE_READ);
    }
}

/// One worker thread: its process, its number, its socket and the GUP
/// references it holds (by the handles it gave out).
struct WorkerThread {
    proc: Arc<Process>,
    tid: u32,
    conn: BufReader<UnixStream>,
    gups: HashMap<u64, HostGup>,
    next_gup: u64,
}

/// What a worker thread does after an operation.
enum Next {
    /// Answers, and reads the next operation.
    Answer(Answer),
    /// Reads the next operation without answering (a forked child: the
    /// fork was the parent's to answer).
    Listen,
    /// Ends the thread.
    End,
}

/// Serves thread `tid` of the worker process: one operation per line from
/// its own socket, until it exits (the thread ends; for `Exit`, the
/// process) or until the controller goes away.
fn serve(proc: Arc<Process>, tid: u32) {
    let conn = connect(&proc.socket, &proc.thread_name(tid));
    let mut me = WorkerThread { proc, tid, conn, gups: HashMap::new(), next_gup: 0 };
    let mut line = String::new();
    loop {
        line.clear();
        if me.conn.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let call: Call = serde_json::from_str(&line).expect("bad request from the controller");
        let answer = match me.perform(call) {
            Next::Answer(a) => a,
            Next::Listen => continue,
            Next::End => return,
        };
        // Streamed: a large read's bytes are not held twice (as JSON they
        // are four times their size) in a worker whose memory is limited.
        let mut out = std::io::BufWriter::new(me.conn.get_mut());
        if serde_json::to_writer(&mut out, &answer).is_err() || out.write_all(b"\n").is_err() || out.flush().is_err() {
            return;
        }
    }
}

impl WorkerThread {
    /// Performs one operation with real system calls and memory accesses.
    fn perform(&mut self, Call { tid, op }: Call) -> Next {
        Next::Answer(match op {
            Op::Exit => std::process::exit(0),
            Op::ExitThread => return Next::End,
            Op::Spawn => unreachable!("the controller starts worker processes"),
            Op::SplitHugePages { .. } | Op::SplitFile { .. } => {
                unreachable!("the controller writes to debugfs for its workers")
            }
            Op::NumaScan { .. } => unreachable!("the controller refuses NUMA scans"),
            Op::SpawnThread => {
                let p = self.proc.clone();
                fence_off_next_stack();
                let builder = std::thread::Builder::new().name(p.thread_name(tid)).stack_size(THREAD_STACK as usize);
                let wide = !THREADS_ON_ONE_CPU.load(Acquire);
                match builder.spawn(move || {
                    if wide {
                        run_on_node0(false);
                    }
                    serve(p, tid)
                }) {
                    Ok(_) => Ok(Reply::Done),
                    Err(_) => Err(Refused::Errno(Errno::ENOMEM)),
                }
            }
            Op::Fork { child } => match sys::fork() {
                Err(e) => Err(e.into()),
                // The child continues with what this thread owns: a socket
                // and procfs files of its own.
                Ok(None) => {
                    self.proc = Process::new(&self.proc.socket, &child);
                    self.tid = 0;
                    self.conn = connect(&self.proc.socket, &child);
                    return Next::Listen;
                }
                Ok(Some(pid)) => Ok(Reply::Value(pid as u64)),
            },
            Op::Pin { addr, len, kind } => self.pin(addr, len, kind),
            Op::ObservePin { pin } => match self.gups.get(&pin).map(|g| g.first_byte()) {
                Some(Ok(byte)) => {
                    Ok(Reply::Observed(Box::new(Observation { byte, via_gup: true, ..Default::default() })))
                }
                _ => Err(Refused::Errno(Errno::EINVAL)),
            },
            Op::Unpin { pin } => match self.gups.remove(&pin) {
                Some(_) => Ok(Reply::Done),
                None => Err(Refused::Errno(Errno::EINVAL)),
            },
            Op::Mmap(req) => mmap(req),
            Op::CreateFile { kind, size } => files::create_file(kind, size),
            Op::Close { file } => done(sys::close(file)),
            Op::Unlink { file } => files::unlink(file),
            Op::ShmGet { size, hugetlb } => value(sys::shmget(size, hugetlb.map(files::huge_size_bits))),
            Op::ShmAt { shm, readonly } => value(sys::shmat(shm, readonly)),
            Op::ShmDt { addr } => done(sys::shmdt(addr)),
            Op::ShmRm { shm } => done(sys::shm_rmid(shm)),
            Op::AddSeals { file, seals } => done(sys::seals(file, Some(seals)).map(|_| ())),
            Op::Fallocate { file, offset, len, keep_size } => files::fallocate(file, offset, len, keep_size),
            Op::Pwrite { file, offset, data } => files::pwrite(file, offset, &data),
            Op::Pread { file, offset, len } => files::pread(file, offset, len),
            Op::ObserveFile { file, offset } => files::observe_file(&self.proc.procfs, file, offset),
            Op::Ftruncate { file, size } => crate::truncate_guard::ftruncate(file, size),
            Op::PunchHole { file, offset, len } => {
                let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                done(sys::fallocate(file, mode, offset, len))
            }
            Op::Munmap { addr, len } => done(sys::munmap(addr, len)),
            Op::Mprotect { addr, len, prot } => done(sys::mprotect(addr, len, prot.0)),
            Op::Madvise { addr, len, advice } => madvise(addr, len, advice),
            Op::Mlock { addr, len, lock } => done(sys::mlock(addr, len, lock)),
            Op::ClearSoftDirty => done(std::fs::write("/proc/self/clear_refs", "4")),
            Op::SetCpu { cpu } => {
                PLACED.store(true, Release);
                crate::sys::run_on_cpu(cpu).map(|()| Reply::Done).map_err(Refused::Unobservable)
            }
            Op::Mbind { addr, len, mode, nodes, flags } => done(sys::mbind(addr, len, mode, nodes, flags)),
            Op::MovePages { addr, len, node, all } => {
                let pages: Vec<u64> = (addr..addr + len).step_by(PAGE as usize).collect();
                sys::move_pages(&pages, node, all)
                    .map(|(unmoved, status)| Reply::Moved { unmoved, status })
                    .map_err(Refused::from)
            }
            Op::Mremap { addr, len, new_len, to, dontunmap } => mremap(addr, len, new_len, to, dontunmap),
            Op::Access { addr, len, access } => access_memory(&self.proc, addr, len, access),
            Op::Userfaultfd { sigbus } => self.proc.uffds.make(sigbus, |handler| {
                fence_off_next_stack();
                let builder = std::thread::Builder::new().name("uffd handler".into()).stack_size(THREAD_STACK as usize);
                builder.spawn(handler).map(|_| ())
            }),
            Op::Uffd { uffd, call } => self.proc.uffds.call(uffd, call),
            Op::Observe { addr, len } => observe(&self.proc.procfs, addr, len),
            Op::ObserveZeroPage => observe_zero_page(&self.proc.procfs),
            Op::Peek { addr } => observe(&self.proc.procfs, addr, PAGE).map(|r| match r {
                Reply::Observed(o) => {
                    let file = maps().iter().any(|v| v.start <= addr && addr < v.end && v.file);
                    let cached = file && sys::page_resident(addr & !(PAGE - 1)).unwrap_or(false);
                    Reply::Peeked(Peek { page: o.page, byte: o.byte, cached, fields: Vec::new() })
                }
                r => r,
            }),
        })
    }

    /// Takes GUP references: FOLL_GET through vmsplice(), FOLL_PIN through
    /// an io_uring fixed buffer; a range that is not mapped is EFAULT.
    fn pin(&mut self, addr: u64, len: u64, kind: GupKind) -> Answer {
        let maps = maps();
        let mapped = (addr..addr + len).step_by(PAGE as usize).all(|a| check_access(&maps, a, false).is_ok());
        let taken = match kind {
            _ if !mapped => return Err(Refused::Errno(Errno::EFAULT)),
            GupKind::Get => HostGup::vmsplice(addr, len),
            GupKind::Pin { .. } => Uring::register(addr, len).map(HostGup::Uring),
        };
        let g = taken.map_err(Refused::from)?;
        self.next_gup += 1;
        self.gups.insert(self.next_gup, g);
        Ok(Reply::Value(self.next_gup))
    }
}

fn mmap(req: MmapRequest) -> Answer {
    let MmapRequest { at, len, prot, fixed, populate, shared, hugetlb, noreserve, locked, file } = req;
    let flags = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE }
        | hugetlb.map_or(0, |size| libc::MAP_HUGETLB | crate::files::huge_size_bits(size))
        | if noreserve { libc::MAP_NORESERVE } else { 0 }
        | if file.is_none() { libc::MAP_ANONYMOUS } else { 0 }
        | if fixed { libc::MAP_FIXED } else { 0 }
        | if populate { libc::MAP_POPULATE } else { 0 }
        | if locked { libc::MAP_LOCKED } else { 0 };
    let (fd, offset) = file.map_or((-1, 0), |(fd, off)| (fd as i32, off));
    value(sys::mmap(at.unwrap_or(0), len, prot.0, flags, fd, offset))
}

fn madvise(addr: u64, len: u64, advice: Advice) -> Answer {
    // The folios MADV_FREE and MADV_COLD move wait in the CPU's LRU batch
    // (`lru_lazyfree`, `lru_deactivate`), and those MADV_PAGEOUT cannot
    // reclaim go back through its `lru_add` batch, each with a reference
    // that a COW fault drains only from its own CPU: the calling thread
    // goes to the worker's first CPU (unless the scenario placed it), and
    // the threads it starts from then on stay on their creator's (its
    // children's too), so that one batch holds them, as in the model.
    if matches!(advice, Advice::Free | Advice::Cold | Advice::PageOut) {
        THREADS_ON_ONE_CPU.store(true, Release);
        if !PLACED.load(Acquire) {
            run_on_node0(true);
        }
    }
    let a = match advice {
        Advice::DontNeed => libc::MADV_DONTNEED,
        Advice::HugePage => libc::MADV_HUGEPAGE,
        Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
        Advice::DontFork => libc::MADV_DONTFORK,
        Advice::DoFork => libc::MADV_DOFORK,
        Advice::Remove => libc::MADV_REMOVE,
        Advice::PopulateRead => libc::MADV_POPULATE_READ,
        Advice::PopulateWrite => libc::MADV_POPULATE_WRITE,
        Advice::PageOut => libc::MADV_PAGEOUT,
        Advice::Cold => libc::MADV_COLD,
        Advice::Collapse => libc::MADV_COLLAPSE,
        Advice::Mergeable => libc::MADV_MERGEABLE,
        Advice::Unmergeable => libc::MADV_UNMERGEABLE,
        Advice::Free => libc::MADV_FREE,
    };
    done(sys::madvise(addr, len, a))
}

fn mremap(addr: u64, len: u64, new_len: u64, to: Option<u64>, dontunmap: bool) -> Answer {
    let (flags, target) = match to {
        Some(t) => (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, t),
        None => (libc::MREMAP_MAYMOVE, 0),
    };
    let flags = flags | if dontunmap { libc::MREMAP_DONTUNMAP } else { 0 };
    value(sys::mremap(addr, len, new_len, flags, target))
}

/// `ZERO_PAGE(0)`, through a one-page private anonymous mapping made for
/// the purpose: a read fault maps the zero page there (no THP fits).
fn observe_zero_page(procfs: &Procfs) -> Answer {
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    let p = sys::mmap(0, PAGE, libc::PROT_READ as u32, flags, -1, 0)?;
    // The mapping is readable: the read faults in the zero page.
    let byte = sys::read_byte(p);
    let page = procfs.page_info(p);
    sys::munmap(p, PAGE)?;
    let page = page.map_err(Refused::Unobservable)?;
    // Soft-dirty would tell of the mapping made for the purpose, not the page.
    let o = Observation { page, byte, ..Default::default() }.unsupported("soft_dirty");
    Ok(Reply::Observed(Box::new(o)))
}

/// The first page of a range as pagemap and kpageflags report it, the sums
/// over the range, and the byte at `addr` if the page is present and readable.
fn observe(procfs: &Procfs, addr: u64, len: u64) -> Answer {
    let (mut page, range) = match (procfs.page_info(addr), procfs.range_info(addr, len)) {
        (Ok(page), Ok(range)) => (page, range),
        (Err(why), _) | (_, Err(why)) => return Err(Refused::Unobservable(why)),
    };
    let readable = check_access(&maps(), addr, false).is_ok();
    let byte = if page.present && readable { sys::read_byte(addr) } else { 0 };
    let (pgtables_kb, vma_count) = (crate::status::vm_pte_kb(), maps().len() as u64);
    // A mapped page that kpageflags shows with no flags at all (not even
    // KPF_MMAP) had its struct page given up on (see `procfs::PageFacts`):
    // its kpagecount is 0 then too, and tells nothing.
    let unreadable = page.present && !page.zero_page && procfs.kpageflags_lost(page.pfn);
    if page.present && !page.zero_page {
        page.mapcount = procfs.kpagecount(page.pfn);
    }
    let process = crate::status::process_info(addr);
    let o = Observation { page, range, byte, pgtables_kb, vma_count, process, ..Default::default() };
    let o = if unreadable { o.unsupported("kpagecount") } else { o };
    let order_unknown = unreadable && crate::procfs::order_without_kpageflags(addr, o.page.pmd_mapped).is_none();
    let o = if order_unknown { o.unsupported("folio_order").unsupported("folio_kb") } else { o };
    // Before 6.2 VmSwap may lag (SPLIT_RSS_COUNTING): not recorded.
    let o = if crate::release::version().counts_rss_exactly() { o } else { o.except(&["swap_total_kb".into()]) };
    let o = if crate::procfs::soft_dirty() { o } else { o.unsupported("soft_dirty") };
    Ok(Reply::Observed(Box::new(o)))
}

/// The stack size of a worker's thread (Rust's default, asked for
/// explicitly so that the fence below fits it).
const THREAD_STACK: u64 = 2 << 20;

/// Places a fence where the next thread's stack would otherwise touch a
/// scenario mapping: the kernel puts the stack (glibc's `mmap` of the
/// stack and its guard page) in the highest gap that fits, right below the
/// lowest mapping, and a scenario mapping next to it would merge with it
/// after a flag change (both `VM_NOHUGEPAGE`, `MAP_STACK`) and share its
/// anon_vma. A shared anonymous mapping (a shmem file of its own, which
/// merges with nothing) is left between the two: reserve the gap with the
/// fence on top, then free the stack's part for glibc to take.
fn fence_off_next_stack() {
    const FENCE: u64 = 64 << 10;
    let gap = THREAD_STACK + 2 * PAGE + FENCE;
    let shared = libc::MAP_SHARED | libc::MAP_ANONYMOUS;
    if let Ok(at) = sys::mmap(0, gap, libc::PROT_NONE as u32, shared, -1, 0) {
        let _ = sys::munmap(at, gap - FENCE);
    }
}

/// Faults in the page at `addr` of a file mapping the way the access would
/// (`MADV_POPULATE_READ` / `_WRITE`), so that a fault ending in SIGBUS
/// (past the end of the file, a hugetlb pool with no page for a copy on
/// write) comes back as an error (EFAULT from madvise) instead of killing
/// the worker. A page already mapped needs no fault that could end so,
/// and gets none, unless a write to a private mapping may copy it: the
/// access itself does what a CPU's would (a populate would also dirty a
/// shared folio, `FOLL_TOUCH`, where a CPU write through a writable entry
/// dirties only the entry; a copy is dirty either way). Other mappings
/// need nothing.
fn fault_in_file_page(procfs: &Procfs, maps: &[MapsEntry], addr: u64, write: bool) -> Result<(), Refused> {
    let Some(v) = maps.iter().find(|v| v.start <= addr && addr < v.end && v.file) else { return Ok(()) };
    if !(write && v.private) && procfs.present(addr) {
        return Ok(());
    }
    // Nor does a page inside a file of small pages (unless a truncation
    // races the access): the access faults it in itself. A populate there
    // was seen to end in the memory cgroup's OOM killer on 6.18 where the
    // CPU's own faults reclaimed (about half the runs of a 128M shmem
    // fill in a 64M cgroup, scenarios/swap/25).
    if inside_small_page_file(v, addr) {
        return Ok(());
    }
    let advice = if write { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
    match sys::madvise(addr & !(PAGE - 1), PAGE, advice) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(Refused::Errno(Errno::SIGBUS)),
        Err(e) => Err(e.into()),
    }
}

/// Whether the page at `addr` of the file mapping `v` lies inside its
/// file, and the file's pages are small (not hugetlbfs, whose block size
/// is its huge page size); false if the file cannot be looked at.
fn inside_small_page_file(v: &MapsEntry, addr: u64) -> bool {
    use std::os::unix::fs::MetadataExt;
    let file = std::fs::metadata(format!("/proc/self/map_files/{:x}-{:x}", v.start, v.end));
    file.is_ok_and(|m| m.blksize() <= PAGE && v.offset + (addr - v.start) < m.len())
}

/// Performs an access page by page, stopping at the first page the VMAs
/// forbid, as a CPU would (with an error instead of SIGSEGV).
fn access_memory(proc: &Process, addr: u64, len: u64, access: Access) -> Answer {
    let procfs = &proc.procfs;
    let maps = maps();
    let write = !matches!(access, Access::Read { .. });
    let every_byte = match access {
        Access::Write { every_byte, .. } | Access::Read { every_byte } => every_byte,
        Access::Pattern { .. } => true,
    };
    let mut out = Vec::new();
    let end = addr + len;
    let mut at = if every_byte { addr } else { addr & !(PAGE - 1) };
    while at < end {
        check_access(&maps, at, write).map_err(Refused::Errno)?;
        fault_in_file_page(procfs, &maps, at, write)?;
        proc.uffds.fault_in(at, write)?;
        let next = if every_byte { ((at / PAGE) + 1) * PAGE } else { at + PAGE };
        let span = if every_byte { at..next.min(end) } else { at..at + 1 };
        // The page lies in a VMA that permits this access (checked above).
        for a in span {
            match access {
                Access::Write { val, .. } => sys::write_byte(a, val),
                Access::Pattern { origin, seed } => sys::write_byte(a, pattern_byte(a - origin, seed)),
                Access::Read { .. } => out.push(sys::read_byte(a)),
            }
        }
        at = next;
    }
    proc.uffds.take_unhandled()?;
    Ok(if write { Reply::Done } else { Reply::Bytes(out) })
}
