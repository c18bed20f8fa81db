//! Host memory for model RAM and per-frame arrays: anonymous mappings
//! reserved with `MAP_NORESERVE`, so what is never touched costs no host
//! memory. The frame arena's words are `std` atomics in every build: they
//! model RAM, which loom cannot map (see [`crate::sync`]). The project's
//! `unsafe` code is here and in the marker trait [`ZeroIsDefault`].

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

use crate::arch::{PAGE_SIZE, WORDS_PER_PAGE};
use crate::Errno;

/// Values whose all-zero bytes are a valid value equal to their `Default`.
///
/// # Safety
/// Implement only for such types: [`Zeroed`] hands out fresh anonymous
/// memory (zero-filled by the host) as values of the type.
// Under loom and shuttle only the arena's words use it, which rustc's
// dead-code lint does not count as a use of the trait.
#[cfg_attr(any(loom, shuttle), allow(dead_code))]
pub(super) unsafe trait ZeroIsDefault: Default {}

// SAFETY: a `std` atomic integer of zero bytes is 0, its default.
unsafe impl ZeroIsDefault for AtomicU64 {}

/// A slice of `len` values living in their own anonymous mapping, all
/// default at first; pages of it never touched cost no host memory.
pub(super) struct Zeroed<T> {
    base: NonNull<T>,
    len: usize,
}

// SAFETY: `Zeroed` only ever hands out `&T`, so sharing it across threads is
// sound exactly when sharing `&T` is (T: Sync).
unsafe impl<T: Sync> Send for Zeroed<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Zeroed<T> {}

impl<T: ZeroIsDefault> Zeroed<T> {
    /// Maps `len` values, ENOMEM if the host refuses the mapping. No THP
    /// advice: most frames never reach the arena (they stay in their state
    /// word), and a host THP would make one materialized frame cost 2 MiB.
    pub(super) fn new(len: usize) -> Result<Zeroed<T>, Errno> {
        let bytes = len.checked_mul(size_of::<T>()).ok_or(Errno::ENOMEM)?.max(1);
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
        assert!(p.cast::<T>().is_aligned(), "a mapping is page aligned");
        let base = NonNull::new(p.cast::<T>()).ok_or(Errno::ENOMEM)?;
        Ok(Zeroed { base, len })
    }
}

impl<T: ZeroIsDefault> Zeroed<T> {
    /// Gives the host memory of the whole host pages inside values `range`
    /// back (`MADV_DONTNEED`): they read as zero, their default, until
    /// written again. The caller reads none of them meanwhile and relies
    /// on none keeping its value (see `super::vmemmap`).
    #[cfg_attr(any(loom, shuttle), allow(dead_code))]
    pub(super) fn discard(&self, range: std::ops::Range<usize>) {
        let values = &self[range];
        let (start, end) = (values.as_ptr() as usize, values.as_ptr() as usize + size_of_val(values));
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(PAGE_SIZE as libc::c_long) as usize;
        let (start, end) = (start.next_multiple_of(page), end / page * page);
        if start >= end {
            return;
        }
        // SAFETY: [start, end) is whole host pages inside this mapping (the
        // slice above is bounds checked), private and anonymous: the advice
        // only replaces their bytes with zeros, which `ZeroIsDefault` makes
        // a valid T; references into them stay valid.
        let r = unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        debug_assert_eq!(r, 0, "MADV_DONTNEED of our own anonymous mapping");
    }
}

impl<T: ZeroIsDefault> Zeroed<T> {
    /// Backs every value with host memory now (`MADV_POPULATE_WRITE`), so
    /// that no later access waits for the host to fault a page in; ENOMEM
    /// where the host cannot. A host before Linux 5.14, which does not
    /// know the advice (EINVAL), leaves the pages to their first touch.
    #[cfg_attr(any(loom, shuttle), allow(dead_code))]
    pub(super) fn populate(&self) -> Result<(), Errno> {
        let bytes = (self.len * size_of::<T>()).max(1);
        // SAFETY: the range is exactly the mapping made in `new`; populating
        // writes no value (pages stay zero-filled, a valid T).
        let r = unsafe { libc::madvise(self.base.as_ptr().cast(), bytes, libc::MADV_POPULATE_WRITE) };
        let unknown = r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL);
        if r == 0 || unknown {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }
}

impl<T> Deref for Zeroed<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: the mapping holds `len` values of T: page aligned, readable
        // and writable, zero-filled on first touch, which `ZeroIsDefault`
        // (required by `new`) makes a valid T; it lives as long as `self`,
        // and only shared references to it are ever made.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }
}

impl<T> Drop for Zeroed<T> {
    fn drop(&mut self) {
        // SAFETY: base and len describe exactly the mapping made in `new`, no
        // reference into it outlives `self`, and the values need no drop
        // (`ZeroIsDefault` types are plain atomics and structs of them).
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), (self.len * size_of::<T>()).max(1));
        }
    }
}

/// The host memory behind the frames: one state word per frame naming its
/// class ([`super::content`]), and the words of RAM, touched only for
/// frames whose class is full.
pub(super) struct Arena {
    words: Zeroed<AtomicU64>,
    states: Zeroed<AtomicU64>,
}

impl Arena {
    pub(super) fn new(frames: usize) -> Result<Arena, Errno> {
        let words = Zeroed::new(frames.checked_mul(WORDS_PER_PAGE).ok_or(Errno::ENOMEM)?)?;
        Ok(Arena { words, states: Zeroed::new(frames)? })
    }

    /// Backs the class words, and the frames' bytes if `bytes`, with host
    /// memory now (see [`Zeroed::populate`]).
    pub(super) fn populate(&self, bytes: bool) -> Result<(), Errno> {
        self.states.populate()?;
        if bytes {
            self.words.populate()?;
        }
        Ok(())
    }

    /// Word `index` of the arena.
    pub(super) fn word(&self, index: usize) -> &AtomicU64 {
        &self.words[index]
    }

    /// The class word of frame `frame`.
    pub(super) fn state(&self, frame: usize) -> &AtomicU64 {
        &self.states[frame]
    }

    /// Fills the `nr` frames from `frame` with `val` in every byte, one
    /// bulk store. The caller holds the frames busy (or owns them): no other
    /// thread accesses their words meanwhile.
    pub(super) fn fill_frames(&self, frame: usize, nr: usize, val: u8) {
        let words = &self.words[frame * WORDS_PER_PAGE..(frame + nr) * WORDS_PER_PAGE];
        // SAFETY: the words are inside the arena (the slice above is bounds
        // checked), and any bytes are a valid AtomicU64. The caller excludes
        // every other access to these words (see above).
        unsafe {
            std::ptr::write_bytes(words.as_ptr().cast_mut().cast::<u8>(), val, nr * PAGE_SIZE as usize);
        }
    }
}
