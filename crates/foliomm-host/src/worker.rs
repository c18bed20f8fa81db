//! The worker: the program each scenario process runs. Each of its threads
//! reads one request per line from its own socket, performs it on the
//! process's address space with real system calls and memory accesses, and
//! answers one line. `SpawnThread` starts an OS thread with a socket of its
//! own; `fork` forks the worker itself: the child connects to the controller
//! with a new socket.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use foliomm::mm::Advice;
use foliomm::Errno;
use std::collections::HashMap;

use foliomm_scenario::backend::{pattern_byte, Access, GupKind, Observation};

use crate::files;
use crate::gup::{HostGup, Uring};

use crate::procfs::{check_access, maps, MapsEntry, Procfs};
use crate::{Request, Response};

const PAGE: u64 = 4096;

/// Connects to the controller and says hello; a worker whose controller is
/// gone (killed) has no one to serve and exits.
fn connect(socket: &Path, name: &str) -> BufReader<UnixStream> {
    let hello = serde_json::to_string(&Request::Hello { name: name.into() }).unwrap();
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
}

impl Process {
    fn new(socket: &Path, name: &str) -> Arc<Process> {
        // An open /proc/self/pagemap stays bound to the process that opened
        // it: a forked child opens its own.
        let procfs = Procfs::open().expect("cannot open /proc/self/pagemap or /proc/kpageflags (needs root)");
        Arc::new(Process { socket: socket.into(), name: name.into(), procfs })
    }
}

/// Runs the worker until the controller says `Exit` or goes away.
pub fn worker_main(socket: &Path, name: &str) -> ! {
    // Children are reaped by the kernel; the controller learns of an exit
    // when the child's socket closes (after its address space is gone).
    // SAFETY: setting SIGCHLD to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    serve(Process::new(socket, name), 0);
    std::process::exit(0)
}

/// Serves thread `tid` of the worker process: one request per line from its
/// own socket, until `Exit` (the thread ends; for thread 0 the process) or
/// until the controller goes away.
fn serve(mut proc: Arc<Process>, mut tid: u32) {
    let thread_name = |p: &Process, tid: u32| if tid == 0 { p.name.clone() } else { format!("{}/{tid}", p.name) };
    let mut conn = connect(&proc.socket, &thread_name(&proc, tid));
    let mut gups: HashMap<u64, HostGup> = HashMap::new();
    let mut line = String::new();
    loop {
        line.clear();
        if conn.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let req: Request = serde_json::from_str(&line).expect("bad request from the controller");
        let resp = match req {
            Request::Exit if tid == 0 => std::process::exit(0),
            Request::Exit => return,
            Request::SpawnThread { tid: new } => {
                let p = proc.clone();
                match std::thread::Builder::new().name(thread_name(&p, new)).spawn(move || serve(p, new)) {
                    Ok(_) => Response::Value(new as u64),
                    Err(_) => Response::Err(Errno::ENOMEM),
                }
            }
            Request::Fork { child } => {
                // SAFETY: fork() in a process that may have other threads:
                // the child has only this one, and continues with what this
                // thread owns (its socket is replaced, the procfs files are
                // reopened); it takes no lock another thread may hold.
                match unsafe { libc::fork() } {
                    -1 => Response::os_error(),
                    0 => {
                        proc = Process::new(&proc.socket, &child);
                        tid = 0;
                        conn = connect(&proc.socket, &child);
                        continue;
                    }
                    pid => Response::Value(pid as u64),
                }
            }
            Request::Gup { id, addr, len, kind } => {
                let maps = maps();
                let mapped = (addr..addr + len).step_by(PAGE as usize).all(|a| check_access(&maps, a, false).is_ok());
                let taken = match kind {
                    _ if !mapped => Err(Response::Err(Errno::EFAULT)),
                    GupKind::Get => HostGup::vmsplice(addr, len).map_err(|_| Response::os_error()),
                    GupKind::Pin { .. } => {
                        Uring::register(addr, len).map(HostGup::Uring).map_err(|_| Response::os_error())
                    }
                };
                match taken {
                    Ok(g) => {
                        gups.insert(id, g);
                        Response::Value(id)
                    }
                    Err(e) => e,
                }
            }
            Request::GupByte { id } => match gups.get(&id).map(|g| g.first_byte()) {
                Some(Ok(b)) => Response::Value(b as u64),
                _ => Response::Err(Errno::EINVAL),
            },
            Request::Ungup { id } => match gups.remove(&id) {
                Some(_) => Response::Value(0),
                None => Response::Err(Errno::EINVAL),
            },
            other => perform(&proc.procfs, other),
        };
        let mut out = serde_json::to_string(&resp).unwrap();
        out.push('\n');
        if conn.get_mut().write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

fn perform(procfs: &Procfs, req: Request) -> Response {
    match req {
        Request::Mmap { at, len, prot, fixed, populate, shared, hugetlb, noreserve, file } => {
            let flags = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE }
                | hugetlb.map_or(0, |size| libc::MAP_HUGETLB | crate::files::huge_size_bits(size))
                | if noreserve { libc::MAP_NORESERVE } else { 0 }
                | if file.is_none() { libc::MAP_ANONYMOUS } else { 0 }
                | if fixed { libc::MAP_FIXED } else { 0 }
                | if populate { libc::MAP_POPULATE } else { 0 };
            let (fd, offset) = file.map_or((-1, 0), |(fd, off)| (fd as i32, off as libc::off_t));
            // SAFETY: an anonymous or memfd mapping; MAP_FIXED may replace
            // scenario mappings, which no Rust reference of the worker points into.
            let p = unsafe { libc::mmap(at.unwrap_or(0) as *mut _, len as usize, prot as i32, flags, fd, offset) };
            if p == libc::MAP_FAILED {
                Response::os_error()
            } else {
                Response::Value(p as u64)
            }
        }
        Request::CreateFile { kind, size } => files::create_file(kind, size),
        Request::Fallocate { fd, offset, len, keep_size } => files::fallocate(fd, offset, len, keep_size),
        Request::Pwrite { fd, offset, data } => files::pwrite(fd, offset, &data),
        Request::Pread { fd, offset, len } => files::pread(fd, offset, len),
        Request::ObserveFile { fd, offset } => files::observe_file(procfs, fd, offset),
        // SAFETY: ftruncate of a scenario file's descriptor.
        Request::Ftruncate { fd, size } => {
            Response::of_status(unsafe { libc::ftruncate(fd as i32, size as libc::off_t) })
        }
        Request::PunchHole { fd, offset, len } => {
            let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
            // SAFETY: fallocate on a scenario file's descriptor.
            Response::of_status(unsafe { libc::fallocate(fd as i32, mode, offset as libc::off_t, len as libc::off_t) })
        }
        // SAFETY: a scenario mapping, which no Rust reference of the worker
        // points into; the kernel validates the range.
        Request::Munmap { addr, len } => Response::of_status(unsafe { libc::munmap(addr as *mut _, len as usize) }),
        Request::Mprotect { addr, len, prot } => {
            // SAFETY: as for munmap.
            Response::of_status(unsafe { libc::mprotect(addr as *mut _, len as usize, prot as i32) })
        }
        Request::Madvise { addr, len, advice } => {
            let a = match advice {
                Advice::DontNeed => libc::MADV_DONTNEED,
                Advice::HugePage => libc::MADV_HUGEPAGE,
                Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
                Advice::DontFork => libc::MADV_DONTFORK,
                Advice::DoFork => libc::MADV_DOFORK,
                Advice::Remove => libc::MADV_REMOVE,
            };
            // SAFETY: as for munmap.
            Response::of_status(unsafe { libc::madvise(addr as *mut _, len as usize, a) })
        }
        Request::Mremap { addr, len, new_len, to } => {
            let (flags, target) = match to {
                Some(t) => (libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED, t),
                None => (libc::MREMAP_MAYMOVE, 0),
            };
            // SAFETY: as for munmap (MREMAP_FIXED replaces only scenario mappings).
            let p = unsafe {
                libc::mremap(addr as *mut _, len as usize, new_len as usize, flags, target as *mut libc::c_void)
            };
            if p == libc::MAP_FAILED {
                Response::os_error()
            } else {
                Response::Value(p as u64)
            }
        }
        Request::Access { addr, len, access } => access_memory(addr, len, access),
        Request::Observe { addr, len } => {
            let (page, range) = match (procfs.page_info(addr), procfs.range_info(addr, len)) {
                (Ok(page), Ok(range)) => (page, range),
                (Err(why), _) | (_, Err(why)) => return Response::Unobservable(why),
            };
            let readable = check_access(&maps(), addr, false).is_ok();
            // SAFETY: the page is mapped and readable (checked just above).
            let byte = if page.present && readable { unsafe { (addr as *const u8).read_volatile() } } else { 0 };
            Response::Observed(Observation { page, range, byte, ..Default::default() })
        }
        Request::Hello { .. } | Request::Exit | Request::Fork { .. } | Request::SpawnThread { .. } => unreachable!(),
        Request::Gup { .. } | Request::GupByte { .. } | Request::Ungup { .. } => unreachable!(),
    }
}

/// Faults in the page at `addr` of a file mapping the way the access would
/// (`MADV_POPULATE_READ` / `_WRITE`), so that a fault ending in SIGBUS
/// (a hugetlb pool with no page) comes back as an error (EFAULT from
/// madvise) instead of killing the worker. Other mappings need nothing.
fn fault_in_file_page(maps: &[MapsEntry], addr: u64, write: bool) -> Result<(), Response> {
    if !maps.iter().any(|v| v.start <= addr && addr < v.end && v.file) {
        return Ok(());
    }
    let advice = if write { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
    // SAFETY: madvise only faults in the page, which lies in a VMA the
    // access may use (checked by the caller); no memory is freed.
    let r = unsafe { libc::madvise((addr & !(PAGE - 1)) as *mut libc::c_void, PAGE as usize, advice) };
    match r {
        0 => Ok(()),
        _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EFAULT) => Err(Response::Err(Errno::SIGBUS)),
        _ => Err(Response::os_error()),
    }
}

/// Performs an access page by page, stopping at the first page the VMAs
/// forbid, as a CPU would (with an error instead of SIGSEGV).
fn access_memory(addr: u64, len: u64, access: Access) -> Response {
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
        let allowed = check_access(&maps, at, write).map_err(Response::Err);
        if let Err(r) = allowed.and_then(|()| fault_in_file_page(&maps, at, write)) {
            return r;
        }
        let next = if every_byte { ((at / PAGE) + 1) * PAGE } else { at + PAGE };
        let span = if every_byte { at..next.min(end) } else { at..at + 1 };
        for a in span {
            let p = a as *mut u8;
            // SAFETY: the page lies in a VMA that permits this access
            // (checked above), and only scenario mappings are touched.
            unsafe {
                match access {
                    Access::Write { val, .. } => p.write_volatile(val),
                    Access::Pattern { origin, seed } => p.write_volatile(pattern_byte(a - origin, seed)),
                    Access::Read { .. } => out.push(p.read_volatile()),
                }
            }
        }
        at = next;
    }
    if write {
        Response::Value(0)
    } else {
        Response::Bytes(out)
    }
}
