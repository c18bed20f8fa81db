//! The worker's userfaultfd calls (include/uapi/linux/userfaultfd.h):
//! `userfaultfd()` with `UFFDIO_API`, the ioctls on scenario ranges, and
//! the blocking read of one fault message. The structures are the
//! kernel's layouts; libc does not define them.
//!
//! Why these are safe functions: as for [`super::scenario`], the ranges
//! are scenario mappings no Rust value points into, and the kernel checks
//! every range and descriptor (a wrong one is an errno).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `UFFD_API`.
const API: u64 = 0xAA;
/// `UFFD_FEATURE_SIGBUS`.
const FEATURE_SIGBUS: u64 = 1 << 7;
/// `UFFD_EVENT_PAGEFAULT`.
const EVENT_PAGEFAULT: u8 = 0x12;
/// `UFFD_PAGEFAULT_FLAG_WRITE`, `UFFD_PAGEFAULT_FLAG_WP`.
const FLAG_WRITE: u64 = 1 << 0;
const FLAG_WP: u64 = 1 << 1;
/// `UFFD_PAGEFAULT_FLAG_MINOR`.
const FLAG_MINOR: u64 = 1 << 2;
/// `UFFDIO_COPY_MODE_WP`, `UFFDIO_CONTINUE_MODE_WP`,
/// `UFFDIO_WRITEPROTECT_MODE_WP`.
const COPY_MODE_WP: u64 = 1 << 1;
const CONTINUE_MODE_WP: u64 = 1 << 1;
const WRITEPROTECT_MODE_WP: u64 = 1 << 0;

/// `_IOC(dir, 0xAA, nr, size)` as x86-64 encodes it.
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}
const READ: u64 = 2;
const READ_WRITE: u64 = 3;

#[repr(C)]
#[derive(Default)]
struct Api {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct Range {
    start: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct Register {
    range: Range,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct Copy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

#[repr(C)]
#[derive(Default)]
struct ZeroPage {
    range: Range,
    mode: u64,
    zeropage: i64,
}

#[repr(C)]
#[derive(Default)]
struct Continue {
    range: Range,
    mode: u64,
    mapped: i64,
}

#[repr(C)]
#[derive(Default)]
struct Move {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    moved: i64,
}

#[repr(C)]
#[derive(Default)]
struct WriteProtect {
    range: Range,
    mode: u64,
}

const UFFDIO_API: u64 = ioc(READ_WRITE, 0x3F, size_of::<Api>());
const UFFDIO_REGISTER: u64 = ioc(READ_WRITE, 0x00, size_of::<Register>());
const UFFDIO_UNREGISTER: u64 = ioc(READ, 0x01, size_of::<Range>());
const UFFDIO_WAKE: u64 = ioc(READ, 0x02, size_of::<Range>());
const UFFDIO_COPY: u64 = ioc(READ_WRITE, 0x03, size_of::<Copy>());
const UFFDIO_ZEROPAGE: u64 = ioc(READ_WRITE, 0x04, size_of::<ZeroPage>());
const UFFDIO_WRITEPROTECT: u64 = ioc(READ_WRITE, 0x06, size_of::<WriteProtect>());
const UFFDIO_CONTINUE: u64 = ioc(READ_WRITE, 0x07, size_of::<Continue>());
const UFFDIO_MOVE: u64 = ioc(READ_WRITE, 0x05, size_of::<Move>());
/// `UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES`.
const MOVE_MODE_ALLOW_SRC_HOLES: u64 = 1 << 1;

/// `ioctl(fd, request, arg)` on a structure of ours.
fn ioctl<T>(fd: &OwnedFd, request: u64, arg: &mut T) -> io::Result<()> {
    // SAFETY: `arg` is a live, exclusively borrowed structure of the size
    // the request encodes; the kernel reads and writes only it.
    match unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg as *mut T) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// `userfaultfd(O_CLOEXEC)` and `UFFDIO_API`, with `UFFD_FEATURE_SIGBUS`
/// if `sigbus`.
pub(crate) fn open(sigbus: bool) -> io::Result<OwnedFd> {
    // SAFETY: the system call takes flags only and returns a descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us, owned by no one else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut api = Api { api: API, features: if sigbus { FEATURE_SIGBUS } else { 0 }, ioctls: 0 };
    ioctl(&fd, UFFDIO_API, &mut api)?;
    Ok(fd)
}

/// `UFFDIO_REGISTER` with `UFFDIO_REGISTER_MODE_*` bits `mode`.
pub(crate) fn register(fd: &OwnedFd, start: u64, len: u64, mode: u64) -> io::Result<()> {
    ioctl(fd, UFFDIO_REGISTER, &mut Register { range: Range { start, len }, mode, ioctls: 0 })
}

/// `UFFDIO_UNREGISTER`.
pub(crate) fn unregister(fd: &OwnedFd, start: u64, len: u64) -> io::Result<()> {
    ioctl(fd, UFFDIO_UNREGISTER, &mut Range { start, len })
}

/// `UFFDIO_WAKE`: wakes the threads waiting on faults in the range.
pub(crate) fn wake(fd: &OwnedFd, start: u64, len: u64) -> io::Result<()> {
    ioctl(fd, UFFDIO_WAKE, &mut Range { start, len })
}

/// `UFFDIO_COPY` of `src` (whole pages) to `dst`, or (`src` `None`)
/// `UFFDIO_ZEROPAGE` of `len` bytes: the bytes done, or the error when
/// none was; a short count is the caller's to judge.
pub(crate) fn fill(fd: &OwnedFd, dst: u64, len: u64, src: Option<&[u8]>, wp: bool) -> io::Result<u64> {
    let done = match src {
        Some(src) => {
            let mode = if wp { COPY_MODE_WP } else { 0 };
            let mut c = Copy { dst, src: src.as_ptr() as u64, len, mode, copy: 0 };
            let r = ioctl(fd, UFFDIO_COPY, &mut c);
            (r, c.copy)
        }
        None => {
            let mut z = ZeroPage { range: Range { start: dst, len }, mode: 0, zeropage: 0 };
            let r = ioctl(fd, UFFDIO_ZEROPAGE, &mut z);
            (r, z.zeropage)
        }
    };
    bytes_done(done)
}

/// `UFFDIO_CONTINUE` of `[dst, dst + len)` (`MODE_WP` if `wp`): the bytes
/// mapped, or the error when none was.
pub(crate) fn continue_range(fd: &OwnedFd, dst: u64, len: u64, wp: bool) -> io::Result<u64> {
    let mode = if wp { CONTINUE_MODE_WP } else { 0 };
    let mut c = Continue { range: Range { start: dst, len }, mode, mapped: 0 };
    let r = ioctl(fd, UFFDIO_CONTINUE, &mut c);
    bytes_done((r, c.mapped))
}

/// `UFFDIO_MOVE` of `[src, src + len)` to `dst`: the bytes moved, or the
/// error when none was.
pub(crate) fn move_range(fd: &OwnedFd, dst: u64, src: u64, len: u64, holes: bool) -> io::Result<u64> {
    let mode = if holes { MOVE_MODE_ALLOW_SRC_HOLES } else { 0 };
    let mut m = Move { dst, src, len, mode, moved: 0 };
    let r = ioctl(fd, UFFDIO_MOVE, &mut m);
    bytes_done((r, m.moved))
}

/// An mfill ioctl's result: its count field if positive, else its error.
fn bytes_done(done: (io::Result<()>, i64)) -> io::Result<u64> {
    match done {
        (_, n) if n > 0 => Ok(n as u64),
        (Err(e), _) => Err(e),
        (Ok(()), n) => Err(io::Error::from_raw_os_error(if n < 0 { -n as i32 } else { libc::EIO })),
    }
}

/// `UFFDIO_WRITEPROTECT` with (`protect`) or without `MODE_WP`.
pub(crate) fn writeprotect(fd: &OwnedFd, start: u64, len: u64, protect: bool) -> io::Result<()> {
    let mode = if protect { WRITEPROTECT_MODE_WP } else { 0 };
    ioctl(fd, UFFDIO_WRITEPROTECT, &mut WriteProtect { range: Range { start, len }, mode })
}

/// One page fault as the handler reads it.
pub(crate) struct Fault {
    /// The page's address.
    pub(crate) address: u64,
    /// `UFFD_PAGEFAULT_FLAG_WP`: a write to a write-protected page.
    pub(crate) wp: bool,
    /// `UFFD_PAGEFAULT_FLAG_MINOR`: a page the cache holds.
    pub(crate) minor: bool,
    /// `UFFD_PAGEFAULT_FLAG_WRITE`.
    pub(crate) write: bool,
}

/// Reads the next message (blocking); `Ok(None)` for an event that is not
/// a page fault, an error once the descriptor is unusable.
pub(crate) fn read_fault(fd: &OwnedFd) -> io::Result<Option<Fault>> {
    let mut msg = [0u8; 32];
    // SAFETY: reads at most 32 bytes into our buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), msg.as_mut_ptr().cast(), msg.len()) };
    if n != msg.len() as isize {
        return Err(io::Error::last_os_error());
    }
    if msg[0] != EVENT_PAGEFAULT {
        return Ok(None);
    }
    // struct uffd_msg: event (1), reserved (7), then flags and address.
    let flags = u64::from_ne_bytes(msg[8..16].try_into().unwrap());
    let address = u64::from_ne_bytes(msg[16..24].try_into().unwrap());
    let (wp, minor, write) = (flags & FLAG_WP != 0, flags & FLAG_MINOR != 0, flags & FLAG_WRITE != 0);
    Ok(Some(Fault { address: address & !4095, wp, minor, write }))
}
