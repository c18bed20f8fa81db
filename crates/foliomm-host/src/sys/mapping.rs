//! Memory of the calling process, mapped with `mmap` and unmapped when
//! dropped: the regions the benchmarks' host columns fault, advise and
//! unmap.

use std::ffi::CStr;
use std::io;
use std::ops::Range;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use rustix::fs::MemfdFlags;
use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

/// A memfd of `len` bytes (`memfd_create` and `ftruncate`), of huge pages
/// from the default hugetlb pool when `hugetlb`.
pub fn memfd(name: &CStr, len: u64, hugetlb: bool) -> io::Result<OwnedFd> {
    let flags = if hugetlb { MemfdFlags::HUGETLB } else { MemfdFlags::empty() };
    let fd = rustix::fs::memfd_create(name, flags)?;
    rustix::fs::ftruncate(&fd, len)?;
    Ok(fd)
}

/// `madvise` advice a benchmark gives its own memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `MADV_HUGEPAGE`.
    HugePage,
    /// `MADV_NOHUGEPAGE`.
    NoHugePage,
    /// `MADV_DONTNEED`: the range reads as zeros (anonymous, private) or as
    /// the file (shared) afterwards.
    DontNeed,
    /// `MADV_PAGEOUT`: reclaim the range now (to swap, where there is one);
    /// the contents stay as they were.
    PageOut,
    /// `MADV_POPULATE_WRITE`: every page faulted in for writing now; an
    /// error (EFAULT) where an access would raise SIGBUS.
    PopulateWrite,
}

/// How to map: what backs the memory, where, and with which flags. Always
/// readable and writable.
#[derive(Clone, Copy, Debug)]
pub struct Map<'a> {
    file: Option<(BorrowedFd<'a>, u64)>,
    flags: MapFlags,
    addr: usize,
    align: usize,
}

impl Map<'static> {
    /// Private anonymous memory.
    pub fn anon() -> Map<'static> {
        Map { file: None, flags: MapFlags::PRIVATE, addr: 0, align: 0 }
    }
}

impl<'a> Map<'a> {
    /// `fd` from `offset`, a private (copy-on-write) mapping unless
    /// [`Map::shared`]; anonymous memory when `file` is `None`.
    pub fn file(file: Option<(BorrowedFd<'a>, u64)>) -> Map<'a> {
        Map { file, ..Map::anon() }
    }

    /// `MAP_SHARED` when `shared`, else `MAP_PRIVATE`.
    pub fn shared(mut self, shared: bool) -> Self {
        self.flags.remove(MapFlags::PRIVATE | MapFlags::SHARED);
        self.flags |= if shared { MapFlags::SHARED } else { MapFlags::PRIVATE };
        self
    }

    /// Exactly at `addr` (`MAP_FIXED_NOREPLACE`): EEXIST if anything is
    /// mapped there.
    pub fn at(mut self, addr: usize) -> Self {
        self.addr = addr;
        self.flags |= MapFlags::FIXED_NOREPLACE;
        self
    }

    /// At `addr` if that range is free, elsewhere if not (a hint).
    pub fn near(mut self, addr: usize) -> Self {
        self.addr = addr;
        self
    }

    /// At an address that is a multiple of `align` (a power of two): maps
    /// `align` more and unmaps the ends.
    pub fn aligned(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// `MAP_POPULATE`: every page faulted in by `mmap` itself.
    pub fn populate(mut self) -> Self {
        self.flags |= MapFlags::POPULATE;
        self
    }

    /// `MAP_NORESERVE`: no reservation (hugetlb: no pages set aside).
    pub fn noreserve(mut self) -> Self {
        self.flags |= MapFlags::NORESERVE;
        self
    }

    /// Maps `len` bytes.
    pub fn map(self, len: usize) -> io::Result<Mapping> {
        let raw_len = len + self.align;
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        let hint = self.addr as *mut std::ffi::c_void;
        // SAFETY: a new mapping. Without MAP_FIXED (NOREPLACE refuses an
        // occupied range) it cannot replace memory anything points into.
        let p = unsafe {
            match self.file {
                Some((fd, offset)) => rustix::mm::mmap(hint, raw_len, prot, self.flags, fd, offset),
                None => rustix::mm::mmap_anonymous(hint, raw_len, prot, self.flags),
            }
        }?;
        let mut m = Mapping { addr: p.cast(), len: raw_len };
        if self.flags.contains(MapFlags::FIXED_NOREPLACE) && m.addr() != self.addr {
            // A kernel older than 4.17 took NOREPLACE for a hint.
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        if self.align > 0 {
            let head = m.addr().next_multiple_of(self.align) - m.addr();
            m.trim(head, raw_len - head - len)?;
        }
        Ok(m)
    }
}

/// A mapping of the calling process's memory, unmapped on drop. It hands
/// out no references into that memory: bytes are read and written through
/// its methods (atomically when shared between threads), so the kernel
/// may zap or fault it at any time.
#[derive(Debug)]
pub struct Mapping {
    addr: *mut u8,
    len: usize,
}

// SAFETY: the mapping belongs to the process, not a thread; shared access
// goes through atomic bytes, exclusive access through `&mut self`.
unsafe impl Send for Mapping {}
// SAFETY: as for Send.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Where it starts.
    pub fn addr(&self) -> usize {
        self.addr as usize
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Returns true if it has no bytes (never, for a mapping `Map` made).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, r: &Range<usize>) {
        assert!(r.start <= r.end && r.end <= self.len, "{r:?} outside a mapping of {} bytes", self.len);
    }

    fn byte(&self, off: usize) -> &AtomicU8 {
        self.check(&(off..off + 1));
        // SAFETY: inside the mapping, which lives as long as `self` and is
        // only ever accessed atomically while shared.
        unsafe { AtomicU8::from_ptr(self.addr.add(off)) }
    }

    /// The 32-bit word at `off`, a multiple of 4, as an atomic: a counter
    /// the processes that map a shared file's page share.
    pub fn word(&self, off: usize) -> &AtomicU32 {
        self.check(&(off..off + 4));
        assert!(off.is_multiple_of(4), "word at {off}: not 4-byte aligned");
        // SAFETY: inside the mapping and aligned (a mapping starts on a page),
        // living as long as `self`, and only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.addr.add(off).cast()) }
    }

    /// Writes `value` at byte `off` (faults its page in for writing).
    pub fn write(&self, off: usize, value: u8) {
        self.byte(off).store(value, Ordering::Relaxed);
    }

    /// Writes `value` at every `step`-th byte of `range`: one fault per
    /// page for `step` = the page size.
    pub fn write_every(&self, range: Range<usize>, step: usize, value: u8) {
        for off in range.step_by(step) {
            self.write(off, value);
        }
    }

    /// The byte at `off` (faults its page in for reading).
    pub fn read(&self, off: usize) -> u8 {
        self.byte(off).load(Ordering::Relaxed)
    }

    /// Reads every `step`-th byte of `range` (faults them in for reading).
    pub fn read_every(&self, range: Range<usize>, step: usize) {
        for off in range.step_by(step) {
            std::hint::black_box(self.read(off));
        }
    }

    /// Sets every byte of `range` to `value` (`memset`).
    pub fn fill(&mut self, range: Range<usize>, value: u8) {
        self.check(&range);
        // SAFETY: inside the mapping; `&mut self` excludes other accesses.
        unsafe { std::ptr::write_bytes(self.addr.add(range.start), value, range.len()) };
    }

    /// `madvise` of `range`.
    pub fn advise(&self, range: Range<usize>, advice: Advice) -> io::Result<()> {
        self.check(&range);
        let advice = match advice {
            Advice::HugePage => rustix::mm::Advice::LinuxHugepage,
            Advice::NoHugePage => rustix::mm::Advice::LinuxNoHugepage,
            Advice::DontNeed => rustix::mm::Advice::LinuxDontNeed,
            Advice::PageOut => rustix::mm::Advice::LinuxPageOut,
            Advice::PopulateWrite => rustix::mm::Advice::LinuxPopulateWrite,
        };
        // SAFETY: inside the mapping. No reference into it exists, so
        // contents zapped by MADV_DONTNEED are observed as a fresh value.
        unsafe { rustix::mm::madvise(self.addr.add(range.start).cast(), range.len(), advice) }?;
        Ok(())
    }

    /// Makes `range` read-only and then writable again (`mprotect` twice):
    /// Linux splits a PMD mapping at the range's edges, and the VMAs merge
    /// back.
    pub fn protect_round_trip(&mut self, range: Range<usize>) -> io::Result<()> {
        self.check(&range);
        for prot in [MprotectFlags::READ, MprotectFlags::READ | MprotectFlags::WRITE] {
            // SAFETY: inside the mapping; `&mut self` excludes any access
            // while it is read-only.
            unsafe { rustix::mm::mprotect(self.addr.add(range.start).cast(), range.len(), prot) }?;
        }
        Ok(())
    }

    /// Unmaps `head` bytes at the start and `tail` at the end.
    fn trim(&mut self, head: usize, tail: usize) -> io::Result<()> {
        // SAFETY: the ends of the mapping, which nothing uses yet.
        unsafe {
            if head > 0 {
                rustix::mm::munmap(self.addr.cast(), head)?;
            }
            self.addr = self.addr.add(head);
            self.len -= head;
            if tail > 0 {
                rustix::mm::munmap(self.addr.add(self.len - tail).cast(), tail)?;
            }
        }
        self.len -= tail;
        Ok(())
    }

    /// `munmap`, with its result (dropping unmaps too, ignoring failure).
    pub fn unmap(self) -> io::Result<()> {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: the whole mapping, consumed: nothing can use it again.
        unsafe { rustix::mm::munmap(me.addr.cast(), me.len) }?;
        Ok(())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the whole mapping; nothing refers to it any more.
        let _ = unsafe { rustix::mm::munmap(self.addr.cast(), self.len) };
    }
}
