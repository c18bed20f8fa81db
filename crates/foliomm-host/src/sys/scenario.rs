//! The scenario worker's system calls: on its own address space (map,
//! unmap, protect, advise, remap, touch bytes), on the scenario's files
//! (by descriptor number, as the protocol names them), and the process
//! calls (fork, SIGCHLD).
//!
//! Why these are safe functions: a worker process's scenario mappings
//! belong to the scenario, and no Rust value of the worker points into
//! them; the kernel validates every address range and descriptor, so a
//! wrong one is an errno, and the worker checks an access against its VMAs
//! (`/proc/self/maps`) before it touches a byte. Only the worker calls
//! them (the functions are `pub(crate)`).

use std::ffi::CString;
use std::io;

/// The result of a call that returns 0 or -1 with `errno`.
fn status(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `mmap(at, len, prot, flags, fd, offset)`; the address mapped.
pub(crate) fn mmap(at: u64, len: u64, prot: u32, flags: i32, fd: i32, offset: u64) -> io::Result<u64> {
    // SAFETY: a scenario mapping (module doc); MAP_FIXED replaces only
    // scenario mappings, which no Rust reference points into.
    let p = unsafe { libc::mmap(at as *mut _, len as usize, prot as i32, flags, fd, offset as libc::off_t) };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p as u64)
    }
}

/// `munmap(addr, len)`.
pub(crate) fn munmap(addr: u64, len: u64) -> io::Result<()> {
    // SAFETY: a scenario range (module doc); the kernel validates it.
    status(unsafe { libc::munmap(addr as *mut _, len as usize) })
}

/// `mprotect(addr, len, prot)`.
pub(crate) fn mprotect(addr: u64, len: u64, prot: u32) -> io::Result<()> {
    // SAFETY: as for munmap.
    status(unsafe { libc::mprotect(addr as *mut _, len as usize, prot as i32) })
}

/// `mlock(addr, len)` (`lock`) or `munlock(addr, len)`.
pub(crate) fn mlock(addr: u64, len: u64, lock: bool) -> io::Result<()> {
    // SAFETY: as for munmap (neither changes what memory holds).
    status(unsafe {
        if lock {
            libc::mlock(addr as *const _, len as usize)
        } else {
            libc::munlock(addr as *const _, len as usize)
        }
    })
}

/// `move_pages(0, pages, nodes, status, flags)` on the caller's process,
/// every node `node` (a query without); `all` for `MPOL_MF_MOVE_ALL`.
/// Returns the pages not migrated and each status, `None` where the
/// kernel wrote none.
pub(crate) fn move_pages(pages: &[u64], node: Option<i32>, all: bool) -> io::Result<(u64, Vec<Option<i32>>)> {
    use foliomm::internals::mm::mempolicy::{MPOL_MF_MOVE, MPOL_MF_MOVE_ALL};
    const UNWRITTEN: i32 = i32::MIN;
    let nodes = node.map(|n| vec![n; pages.len()]);
    let mut status = vec![UNWRITTEN; pages.len()];
    let flags = if all { MPOL_MF_MOVE_ALL } else { MPOL_MF_MOVE };
    // SAFETY: the arrays hold `pages.len()` entries each and outlive the
    // call; the kernel only reads `pages` and `nodes` and writes `status`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len(),
            pages.as_ptr(),
            nodes.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
            status.as_mut_ptr(),
            flags,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((r as u64, status.into_iter().map(|s| (s != UNWRITTEN).then_some(s)).collect()))
}

/// `mbind(addr, len, mode, &nodes, 65, flags)`: one word of node bits
/// (`get_nodes` reads `maxnode - 1` of them); no mask for the default policy.
pub(crate) fn mbind(addr: u64, len: u64, mode: u32, nodes: u64, flags: u32) -> io::Result<()> {
    let (mask, maxnode) = if mode == 0 && nodes == 0 { (std::ptr::null(), 0) } else { (&nodes as *const u64, 65) };
    // SAFETY: `mask` is null or points to one u64 that outlives the call,
    // which reads `maxnode - 1` bits of it; mbind changes no memory's
    // contents, only where pages live.
    let r = unsafe { libc::syscall(libc::SYS_mbind, addr, len, mode, mask, maxnode as u64, flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The node of the caller's page at `addr` (`move_pages` without nodes);
/// 0 where the kernel names none.
pub(crate) fn page_node(addr: u64) -> u32 {
    move_pages(&[addr], None, false).map_or(0, |(_, s)| s[0].and_then(|n| u32::try_from(n).ok()).unwrap_or(0))
}

/// `madvise(addr, len, advice)`.
pub(crate) fn madvise(addr: u64, len: u64, advice: i32) -> io::Result<()> {
    // SAFETY: as for munmap.
    status(unsafe { libc::madvise(addr as *mut _, len as usize, advice) })
}

/// `mremap(addr, len, new_len, flags, target)`; the new address.
pub(crate) fn mremap(addr: u64, len: u64, new_len: u64, flags: i32, target: u64) -> io::Result<u64> {
    // SAFETY: as for munmap (MREMAP_FIXED replaces only scenario mappings).
    let p = unsafe { libc::mremap(addr as *mut _, len as usize, new_len as usize, flags, target as *mut libc::c_void) };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p as u64)
    }
}

/// The byte at `addr`, which the caller found readable in its VMAs.
pub(crate) fn read_byte(addr: u64) -> u8 {
    // SAFETY: a readable scenario page (checked by the caller); volatile,
    // as another thread of the scenario may write it.
    unsafe { (addr as *const u8).read_volatile() }
}

/// Writes `val` at `addr`, which the caller found writable in its VMAs.
pub(crate) fn write_byte(addr: u64, val: u8) {
    // SAFETY: a writable scenario page (checked by the caller).
    unsafe { (addr as *mut u8).write_volatile(val) }
}

/// `mincore` of the one page at `addr`: whether it is resident.
pub(crate) fn page_resident(addr: u64) -> io::Result<bool> {
    let mut vec = 0u8;
    // SAFETY: one page at a page-aligned scenario address; `vec` holds its
    // one entry.
    status(unsafe { libc::mincore(addr as *mut _, 4096, &mut vec) })?;
    Ok(vec & 1 != 0)
}

/// `fork()`: `Some(pid)` in the parent, `None` in the child.
pub(crate) fn fork() -> io::Result<Option<u32>> {
    // SAFETY: fork() in a process that may have other threads: the child
    // has only the calling one, and the worker continues there with what
    // that thread owns (its socket is replaced, the procfs files are
    // reopened); it takes no lock another thread may hold.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(None),
        pid => Ok(Some(pid as u32)),
    }
}

/// Lets the kernel reap the worker's children (SIGCHLD ignored).
pub(crate) fn reap_children_automatically() {
    // SAFETY: setting SIGCHLD to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
}

/// Keeps the worker's own heap out of the scenario's way: malloc takes
/// memory from the brk heap and one arena (`M_ARENA_MAX` 1, the largest
/// `M_MMAP_THRESHOLD`) instead of `mmap`ing blocks of its own, which the
/// kernel would place next to a scenario's mappings and merge them with
/// (a scenario VMA would then share the worker's anon_vma, and fork copy
/// its zero-page entries).
pub(crate) fn keep_heap_apart() {
    // SAFETY: mallopt only tunes the allocator; called before any thread.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

/// `memfd_create("foliomm", flags)`: the new descriptor's number (kept
/// open for the run: the protocol names files by it).
pub(crate) fn memfd_create(flags: libc::c_uint) -> io::Result<i32> {
    // SAFETY: the name is NUL-terminated.
    let fd = unsafe { libc::memfd_create(c"foliomm".as_ptr(), flags) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// `close(fd)`.
pub(crate) fn close(fd: u64) -> io::Result<()> {
    // SAFETY: a descriptor number the scenario made; the kernel validates it.
    status(unsafe { libc::close(fd as i32) })
}

/// `ftruncate(fd, size)`.
pub(crate) fn ftruncate(fd: u64, size: u64) -> io::Result<()> {
    // SAFETY: a descriptor number; the kernel validates it.
    status(unsafe { libc::ftruncate(fd as i32, size as libc::off_t) })
}

/// `fallocate(fd, mode, offset, len)`.
pub(crate) fn fallocate(fd: u64, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: as for ftruncate.
    status(unsafe { libc::fallocate(fd as i32, mode, offset as libc::off_t, len as libc::off_t) })
}

/// `pwrite(fd, data, offset)`; the bytes written.
pub(crate) fn pwrite(fd: u64, offset: u64, data: &[u8]) -> io::Result<u64> {
    // SAFETY: the buffer is `data`, valid for its length.
    let n = unsafe { libc::pwrite(fd as i32, data.as_ptr().cast(), data.len(), offset as libc::off_t) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as u64)
    }
}

/// `pread` of up to `len` bytes at `offset`.
pub(crate) fn pread(fd: u64, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    // SAFETY: the buffer is valid for `len` bytes.
    let n = unsafe { libc::pread(fd as i32, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// `fstat(fd)`.
pub(crate) fn fstat(fd: u64) -> io::Result<libc::stat> {
    // SAFETY: fstat into a zeroed stat buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid stat buffer; the kernel validates `fd`.
    status(unsafe { libc::fstat(fd as i32, &mut st) })?;
    Ok(st)
}

/// Whether `fd` is a file on hugetlbfs (`fstatfs`'s `f_type`).
pub(crate) fn on_hugetlbfs(fd: u64) -> io::Result<bool> {
    // SAFETY: fstatfs into a zeroed statfs buffer.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid statfs buffer; the kernel validates `fd`.
    status(unsafe { libc::fstatfs(fd as i32, &mut st) })?;
    Ok(st.f_type == libc::HUGETLBFS_MAGIC)
}

/// `lseek(fd, offset, whence)`: the offset it lands on.
pub(crate) fn lseek(fd: u64, offset: u64, whence: i32) -> io::Result<u64> {
    // SAFETY: no memory is passed; the kernel validates `fd`.
    let r = unsafe { libc::lseek(fd as i32, offset as libc::off_t, whence) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u64)
    }
}

/// `fcntl(fd, F_ADD_SEALS, seals)`, or `F_GET_SEALS` when `seals` is None;
/// the seals now.
pub(crate) fn seals(fd: u64, seals: Option<u32>) -> io::Result<u32> {
    // SAFETY: integer arguments only; the kernel validates `fd`.
    let r = unsafe {
        match seals {
            Some(s) => libc::fcntl(fd as i32, libc::F_ADD_SEALS, s as libc::c_int),
            None => libc::fcntl(fd as i32, libc::F_GET_SEALS),
        }
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u32)
    }
}

/// `unlinkat(dir, name, 0)`.
pub(crate) fn unlinkat(dir: i32, name: &std::ffi::CStr) -> io::Result<()> {
    // SAFETY: a NUL-terminated name; the kernel validates `dir`.
    status(unsafe { libc::unlinkat(dir, name.as_ptr(), 0) })
}

/// Mounts a tmpfs with `options` on the empty directory `dir`.
pub(crate) fn mount_tmpfs(dir: &CString, options: &CString) -> io::Result<()> {
    // SAFETY: NUL-terminated strings.
    status(unsafe { libc::mount(c"tmpfs".as_ptr(), dir.as_ptr(), c"tmpfs".as_ptr(), 0, options.as_ptr().cast()) })
}

/// `open(path, flags, 0600)`: the descriptor's number.
pub(crate) fn open(path: &CString, flags: i32) -> io::Result<i32> {
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), flags, 0o600) };
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(fd)
    }
}

/// Detaches the mount at `dir` (`umount2(MNT_DETACH)`): open descriptors
/// keep it alive.
pub(crate) fn detach_mount(dir: &CString) {
    // SAFETY: a NUL-terminated path.
    unsafe { libc::umount2(dir.as_ptr(), libc::MNT_DETACH) };
}

/// `shmget(IPC_PRIVATE, size, IPC_CREAT | 0600 [| SHM_HUGETLB | size bits])`:
/// the segment's id.
pub(crate) fn shmget(size: u64, huge_bits: Option<libc::c_int>) -> io::Result<u64> {
    let flags = libc::IPC_CREAT | 0o600 | huge_bits.map_or(0, |b| libc::SHM_HUGETLB | b);
    // SAFETY: integer arguments only.
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, size as usize, flags) };
    if id < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(id as u64)
    }
}

/// `shmat(id, NULL, readonly ? SHM_RDONLY : 0)`: the address attached.
pub(crate) fn shmat(id: u64, readonly: bool) -> io::Result<u64> {
    let flags = if readonly { libc::SHM_RDONLY } else { 0 };
    // SAFETY: the kernel picks the address (a new scenario mapping).
    let p = unsafe { libc::shmat(id as libc::c_int, std::ptr::null(), flags) };
    if p as isize == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(p as u64)
    }
}

/// `shmdt(addr)`.
pub(crate) fn shmdt(addr: u64) -> io::Result<()> {
    // SAFETY: a scenario attach (module doc); the kernel validates it.
    status(unsafe { libc::shmdt(addr as *const libc::c_void) })
}

/// `shmctl(id, IPC_RMID, NULL)`.
pub(crate) fn shm_rmid(id: u64) -> io::Result<()> {
    // SAFETY: IPC_RMID reads no buffer.
    status(unsafe { libc::shmctl(id as libc::c_int, libc::IPC_RMID, std::ptr::null_mut()) })
}
