//! The userfaultfd ioctls on an address space (fs/userfaultfd.c
//! `userfaultfd_register`, `userfaultfd_unregister`; mm/userfaultfd.c
//! `mfill_atomic`, `mwriteprotect_range`). A fault in a registered range
//! reaches the context through [`crate::memory::userfaultfd`].
//!
//! Differs from Linux: no `mmap_changing`
//! (non-cooperative events), no `UFFDIO_WAKE` (the model's waiting thread
//! is its caller, which retries on its own).

use super::vma::{merge_around, set_vma_flags};
use super::MMAP_MIN_ADDR;
use crate::arch::{PAGE_SIZE, TASK_SIZE};
use crate::memory::hugetlb_userfaultfd::{hugetlb_mfill_atomic_pte, unshare_all_pmds};
use crate::memory::uffd_move::{move_step, Step};
use crate::memory::userfaultfd::{mfill_atomic_pte, uffd_wp_range, Fill};
use crate::mm_types::{vm, FaultVma, Mm, UserfaultfdCtx, Vma};
use crate::sync::Arc;
use crate::{Errno, Result};

/// `validate_range`: a page-aligned, non-empty range of user addresses
/// (EINVAL otherwise); returns its end.
fn validate_range(start: u64, len: u64) -> Result<u64> {
    let aligned = start.is_multiple_of(PAGE_SIZE) && len.is_multiple_of(PAGE_SIZE);
    if !aligned || len == 0 || !(MMAP_MIN_ADDR..TASK_SIZE).contains(&start) || len > TASK_SIZE - start {
        return Err(Errno::EINVAL);
    }
    Ok(start + len)
}

/// `vma_can_userfault`: missing and write-protect faults on anonymous,
/// shmem and hugetlb VMAs, minor faults on shmem and hugetlb only.
fn can_userfault(v: &Vma, modes: u32) -> bool {
    modes & vm::UFFD_MINOR == 0 || v.file().is_some()
}

impl Mm {
    /// `UFFDIO_REGISTER` of `[start, start + len)` with `ctx` in `modes`
    /// (`VM_UFFD_*` bits): the VMAs in the range (holes are allowed, but
    /// not an empty range: EINVAL) are split at its edges and registered.
    /// EINVAL for a bad range or mode, or a VMA that cannot take the mode
    /// (for a range no VMA reaches, ENOMEM before 6.4 if none lies above);
    /// EPERM for a VMA that may never be written (`VM_MAYWRITE` clear);
    /// EBUSY for one registered with another context; EINVAL for a hugetlb
    /// VMA the range cuts inside a huge page. A VMA registered
    /// with `ctx` in all of `modes` already is left as it is; any other
    /// gets exactly `modes` (`userfaultfd_register_range`); a hugetlb one
    /// registered for minor or write-protect faults stops sharing PMD
    /// tables.
    pub fn userfaultfd_register(&self, ctx: &Arc<UserfaultfdCtx>, start: u64, len: u64, modes: u32) -> Result<()> {
        let end = validate_range(start, len)?;
        if modes == 0 || modes & !vm::UFFD_FLAGS != 0 {
            return Err(Errno::EINVAL);
        }
        let mut vmas = self.mmap_write_lock();
        let mut any = false;
        for v in vmas.overlapping(start, end) {
            any = true;
            // A hugetlb VMA is registered in whole huge pages.
            let huge = v.huge_page_size().unwrap_or(PAGE_SIZE);
            let misaligned = |a: u64| v.start() < a && a < v.end() && !a.is_multiple_of(huge);
            if misaligned(start) || misaligned(end) {
                return Err(Errno::EINVAL);
            }
            if !can_userfault(v, modes) {
                return Err(Errno::EINVAL);
            }
            if v.flags() & vm::NO_MAYWRITE != 0 {
                return Err(Errno::EPERM);
            }
            if v.userfaultfd_ctx().is_some_and(|c| !Arc::ptr_eq(&c, ctx)) {
                return Err(Errno::EBUSY);
            }
        }
        if !any {
            return Err(self.no_vma_error(&vmas, start));
        }
        let is_ctx = |v: &Vma| v.userfaultfd_ctx().is_some_and(|c| Arc::ptr_eq(&c, ctx));
        let keep: Vec<u64> = vmas
            .overlapping(start, end)
            .filter(|v| is_ctx(v) && v.flags() & modes == modes)
            .map(|v| v.start())
            .collect();
        let new_flags = |f: u32| (f & !vm::UFFD_FLAGS) | modes;
        for addr in [start, end] {
            if vmas.find(addr).is_some_and(|v| !keep.contains(&v.start())) {
                self.split_vma(&mut vmas, addr)?;
            }
        }
        let targets: Vec<Arc<Vma>> =
            vmas.overlapping(start, end).filter(|v| !keep.contains(&v.start())).cloned().collect();
        let mut changed = Vec::new();
        for v in &targets {
            vmas.start_write(v);
            v.set_userfaultfd_ctx(Some(ctx.clone()));
            changed.extend(set_vma_flags(&mut vmas, v.start(), v.end(), new_flags));
            if v.is_hugetlb() && modes & (vm::UFFD_WP | vm::UFFD_MINOR) != 0 {
                unshare_all_pmds(&self.kernel, self, v);
            }
        }
        merge_around(&mut vmas, start, end, self.kernel.config.release(), &changed);
        Ok(())
    }

    /// `UFFDIO_UNREGISTER` of `[start, start + len)` for `ctx`: the VMAs
    /// registered with it lose their registration and the uffd-wp bits of
    /// their entries (`userfaultfd_clear_vma`), then merge where they can.
    /// EINVAL for a bad range, for one no VMA reaches (ENOMEM before 6.4
    /// where none lies above), or (from 6.16) for a VMA registered with
    /// another context, which older releases unregister too.
    pub fn userfaultfd_unregister(&self, ctx: &Arc<UserfaultfdCtx>, start: u64, len: u64) -> Result<()> {
        let end = validate_range(start, len)?;
        let mut vmas = self.mmap_write_lock();
        if vmas.overlapping(start, end).next().is_none() {
            return Err(self.no_vma_error(&vmas, start));
        }
        let is_ctx = |v: &Vma| v.userfaultfd_ctx().is_some_and(|c| Arc::ptr_eq(&c, ctx));
        let other = |v: &Vma| v.userfaultfd_ctx().is_some() && !is_ctx(v);
        let release = self.kernel.config.release();
        if release.uffd_unregister_checks_ctx() && vmas.overlapping(start, end).any(|v| other(v)) {
            return Err(Errno::EINVAL);
        }
        // Before the check, another context's VMAs were unregistered too.
        let is_ctx = |v: &Vma| is_ctx(v) || (!release.uffd_unregister_checks_ctx() && other(v));
        for addr in [start, end] {
            if vmas.find(addr).is_some_and(|v| is_ctx(v)) {
                self.split_vma(&mut vmas, addr)?;
            }
        }
        let targets: Vec<Arc<Vma>> = vmas.overlapping(start, end).filter(|v| is_ctx(v)).cloned().collect();
        let mut changed = Vec::new();
        let mut flush = false;
        for v in &targets {
            vmas.start_write(v);
            if v.userfaultfd_wp() {
                flush |= uffd_wp_range(&self.kernel, self, v, v.start(), v.end(), false);
            }
            v.set_userfaultfd_ctx(None);
            changed.extend(set_vma_flags(&mut vmas, v.start(), v.end(), |f| f & !vm::UFFD_FLAGS));
        }
        if flush {
            self.tlb.flush_range(&self.kernel.stats, start, end);
        }
        merge_around(&mut vmas, start, end, self.kernel.config.release(), &changed);
        Ok(())
    }

    /// `UFFDIO_COPY` (with the bytes of the whole range), `UFFDIO_ZEROPAGE`
    /// or `UFFDIO_CONTINUE` of `[dst, dst + len)`, page by page through
    /// `mfill_atomic_pte`. Returns the bytes done; an error if none was:
    /// ENOENT if the range is not inside one registered VMA (with any
    /// context: Linux checks no more), EINVAL for a bad range, a
    /// write-protected fill of a VMA not registered for it or a continue
    /// outside shmem, and the first page's error (EEXIST for a page already
    /// mapped...). The caller reports a short count as EAGAIN, as
    /// `userfaultfd_copy` does.
    pub fn uffd_fill(&self, dst: u64, len: u64, fill: Fill) -> Result<u64> {
        let end = validate_range(dst, len)?;
        let (copy, wp) = match fill {
            Fill::Copy { bytes, .. } if bytes.len() as u64 != len => return Err(Errno::EINVAL),
            Fill::Copy { bytes, wp } => (Some(bytes), wp),
            Fill::ZeroPage => (None, false),
            Fill::Continue { wp } => (None, wp),
        };
        let held = self.uffd_lock_vma(dst)?;
        let v = held.vma();
        // validate_dst_vma(): registered, with any context.
        if end > v.end() || v.userfaultfd_ctx().is_none() {
            return Err(Errno::ENOENT);
        }
        let continues = matches!(fill, Fill::Continue { .. });
        if (wp && !v.userfaultfd_wp()) || (continues && v.file().is_none()) {
            return Err(Errno::EINVAL);
        }
        // mfill_atomic_hugetlb(): whole huge pages.
        let step = v.huge_page_size().unwrap_or(PAGE_SIZE);
        if !dst.is_multiple_of(step) || !len.is_multiple_of(step) {
            return Err(Errno::EINVAL);
        }
        let mut done = 0;
        while dst + done < end {
            let page = match (fill, copy) {
                (Fill::Copy { .. }, Some(b)) => Fill::Copy { bytes: &b[done as usize..(done + step) as usize], wp },
                (other, _) => other,
            };
            let r = match v.is_hugetlb() {
                true => hugetlb_mfill_atomic_pte(self, v, dst + done, page),
                false => mfill_atomic_pte(&self.kernel, self, v, dst + done, page),
            };
            match r {
                Ok(()) => done += step,
                Err(e) if done == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(done)
    }

    /// `UFFDIO_WRITEPROTECT` of `[start, start + len)`: sets (`protect`) or
    /// clears the uffd-wp bit of every present entry of the VMAs in the
    /// range (holes are skipped), under the mmap_lock for read
    /// (`mwriteprotect_range`); ENOENT if a VMA in the range, or none at
    /// all, is registered for write-protect faults (before 6.4: unless the
    /// range lies inside one VMA); EINVAL for a bad range.
    pub fn uffd_writeprotect(&self, start: u64, len: u64, protect: bool) -> Result<()> {
        let end = validate_range(start, len)?;
        let vmas = self.mmap_read_lock();
        let release = self.kernel.config.release();
        if !release.uffd_writeprotects_across_vmas() && vmas.find(start).is_none_or(|v| end > v.end()) {
            return Err(Errno::ENOENT);
        }
        let mut result = Err(Errno::ENOENT);
        let mut flush = false;
        for v in vmas.overlapping(start, end) {
            if !v.userfaultfd_wp() {
                result = Err(Errno::ENOENT);
                break;
            }
            // A hugetlb VMA is protected in whole huge pages.
            let huge = v.huge_page_size().unwrap_or(PAGE_SIZE);
            if !start.is_multiple_of(huge) || !len.is_multiple_of(huge) {
                result = Err(Errno::EINVAL);
                break;
            }
            flush |= uffd_wp_range(&self.kernel, self, v, v.start().max(start), v.end().min(end), protect);
            result = Ok(());
        }
        if flush {
            self.tlb.flush_range(&self.kernel.stats, start, end);
        }
        result
    }

    /// `UFFDIO_MOVE` of `[src, src + len)` to `dst` in this MM, for the
    /// userfaultfd `ctx` the destination must be registered with (6.8 on;
    /// before, EINVAL). Both VMAs must be private anonymous ones holding
    /// their whole range, alike in protection and mlock, the source
    /// writable (else EINVAL; ENOENT if no VMA holds either start). Moves
    /// step by step ([`move_step`]); returns the bytes moved, or the first
    /// step's error (the caller reports a short count as EAGAIN), under
    /// the two VMAs' locks ([`Mm::uffd_move_lock`]).
    pub fn uffd_move(&self, ctx: &Arc<UserfaultfdCtx>, dst: u64, src: u64, len: u64, holes: bool) -> Result<u64> {
        validate_range(dst, len)?;
        validate_range(src, len)?;
        if !self.kernel.config.release().has_uffd_move() {
            return Err(Errno::EINVAL);
        }
        let locks = self.uffd_move_lock(dst, src)?;
        let (d, s) = (locks.dst(), locks.src());
        let alike = |f: u32| f & (vm::PROT_MASK | vm::LOCKED);
        let ours = d.userfaultfd_ctx().is_some_and(|c| Arc::ptr_eq(&c, ctx));
        let anon = d.file().is_none() && s.file().is_none();
        let fits = dst + len <= d.end() && src + len <= s.end();
        if !(ours && anon && fits && alike(d.flags()) == alike(s.flags()) && s.writable()) {
            return Err(Errno::EINVAL);
        }
        let mut moved = 0;
        while moved < len {
            match move_step(&self.kernel, self, d, (src + moved, dst + moved, len - moved), holes) {
                Ok(Step::Moved(n)) => moved += n,
                Ok(Step::Again) => {}
                Err(e) if moved == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(moved)
    }

    /// `uffd_move_lock`: the destination VMA as `uffd_lock_vma` holds it;
    /// the source VMA the same if it holds `src`, else read-locked on its
    /// own (`lock_vma_under_rcu`); failing that, both found and locked
    /// under the mmap_lock ([`Mm::lock_two_vmas`]). Before 6.9, and under
    /// `mmap-lock`, the mmap_lock holds both throughout.
    fn uffd_move_lock(&self, dst: u64, src: u64) -> Result<MoveLocks<'_>> {
        let vma_lock = self.kernel.config.release().uffd_ioctls_take_vma_lock()
            && self.kernel.config.vma_lock != crate::kernel::VmaLockDesign::MmapLock;
        if !vma_lock {
            let vmas = self.mmap_read_lock();
            let d = vmas.find(dst).ok_or(Errno::ENOENT)?.clone();
            let s = vmas.find(src).ok_or(Errno::ENOENT)?.clone();
            if !d.shared() {
                self.anon_vma_prepare(&d);
            }
            return Ok(MoveLocks::MmapLock { _held: vmas, dst: d, src: s });
        }
        let d = self.uffd_lock_vma(dst)?;
        if d.vma().contains(src) {
            return Ok(MoveLocks::Vmas(d, None));
        }
        if let Some(s) = self.lock_vma_under_rcu(src).map(FaultVma::for_ioctl) {
            return Ok(MoveLocks::Vmas(d, Some(s)));
        }
        drop(d);
        let (d, s) = self.lock_two_vmas(dst, src)?;
        Ok(MoveLocks::Vmas(d, s))
    }

    /// The error of a registration whose range no VMA reaches.
    fn no_vma_error(&self, vmas: &crate::mm_types::Vmas, start: u64) -> Errno {
        let none_above = vmas.next_starting(start, u64::MAX).is_none() && vmas.find(start).is_none();
        match self.kernel.config.release().uffd_register_einval_without_vma() || !none_above {
            true => Errno::EINVAL,
            false => Errno::ENOMEM,
        }
    }

    /// `uffd_lock_vma`: the VMA holding `addr` read-locked on its own
    /// (`lock_vma_under_rcu`) if it needs no anon_vma, else found under
    /// the mmap_lock with one made (`find_vma_and_prepare_anon`), then
    /// read-locked there and the mmap_lock let go
    /// (`vma_start_read_locked`; EAGAIN at the reader limit); ENOENT if no
    /// VMA holds `addr`. Before 6.9, and under `mmap-lock`, the mmap_lock
    /// throughout.
    fn uffd_lock_vma(&self, addr: u64) -> Result<FaultVma<'_>> {
        let vma_lock = self.kernel.config.release().uffd_ioctls_take_vma_lock();
        if let Some(held) = vma_lock.then(|| self.lock_vma_under_rcu(addr)).flatten().map(FaultVma::for_ioctl) {
            if held.vma().shared() || held.vma().anon_vma() != 0 {
                return Ok(held);
            }
        }
        let held = self.lock_mm_and_find_vma(addr).map_err(|_| Errno::ENOENT)?;
        if !held.vma().shared() {
            self.anon_vma_prepare(held.vma());
        }
        match vma_lock && self.kernel.config.vma_lock != crate::kernel::VmaLockDesign::MmapLock {
            true => held.into_vma_lock(),
            false => Ok(held),
        }
    }
}

/// What holds `UFFDIO_MOVE`'s two VMAs ([`Mm::uffd_move_lock`]).
enum MoveLocks<'a> {
    /// The mmap_lock for read (before 6.9, or under `mmap-lock`), held
    /// while the VMAs are used.
    MmapLock { _held: crate::mm_types::MmapReadGuard<'a>, dst: Arc<Vma>, src: Arc<Vma> },
    /// The destination's VMA lock, and the source's if it is another VMA.
    Vmas(FaultVma<'a>, Option<FaultVma<'a>>),
}

impl MoveLocks<'_> {
    /// The destination VMA.
    fn dst(&self) -> &Vma {
        match self {
            MoveLocks::MmapLock { dst, .. } => dst,
            MoveLocks::Vmas(d, _) => d.vma(),
        }
    }

    /// The source VMA: the destination's when the move stays in one VMA.
    fn src(&self) -> &Vma {
        match self {
            MoveLocks::MmapLock { src, .. } => src,
            MoveLocks::Vmas(d, s) => s.as_ref().unwrap_or(d).vma(),
        }
    }
}
