//! The worker's file steps: making a memfd or a tmpfs file, fallocate,
//! pwrite, pread, and observing a file's page in the page cache.
//!
//! A tmpfs file lives on a mount of its own with the scenario's `huge=`
//! option: the worker mounts a tmpfs on a fresh directory, creates the file
//! (named, or `O_TMPFILE`), and detaches the mount at once
//! (`umount2(MNT_DETACH)`): the open descriptor keeps it alive, nothing is
//! left in the mount table, and it goes away with the last descriptor.

use std::ffi::CString;

use foliomm::internals::folio::thp::ShmemHuge;
use foliomm::internals::machine::HugeSize;
use foliomm_scenario::op::FileKind;
use foliomm_scenario::{Observation, Reply};

use crate::procfs::Procfs;
use crate::protocol::{of_status, of_value, Answer, Refused};

const PAGE: u64 = 4096;

/// `memfd_create` or a tmpfs file, then `ftruncate` to `size`; answers the
/// descriptor, inherited by children forked later.
pub fn create_file(kind: FileKind, size: u64) -> Answer {
    let fd = match kind {
        // SAFETY: the name is NUL-terminated.
        FileKind::Memfd => unsafe { libc::memfd_create(c"foliomm".as_ptr(), 0) },
        // SAFETY: the name is NUL-terminated.
        FileKind::Hugetlbfs(page) => unsafe {
            libc::memfd_create(c"foliomm".as_ptr(), libc::MFD_HUGETLB | huge_size_bits(page) as libc::c_uint)
        },
        FileKind::Tmpfs { huge, named } => tmpfs_file(huge, named)?,
    };
    if fd < 0 {
        return Err(Refused::last_os_error());
    }
    // SAFETY: a descriptor this process just made.
    let r = unsafe { libc::ftruncate(fd, size as libc::off_t) };
    of_value(fd as u64, r != 0)
}

/// A file on a new tmpfs mount with `huge=`, the mount already detached.
fn tmpfs_file(huge: ShmemHuge, named: bool) -> Result<i32, Refused> {
    let dir = std::env::temp_dir().join(format!("foliomm-tmpfs-{}-{}", std::process::id(), crate::unique()));
    std::fs::create_dir(&dir).map_err(|e| Refused::OsError(e.raw_os_error().unwrap_or(0)))?;
    let cdir = CString::new(dir.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    let opts = CString::new(format!("huge={}", huge.name())).expect("no NUL");
    // SAFETY: NUL-terminated strings; a fresh, empty directory.
    let mounted = unsafe { libc::mount(c"tmpfs".as_ptr(), cdir.as_ptr(), c"tmpfs".as_ptr(), 0, opts.as_ptr().cast()) };
    if mounted != 0 {
        let e = Refused::last_os_error();
        let _ = std::fs::remove_dir(&dir);
        return Err(e);
    }
    let fd = if named {
        let path = CString::new(dir.join("file").into_os_string().into_encoded_bytes()).expect("no NUL");
        // SAFETY: a NUL-terminated path on the new mount.
        unsafe { libc::open(path.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600) }
    } else {
        // SAFETY: a NUL-terminated directory path.
        unsafe { libc::open(cdir.as_ptr(), libc::O_TMPFILE | libc::O_RDWR, 0o600) }
    };
    let open_err = (fd < 0).then(Refused::last_os_error);
    // SAFETY: the mount this function made; MNT_DETACH leaves it to the descriptor.
    unsafe { libc::umount2(cdir.as_ptr(), libc::MNT_DETACH) };
    let _ = std::fs::remove_dir(&dir);
    open_err.map_or(Ok(fd), Err)
}

/// `fallocate(keep_size ? FALLOC_FL_KEEP_SIZE : 0)`.
pub fn fallocate(fd: u64, offset: u64, len: u64, keep_size: bool) -> Answer {
    let mode = if keep_size { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
    // SAFETY: fallocate on a scenario file's descriptor.
    of_status(unsafe { libc::fallocate(fd as i32, mode, offset as libc::off_t, len as libc::off_t) })
}

/// `pwrite`; answers the bytes written.
pub fn pwrite(fd: u64, offset: u64, data: &[u8]) -> Answer {
    // SAFETY: the buffer is `data`, valid for its length.
    let n = unsafe { libc::pwrite(fd as i32, data.as_ptr().cast(), data.len(), offset as libc::off_t) };
    of_value(n as u64, n < 0)
}

/// `pread` of up to `len` bytes; answers the bytes read.
pub fn pread(fd: u64, offset: u64, len: u64) -> Answer {
    let mut buf = vec![0u8; len as usize];
    // SAFETY: the buffer is valid for `len` bytes.
    let n = unsafe { libc::pread(fd as i32, buf.as_mut_ptr().cast(), buf.len(), offset as libc::off_t) };
    if n < 0 {
        return Err(Refused::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(Reply::Bytes(buf))
}

/// The page at `offset` in the file's page cache: `mincore` on a one-page
/// mapping says whether it is cached without bringing it in; a cached page
/// inside the file is then read through the mapping (which maps the cached
/// folio, allocating nothing) to learn its frame and folio order.
pub fn observe_file(procfs: &Procfs, fd: u64, offset: u64) -> Answer {
    let page_off = offset & !(PAGE - 1);
    // SAFETY: a new read-only shared mapping of a scenario file, unmapped below.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), PAGE as usize, libc::PROT_READ, libc::MAP_SHARED, fd as i32, page_off as i64)
    };
    if p == libc::MAP_FAILED {
        return Err(Refused::last_os_error());
    }
    let mut vec = 0u8;
    // SAFETY: `p` is a one-page mapping; `vec` holds its one entry.
    let r = unsafe { libc::mincore(p, PAGE as usize, &mut vec) };
    // SAFETY: fstat into a zeroed stat buffer.
    let size = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd as i32, &mut st);
        st.st_size as u64
    };
    let mut o = Observation::default();
    if r == 0 && vec & 1 != 0 && offset < size {
        // SAFETY: the page is inside the file and cached: the read maps it.
        o.byte = unsafe { (p as *const u8).add((offset - page_off) as usize).read_volatile() };
        let info = match procfs.page_info(p as u64) {
            Ok(info) => info,
            Err(why) => return Err(Refused::Unobservable(why)),
        };
        (o.page.present, o.page.pfn, o.page.folio_order) = (true, info.pfn, info.folio_order);
    } else {
        o.page.present = r == 0 && vec & 1 != 0;
    }
    // SAFETY: the mapping made above.
    unsafe { libc::munmap(p, PAGE as usize) };
    Ok(Reply::Observed(o))
}

/// The page size bits of `MAP_HUGETLB` and `MFD_HUGETLB` (`MAP_HUGE_2MB`,
/// `MAP_HUGE_1GB`: log2 of the size, shifted by `MAP_HUGE_SHIFT`, which
/// equals `MFD_HUGE_SHIFT`).
pub fn huge_size_bits(size: HugeSize) -> libc::c_int {
    (size.bytes().trailing_zeros() as libc::c_int) << libc::MAP_HUGE_SHIFT
}
