//! GUP references on the host, taken from user space with raw system calls,
//! as the kernel selftest `cow.c` does without debugfs:
//!
//! - FOLL_GET (read-only): `vmsplice()` of the range into a pipe; the pipe
//!   buffers hold the page references. Read back with `tee()` into a scratch
//!   pipe, which leaves the references in place.
//! - FOLL_PIN | FOLL_WRITE | FOLL_LONGTERM: registering the range as an
//!   io_uring fixed buffer (`IORING_REGISTER_BUFFERS`). Read back by an
//!   `IORING_OP_WRITE_FIXED` of the buffer into a pipe.
//!
//! Dropping a [`HostGup`] releases the references (reading the pipe out,
//! or unregistering the ring's buffers).

use std::io::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering::*};

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn read_byte(fd: &OwnedFd) -> Result<u8> {
    let mut b = [0u8];
    // SAFETY: reads at most one byte into `b`.
    if unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 1) } != 1 {
        return Err(Error::last_os_error());
    }
    Ok(b[0])
}

/// GUP references held by a worker on behalf of the scenario.
pub enum HostGup {
    /// FOLL_GET references in a pipe (from vmsplice).
    Pipe { read: OwnedFd, _write: OwnedFd },
    /// A longterm R/W FOLL_PIN: an io_uring fixed buffer.
    Uring(Uring),
}

impl HostGup {
    /// vmsplice() `[addr, addr+len)` into a new pipe.
    pub fn vmsplice(addr: u64, len: u64) -> Result<HostGup> {
        let (read, write) = pipe()?;
        // SAFETY: F_SETPIPE_SZ only resizes the pipe we own.
        unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, len.max(4096) as libc::c_int) };
        let iov = libc::iovec { iov_base: addr as *mut _, iov_len: len as usize };
        // SAFETY: the kernel reads the iovec, and takes references to the
        // pages of a range the caller has checked is mapped.
        let n = unsafe { libc::vmsplice(write.as_raw_fd(), &iov, 1, 0) };
        if n != len as isize {
            return Err(if n < 0 { Error::last_os_error() } else { Error::other("vmsplice took part of the range") });
        }
        Ok(HostGup::Pipe { read, _write: write })
    }

    /// The first byte the references hold.
    pub fn first_byte(&self) -> Result<u8> {
        let (scratch_r, scratch_w) = pipe()?;
        match self {
            HostGup::Pipe { read, .. } => {
                // SAFETY: tee() between two pipes we own; nothing is consumed.
                if unsafe { libc::tee(read.as_raw_fd(), scratch_w.as_raw_fd(), 1, libc::SPLICE_F_NONBLOCK) } != 1 {
                    return Err(Error::last_os_error());
                }
            }
            HostGup::Uring(u) => u.write_fixed(&scratch_w, 1)?,
        }
        read_byte(&scratch_r)
    }
}

impl Drop for HostGup {
    /// A FOLL_GET's references go at once: the pipe's buffers are read
    /// out, each read putting the pages it empties. Closing the pipe
    /// would not do: a child the worker forked since holds the pipe too
    /// and would keep them (a scenario's pin is its process's alone).
    fn drop(&mut self) {
        if let HostGup::Pipe { read, .. } = self {
            let fd = read.as_raw_fd();
            let mut buf = vec![0u8; 1 << 16];
            // SAFETY: sets O_NONBLOCK on a pipe we own, then reads into
            // `buf`, at most its length, until the pipe is empty.
            unsafe {
                libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK);
                while libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) > 0 {}
            }
        }
    }
}

const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_FEAT_SINGLE_MMAP: u32 = 1;
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_REGISTER_BUFFERS: u32 = 0;
const IORING_UNREGISTER_BUFFERS: u32 = 1;
const IORING_OP_WRITE_FIXED: u8 = 5;

/// include/uapi/linux/io_uring.h
#[repr(C)]
#[derive(Default)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

/// An io_uring with one registered buffer.
pub struct Uring {
    fd: OwnedFd,
    rings: *mut u8,
    rings_len: usize,
    sqes: *mut u8,
    sqes_len: usize,
    p: Params,
    buf: (u64, u64),
}

fn map(fd: &OwnedFd, len: usize, off: i64) -> Result<*mut u8> {
    // SAFETY: a shared mapping of an io_uring region; checked for failure.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            off,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(Error::last_os_error());
    }
    Ok(p.cast())
}

impl Uring {
    /// A ring whose fixed buffer 0 is `[addr, addr+len)`: a longterm R/W pin.
    pub fn register(addr: u64, len: u64) -> Result<Uring> {
        let mut p = Params::default();
        // SAFETY: io_uring_setup fills `p`; the result is a new descriptor.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 4u32, &mut p as *mut Params) };
        if fd < 0 {
            return Err(Error::last_os_error());
        }
        // SAFETY: the descriptor was just created and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        if p.features & IORING_FEAT_SINGLE_MMAP == 0 {
            return Err(Error::other("io_uring without IORING_FEAT_SINGLE_MMAP"));
        }
        let sq_len = p.sq_off.array as usize + p.sq_entries as usize * 4;
        let cq_len = p.cq_off.cqes as usize + p.cq_entries as usize * 16;
        let rings_len = sq_len.max(cq_len);
        let rings = map(&fd, rings_len, 0)?;
        let sqes_len = p.sq_entries as usize * 64;
        let sqes = map(&fd, sqes_len, IORING_OFF_SQES)?;
        let u = Uring { fd, rings, rings_len, sqes, sqes_len, p, buf: (addr, len) };
        let iov = libc::iovec { iov_base: addr as *mut _, iov_len: len as usize };
        // SAFETY: the kernel reads one iovec and pins its pages.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_register,
                u.fd.as_raw_fd(),
                IORING_REGISTER_BUFFERS,
                &iov as *const libc::iovec,
                1u32,
            )
        };
        if r < 0 {
            return Err(Error::last_os_error());
        }
        Ok(u)
    }

    fn ring_u32(&self, off: u32) -> &AtomicU32 {
        // SAFETY: `off` is an offset the kernel gave for a u32 inside the
        // rings mapping, which lives as long as `self`.
        unsafe { &*self.rings.add(off as usize).cast::<AtomicU32>() }
    }

    /// Writes the first `len` bytes of the fixed buffer to `to`, and waits.
    fn write_fixed(&self, to: &OwnedFd, len: u32) -> Result<()> {
        let (so, co) = (&self.p.sq_off, &self.p.cq_off);
        let tail = self.ring_u32(so.tail).load(Acquire);
        let idx = tail & self.ring_u32(so.ring_mask).load(Relaxed);
        // SAFETY: the SQE slot `idx` lies inside the SQE mapping; the array
        // slot inside the rings mapping. The kernel reads them only after
        // the tail moves (release store below).
        unsafe {
            let sqe = self.sqes.add(idx as usize * 64);
            std::ptr::write_bytes(sqe, 0, 64);
            sqe.write(IORING_OP_WRITE_FIXED);
            sqe.add(4).cast::<i32>().write_unaligned(to.as_raw_fd());
            sqe.add(8).cast::<u64>().write_unaligned(u64::MAX); // offset -1: a pipe has none
            sqe.add(16).cast::<u64>().write_unaligned(self.buf.0);
            sqe.add(24).cast::<u32>().write_unaligned(len.min(self.buf.1 as u32));
            sqe.add(40).cast::<u16>().write_unaligned(0); // buf_index
            self.rings.add(so.array as usize + idx as usize * 4).cast::<u32>().write(idx);
        }
        self.ring_u32(so.tail).store(tail.wrapping_add(1), Release);
        // SAFETY: submits the one SQE prepared above and waits for it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.fd.as_raw_fd(),
                1u32,
                1u32,
                IORING_ENTER_GETEVENTS,
                0usize,
                0usize,
            )
        };
        if r < 0 {
            return Err(Error::last_os_error());
        }
        let head = self.ring_u32(co.head).load(Acquire);
        let cidx = head & self.ring_u32(co.ring_mask).load(Relaxed);
        // SAFETY: the CQE at `cidx` lies inside the rings mapping and was
        // published by the kernel before io_uring_enter returned.
        let res = unsafe { self.rings.add(co.cqes as usize + cidx as usize * 16 + 8).cast::<i32>().read() };
        self.ring_u32(co.head).store(head.wrapping_add(1), Release);
        if res < 0 {
            return Err(Error::from_raw_os_error(-res));
        }
        Ok(())
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        // The pins go now (`io_sqe_buffers_unregister`), not when the ring's
        // deferred teardown after close gets to them: a fork right after
        // the scenario's `unpin` must find the pages unpinned.
        // SAFETY: an io_uring_register call on our own ring with no argument.
        unsafe {
            libc::syscall(libc::SYS_io_uring_register, self.fd.as_raw_fd(), IORING_UNREGISTER_BUFFERS, 0usize, 0u32);
        }
        // SAFETY: unmaps exactly the two mappings made in `register`; the
        // descriptor (and with it the registered buffer) closes afterwards.
        unsafe {
            libc::munmap(self.rings.cast(), self.rings_len);
            libc::munmap(self.sqes.cast(), self.sqes_len);
        }
    }
}
