//! The worker's file steps: making a memfd or a tmpfs file, fallocate,
//! pwrite, pread, and observing a file's page in the page cache.
//!
//! A tmpfs file lives on a mount of its own with the scenario's `huge=`
//! option: the worker mounts a tmpfs on a fresh directory, creates the file
//! (named, or `O_TMPFILE`), and detaches the mount at once
//! (`umount2(MNT_DETACH)`): the open descriptor keeps it alive, nothing is
//! left in the mount table, and it goes away with the last descriptor.
//! For a named file the worker also keeps an `O_PATH` descriptor of the
//! mount's root: the name then keeps the file as in Linux (until `unlink`,
//! which goes through that descriptor, or until the worker exits).

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Mutex;

use foliomm::internals::folio::thp::ShmemHuge;
use foliomm::internals::machine::HugeSize;
use foliomm_scenario::observation::FileInfo;
use foliomm_scenario::op::FileKind;
use foliomm_scenario::{Observation, Reply};

use crate::procfs::Procfs;
use crate::protocol::{done, value, Answer, Refused};
use crate::sys::scenario as sys;
use foliomm::Errno;

const PAGE: u64 = 4096;

/// The root of the mount of each named file, by the file's descriptor
/// (inherited by forked children, as the descriptors are).
static NAMED: Mutex<Option<HashMap<u64, i32>>> = Mutex::new(None);

/// `memfd_create` or a tmpfs file, then `ftruncate` to `size`; answers the
/// descriptor, inherited by children forked later.
pub fn create_file(kind: FileKind, size: u64) -> Answer {
    let fd = match kind {
        FileKind::Memfd => sys::memfd_create(libc::MFD_ALLOW_SEALING),
        FileKind::Hugetlbfs(page) => {
            sys::memfd_create(libc::MFD_ALLOW_SEALING | libc::MFD_HUGETLB | huge_size_bits(page) as libc::c_uint)
        }
        FileKind::Tmpfs { huge, named } => tmpfs_file(huge, named),
    };
    let fd = fd? as u64;
    sys::ftruncate(fd, size)?;
    Ok(Reply::Value(fd))
}

/// A file on a new tmpfs mount with `huge=`, the mount already detached.
fn tmpfs_file(huge: ShmemHuge, named: bool) -> std::io::Result<i32> {
    let dir = std::env::temp_dir().join(format!("foliomm-tmpfs-{}-{}", std::process::id(), crate::unique()));
    std::fs::create_dir(&dir)?;
    let cdir = CString::new(dir.as_os_str().as_encoded_bytes()).expect("a path without NUL");
    let opts = CString::new(format!("huge={}", huge.name())).expect("no NUL");
    if let Err(e) = sys::mount_tmpfs(&cdir, &opts) {
        let _ = std::fs::remove_dir(&dir);
        return Err(e);
    }
    let fd = if named {
        let path = CString::new(dir.join("file").into_os_string().into_encoded_bytes()).expect("no NUL");
        let fd = sys::open(&path, libc::O_CREAT | libc::O_EXCL | libc::O_RDWR);
        if let (Ok(fd), Ok(root)) = (&fd, sys::open(&cdir, libc::O_PATH | libc::O_DIRECTORY)) {
            NAMED.lock().unwrap().get_or_insert_default().insert(*fd as u64, root);
        }
        fd
    } else {
        sys::open(&cdir, libc::O_TMPFILE | libc::O_RDWR)
    };
    sys::detach_mount(&cdir);
    let _ = std::fs::remove_dir(&dir);
    fd
}

/// `unlink` of the named file behind `fd`; ENOENT for a file without a
/// name (or one unlinked before).
pub fn unlink(fd: u64) -> Answer {
    let root = NAMED.lock().unwrap().get_or_insert_default().remove(&fd).ok_or(Refused::Errno(Errno::ENOENT))?;
    let r = sys::unlinkat(root, c"file");
    let _ = sys::close(root as u64);
    done(r)
}

/// `fallocate(keep_size ? FALLOC_FL_KEEP_SIZE : 0)`.
pub fn fallocate(fd: u64, offset: u64, len: u64, keep_size: bool) -> Answer {
    let mode = if keep_size { libc::FALLOC_FL_KEEP_SIZE } else { 0 };
    done(sys::fallocate(fd, mode, offset, len))
}

/// `pwrite`; answers the bytes written.
pub fn pwrite(fd: u64, offset: u64, data: &[u8]) -> Answer {
    value(sys::pwrite(fd, offset, data))
}

/// `pread` of up to `len` bytes; answers the bytes read.
pub fn pread(fd: u64, offset: u64, len: u64) -> Answer {
    Ok(Reply::Bytes(sys::pread(fd, offset, len)?))
}

/// The page at `offset` in the file's page cache: `mincore` on a one-page
/// mapping says whether it is cached without bringing it in; a cached page
/// inside the file is then read through the mapping (which maps the cached
/// folio, allocating nothing) to learn its frame and folio order. On
/// hugetlbfs the page stays hidden: `mincore`
/// reports page table entries there, and a read would allocate. Then the
/// file's `fstat`, seals and `SEEK_DATA` / `SEEK_HOLE` from `offset`.
pub fn observe_file(procfs: &Procfs, fd: u64, offset: u64) -> Answer {
    let st = sys::fstat(fd)?;
    let size = st.st_size as u64;
    let mut o = if sys::on_hugetlbfs(fd)? {
        // hugetlbfs: mincore would report the new mapping's empty entries.
        Observation { page_hidden: true, ..Default::default() }
    } else {
        let p = sys::mmap(0, PAGE, libc::PROT_READ as u32, libc::MAP_SHARED, fd as i32, offset & !(PAGE - 1))?;
        let observed = observe_mapped_page(procfs, p + offset % PAGE, offset < size);
        sys::munmap(p, PAGE)?;
        observed?
    };
    // ENXIO reads as the size.
    let seek = |whence| sys::lseek(fd, offset, whence).unwrap_or(size);
    o.file = FileInfo {
        size,
        blocks: st.st_blocks as u64,
        nlink: st.st_nlink,
        seals: sys::seals(fd, None)? as u64,
        seek_data: seek(libc::SEEK_DATA),
        seek_hole: seek(libc::SEEK_HOLE),
    };
    Ok(Reply::Observed(Box::new(o)))
}

/// What `observe_file` sees at `at` in its mapping of the file, the
/// address of the observed offset, which lies `inside` the file or not.
fn observe_mapped_page(procfs: &Procfs, at: u64, inside: bool) -> Result<Observation, Refused> {
    let page = at & !(PAGE - 1);
    let cached = sys::page_resident(page)?;
    let mut o = Observation::default();
    if cached && inside {
        // The page is inside the file and cached: the read maps it.
        o.byte = sys::read_byte(at);
        let info = procfs.page_info(page).map_err(Refused::Unobservable)?;
        (o.page.present, o.page.pfn, o.page.folio_order) = (true, info.pfn, info.folio_order);
    } else {
        o.page.present = cached;
    }
    Ok(o)
}

/// The page size bits of `MAP_HUGETLB` and `MFD_HUGETLB` (`MAP_HUGE_2MB`,
/// `MAP_HUGE_1GB`: log2 of the size, shifted by `MAP_HUGE_SHIFT`, which
/// equals `MFD_HUGE_SHIFT`).
pub fn huge_size_bits(size: HugeSize) -> libc::c_int {
    (size.bytes().trailing_zeros() as libc::c_int) << libc::MAP_HUGE_SHIFT
}
