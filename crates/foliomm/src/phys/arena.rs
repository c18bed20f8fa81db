//! The host memory behind the frames: one anonymous mapping reserved with
//! `MAP_NORESERVE`, so frames never touched cost no host memory. Its words
//! are `std` atomics in every build: they model RAM, which loom cannot map
//! (see [`crate::sync`]). The project's only `unsafe` code is here.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::Errno;

/// The host memory behind the frames.
pub(super) struct Arena {
    base: NonNull<AtomicU64>,
    pub(super) bytes: usize,
}

// SAFETY: the arena is only ever accessed through `&AtomicU64`, which is Sync.
unsafe impl Send for Arena {}
// SAFETY: as above; no non-atomic access to the arena exists.
unsafe impl Sync for Arena {}

impl Arena {
    pub(super) fn new(bytes: usize) -> Result<Arena, Errno> {
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::ENOMEM);
        }
        // Host THPs for the arena make first touch of model frames cheap; the
        // host may ignore the advice, which only costs speed.
        // SAFETY: advice on exactly the mapping just made; it changes no contents.
        unsafe {
            libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
        }
        let base = NonNull::new(p.cast::<AtomicU64>()).ok_or(Errno::ENOMEM)?;
        Ok(Arena { base, bytes })
    }

    /// Word `index` of the arena.
    pub(super) fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < self.bytes / 8, "frame arena index out of range");
        // SAFETY: index is in bounds (checked above); the mapping is readable,
        // writable, 8-byte aligned (page aligned), zero-filled on first touch
        // (a valid AtomicU64), and lives as long as `self`.
        unsafe { &*self.base.as_ptr().add(index) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: base/bytes describe exactly the mapping made in `new`, and no
        // reference into it outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.bytes);
        }
    }
}

impl Arena {
    /// Zeroes `bytes` bytes from word `start` with one bulk store (zeroing
    /// is the real work of a fault). The caller owns those frames: they were
    /// just taken off the free lists.
    pub(super) fn zero(&self, start: usize, bytes: usize) {
        assert!(start * 8 + bytes <= self.bytes);
        // SAFETY: the range is inside the arena (checked above), and zero
        // bytes are a valid AtomicU64. The frames were just allocated, so no
        // page table maps them and no other thread can reach them without a
        // model bug.
        unsafe {
            std::ptr::write_bytes(self.base.as_ptr().add(start).cast::<u8>(), 0, bytes);
        }
    }
}
