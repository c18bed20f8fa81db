//! GUP pins (mm/gup.c `pin_user_pages` with FOLL_PIN, optionally FOLL_WRITE
//! and FOLL_LONGTERM; `unpin_user_pages`).
//!
//! Each page is faulted in as needed; a write pin needs a writable entry (a
//! write fault breaks COW first); a read-only pin of an anon page that is not
//! AnonExclusive, or (longterm, in a private mapping) of the zero page or a
//! file page, first
//! takes an unshare fault (`gup_must_unshare`), so that the pin and the page
//! tables keep seeing the same page. The pin is taken under the page-table
//! lock (`try_grab_folio`): refcount + 1024 for a small folio, refcount + 1
//! and `_pincount` + 1 for a large one. The MM is marked `MMF_HAS_PINNED`, so
//! that fork copies pages that may be pinned instead of sharing them.
//!
//! As `pin_user_pages_fast` / `get_user_pages_fast` (what io_uring and
//! vmsplice use), the pages from the first on are taken GUP-fast while their
//! entries allow it (`gup_fast_pte_range`: present, not special, writable
//! for a write, no unshare needed), without FOLL_TOUCH, so a write pin does
//! not dirty a folio whose PTE is writable and clean; from the first page
//! that does not, the slow path (`__get_user_pages`) faults and touches
//! (a longterm pin's only from 6.3).
//! Differs from Linux: the fast part holds the mmap_lock and checks the
//! VMA's permissions first, and walks under the PTL (`gup_fast_pte_range`
//! takes none of them, and backs off by rechecking the PTE instead); the
//! zero page is never pinned.
//!
//! [`Mm::get_user_pages`] is the older kind of GUP reference (FOLL_GET, as
//! `vmsplice()` takes): one plain reference per page, no unsharing, and the
//! MM is not marked.

use crate::arch::{Pfn, PAGE_SIZE};
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::memory::{handle_fault, FaultKind};
use crate::mm_types::Mm;
use crate::pgtable::{leaf_slot, pte_lockptr};
use crate::sync::atomic::Ordering::Relaxed;
use crate::{Errno, Result};

/// Pages referenced by one GUP call; release them with [`unpin_user_pages`].
#[derive(Debug)]
pub struct Pin {
    pub addr: u64,
    /// The referenced frame of each page (`None`: the zero page, not counted).
    pub frames: Vec<Option<Pfn>>,
    /// FOLL_PIN (else FOLL_GET).
    pub foll_pin: bool,
    pub write: bool,
    pub longterm: bool,
}

/// Whether a read-only FOLL_PIN of this entry must unshare first
/// (`gup_must_unshare`): an anon page that is not AnonExclusive; the zero
/// page or a file page in a private mapping when the pin is longterm (so
/// that the pin sees what the process writes there later).
fn must_unshare(f: Folio, page: u64, longterm: bool, cow_mapping: bool) -> bool {
    if f.is_zero_page() {
        return longterm;
    }
    if !f.test_anon() {
        return longterm && cow_mapping;
    }
    !f.anon_exclusive(page)
}

impl Mm {
    /// `pin_user_pages(addr, len / PAGE_SIZE, FOLL_PIN [| FOLL_WRITE] [| FOLL_LONGTERM])`.
    /// Fails with EFAULT outside a VMA or where the VMA forbids the access,
    /// and with ENOMEM when a fault cannot allocate; already pinned pages are
    /// unpinned again on failure.
    pub fn pin_user_pages(&self, addr: u64, len: u64, write: bool, longterm: bool) -> Result<Pin> {
        let pin = self.gup(addr, len, true, write, longterm)?;
        self.has_pinned.store(true, Relaxed);
        Ok(pin)
    }

    /// `get_user_pages(addr, len / PAGE_SIZE, 0)`: a read-only FOLL_GET
    /// reference per page, as `vmsplice()` takes.
    pub fn get_user_pages(&self, addr: u64, len: u64) -> Result<Pin> {
        self.gup(addr, len, false, false, false)
    }

    fn gup(&self, addr: u64, len: u64, foll_pin: bool, write: bool, longterm: bool) -> Result<Pin> {
        let k = &*self.kernel;
        let mut pin = Pin { addr, frames: Vec::new(), foll_pin, write, longterm };
        let first = addr & !(PAGE_SIZE - 1);
        // A range past 2^64 has pages no VMA holds.
        let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
        let mut fast = true;
        for page in (first..end).step_by(PAGE_SIZE as usize) {
            match self.gup_one(k, page, (foll_pin, write, longterm), &mut fast) {
                Ok(frame) => pin.frames.push(frame),
                Err(e) => {
                    unpin_user_pages(k, pin);
                    return Err(e);
                }
            }
        }
        Ok(pin)
    }

    /// One page's reference: GUP-fast while `fast`, which it clears at the
    /// first entry the fast path cannot take; then the slow path.
    fn gup_one(&self, k: &Kernel, addr: u64, kind: (bool, bool, bool), fast: &mut bool) -> Result<Option<Pfn>> {
        let (foll_pin, write, longterm) = kind;
        let phys = &k.phys;
        let (vmas, _walk) = (self.mmap_read_lock(), self.pt_read());
        let vma = vmas.find(addr).ok_or(Errno::EFAULT)?;
        if (write && !vma.writable()) || !vma.readable() {
            return Err(Errno::EFAULT);
        }
        // faultin_page(): a missing entry faults as the reference will be
        // used, a write at once (no read fault first, so no fault-around
        // and no zero page to copy).
        let missing = if write { FaultKind::Write } else { FaultKind::Read };
        loop {
            // follow_page_mask(): look at the entry under its lock.
            let need = (|| {
                let slot = leaf_slot(phys, self.pgd, addr)?;
                let _ptl = pte_lockptr(phys, slot.table).lock();
                let leaf = slot.load(phys);
                if !leaf.present() || leaf.huge() != slot.huge() {
                    return Some(Err(missing));
                }
                if write && !leaf.write() {
                    return Some(Err(FaultKind::Write));
                }
                let pfn = slot.page_pfn(leaf, addr);
                let f = Folio::containing(phys, pfn);
                let judged = if slot.huge() { 0 } else { pfn - f.pfn };
                if foll_pin && !write && must_unshare(f, judged, longterm, !vma.shared()) {
                    return Some(Err(FaultKind::Unshare));
                }
                if f.is_zero_page() {
                    return Some(Ok(None));
                }
                // FOLL_TOUCH (slow path only): a write reference dirties the
                // folio; not a longterm pin's before 6.3.
                let touch = !longterm || k.config.release().longterm_pin_fallback_touches();
                if write && !leaf.dirty() && !*fast && touch {
                    f.head().set(crate::phys::pg::DIRTY);
                }
                if foll_pin {
                    f.grab_pin();
                } else {
                    f.ref_add(1);
                }
                k.observe(|o| o.gup(f.pfn, foll_pin, 1));
                Some(Ok(Some(pfn)))
            })();
            match need {
                // The zero page is special: GUP-fast leaves it to the slow path.
                Some(Ok(None)) | Some(Err(_)) | None if *fast => *fast = false,
                Some(Ok(frame)) => return Ok(frame),
                Some(Err(kind)) => handle_fault(self, vma, addr, kind)?,
                None => handle_fault(self, vma, addr, missing)?,
            }
        }
    }
}

/// `unpin_user_pages` (FOLL_PIN) or `put_page` of each page (FOLL_GET).
pub fn unpin_user_pages(k: &Kernel, pin: Pin) {
    for pfn in pin.frames.into_iter().flatten() {
        let f = Folio::containing(&k.phys, pfn);
        k.observe(|o| o.gup(f.pfn, pin.foll_pin, -1));
        if pin.foll_pin {
            k.unpin_folio(f);
        } else {
            k.folio_put_refs(f, 1);
        }
    }
}
