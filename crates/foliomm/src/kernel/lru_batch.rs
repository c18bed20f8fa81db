//! The per-CPU LRU batches (mm/swap.c `cpu_fbatches`: `lru_add`,
//! `lru_deactivate` and `lru_lazyfree`; `folio_add_lru`, `folio_deactivate`,
//! `folio_mark_lazyfree`, `folio_batch_add_and_move`, `lru_add_drain`,
//! `lru_add_drain_all`).
//!
//! A new folio waits in its CPU's `lru_add` batch, with a reference and
//! without `PG_lru`, before it joins its list (the inactive one, or the
//! active one for a folio reclaim activated and put back); a small folio
//! `MADV_FREE` lets go waits in the `lru_lazyfree` batch, with a reference,
//! and only when the batch moves does it lose `PG_swapbacked` (smaps then
//! counts it `LazyFree`, and reclaim may drop it); an active folio
//! `MADV_COLD` deactivates waits in the `lru_deactivate` batch, with a
//! reference, until the batch moves it to the inactive list. A batch moves when it is
//! full (`PAGEVEC_SIZE`), when a large folio joins it (none waits), and when
//! it is drained: `lru_add_drain` empties the calling CPU's batches only,
//! `lru_add_drain_all` every CPU's. So a folio waiting on another CPU
//! cannot be reused by a write fault, whose refcount check sees the
//! batch's reference; nor isolated (reclaim, `MADV_PAGEOUT`) while it is
//! off the LRU (always in `lru_add`; in the other batches from 6.11 to
//! 6.16).
//!
//! A new folio of an `mlock`ed VMA waits in its CPU's `mlock` batch
//! (mm/mlock.c `mlock_fbatch`, `mlock_new_folio`) with a reference and off
//! the LRU, and a folio the VMA unmaps waits there with a reference too
//! (`munlock_folio`), until the batch moves: meanwhile a write fault of
//! another MM still mapping it sees one reference too many and copies
//! instead of reusing. The folios a
//! populate faults in, or an `mlock` call finds mapped, move at once (both
//! drain the batches).
//!
//! Differs from Linux: CPUs share the [`NR_PCP`] slots modulo; the other
//! batches (rotate, file deactivate, activate) are not modelled (their
//! folios move at once); no `PG_mlocked` and no unevictable list: an mlocked
//! folio stays on its list, where reclaim finds it mapped in a locked VMA;
//! `mlock_vma_folio` (a small folio mapped into a locked VMA by a swap-in
//! or a file fault) is not modelled, nor the munlock of a folio that
//! reclaim, migration, a split, KSM or khugepaged unmaps from a locked VMA.

use super::lru::LruList;
use super::{Kernel, Stats};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::phys::{pg, NR_PCP};
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use crate::sync::{this_cpu, Mutex};

/// One CPU's batches, by head frame.
#[derive(Debug, Default)]
struct CpuBatches {
    /// `lru_add`: folios on their way to the inactive list.
    add: Vec<Pfn>,
    /// `lru_deactivate`: active folios on their way to the inactive list.
    deactivate: Vec<Pfn>,
    /// `lru_lazyfree`: folios on their way to being lazily freed.
    lazyfree: Vec<Pfn>,
    /// `mlock_fbatch`: new folios of locked VMAs (on their way to the
    /// LRU) and folios being munlocked.
    mlock: Vec<(Pfn, Mlock)>,
}

/// What an `mlock` batch entry is (the `NEW_FOLIO` bit Linux keeps in
/// the batch's pointers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mlock {
    /// `mlock_new_folio`: a new folio of a locked VMA, not yet on the LRU.
    New,
    /// `munlock_folio`: a folio a locked VMA unmapped.
    Unlock,
}

/// Every CPU's batches, and whether they are in use.
#[derive(Debug)]
pub struct LruBatches {
    cpus: Vec<Mutex<CpuBatches>>,
    /// `lru_disable_count`: while above 0 no folio waits in a batch.
    disabled: AtomicU32,
}

impl Default for LruBatches {
    fn default() -> LruBatches {
        LruBatches { cpus: (0..NR_PCP).map(|_| Mutex::default()).collect(), disabled: AtomicU32::new(0) }
    }
}

impl LruBatches {
    /// The calling CPU's batches.
    fn here(&self) -> &Mutex<CpuBatches> {
        &self.cpus[this_cpu() % NR_PCP]
    }
}

/// The batches kept out of use ([`Kernel::lru_cache_disable`]) until dropped
/// (`lru_cache_enable`).
pub struct LruCacheDisabled<'k>(&'k LruBatches);

impl Drop for LruCacheDisabled<'_> {
    fn drop(&mut self) {
        self.0.disabled.fetch_sub(1, Relaxed);
    }
}

impl Kernel {
    /// `folio_add_lru`: `f`, on no list, joins this CPU's `lru_add` batch
    /// with a reference (`folio_get`); the batch moves to the LRU once
    /// full, when `f` is large, or while the batches are disabled.
    pub fn folio_add_lru(&self, f: Folio) {
        f.ref_add(1);
        let moving = self.batch_add(f, f.pfn, |b| &mut b.add);
        self.lru_add_move(moving);
    }

    /// `folio_add_lru_vma`: a new folio of a VMA joins the `mlock` batch
    /// if the VMA is `mlocked` (`mlock_new_folio`), else the `lru_add` batch.
    pub fn folio_add_lru_vma(&self, f: Folio, mlocked: bool) {
        match mlocked {
            true => self.mlock_batch_add(f, Mlock::New),
            false => self.folio_add_lru(f),
        }
    }

    /// `munlock_vma_folio`: a folio an `mlocked` VMA unmaps joins the `mlock`
    /// batch (`munlock_folio`; a large one moves the batch at once), unless
    /// a PTE (not `pmd`) of a large folio is unmapped before 6.6.
    pub fn munlock_vma_folio(&self, f: Folio, mlocked: bool, pmd: bool) {
        let sized = pmd || !f.is_large() || self.config.release().munlocks_pte_mapped_large_folios();
        if mlocked && sized {
            self.mlock_batch_add(f, Mlock::Unlock);
        }
    }

    /// `f` joins this CPU's `mlock` batch with a reference; the batch moves
    /// once full, when `f` is large, or while the batches are disabled.
    fn mlock_batch_add(&self, f: Folio, op: Mlock) {
        f.ref_add(1);
        let moving = self.batch_add(f, (f.pfn, op), |b| &mut b.mlock);
        self.mlock_folio_batch(moving);
    }

    /// `mlock_folio_batch`: a new folio joins the LRU (Linux's unevictable
    /// list), then the batch's references are dropped.
    fn mlock_folio_batch(&self, entries: Vec<(Pfn, Mlock)>) {
        let folios: Vec<Folio> = entries.iter().map(|&(pfn, _)| Folio::from_head(&self.phys, pfn)).collect();
        let new: Vec<Folio> =
            entries.iter().zip(&folios).filter(|((_, op), _)| *op == Mlock::New).map(|(_, &f)| f).collect();
        if !new.is_empty() {
            self.lru.add(&new);
        }
        folios.into_iter().for_each(|f| self.folio_put_refs(f, 1));
    }

    /// `folio_batch_add_and_move`'s add: `f` (its reference taken) joins
    /// the batch `which` picks of this CPU's as `item`; the batch is
    /// returned, to be moved, if it is now full, `f` is large or the
    /// batches are disabled (else nothing).
    fn batch_add<T>(&self, f: Folio, item: T, which: impl FnOnce(&mut CpuBatches) -> &mut Vec<T>) -> Vec<T> {
        let mut b = self.lru_batches.here().lock().unwrap();
        let batch = which(&mut b);
        batch.push(item);
        let full = batch.len() >= self.config.release().folio_batch_size() || f.is_large() || self.lru_cache_disabled();
        if full {
            std::mem::take(batch)
        } else {
            Vec::new()
        }
    }

    /// `folio_batch_move_lru(lru_add)`: the folios join their lists under
    /// one hold of the lock, then the batch's references are
    /// dropped (a folio nobody else holds any more is freed here).
    fn lru_add_move(&self, pfns: Vec<Pfn>) {
        if pfns.is_empty() {
            return;
        }
        let folios: Vec<Folio> = pfns.into_iter().map(|pfn| Folio::from_head(&self.phys, pfn)).collect();
        self.lru.add(&folios);
        folios.into_iter().for_each(|f| self.folio_put_refs(f, 1));
    }

    /// `folio_mark_lazyfree`: an anon, swap-backed folio on the LRU, not in
    /// the swap cache, joins this CPU's `lru_lazyfree` batch
    /// ([`Kernel::batch_add_listed`]); the batch moves it to the inactive
    /// list without `PG_swapbacked`, `PG_active` and `PG_referenced`
    /// (`pglazyfree`, in pages), if it still qualifies then.
    pub fn folio_mark_lazyfree(&self, f: Folio) {
        let h = f.head();
        if !f.test_anon() || !h.test(pg::SWAPBACKED) || !h.test(pg::LRU) || self.folio_swap(f).is_some() {
            return;
        }
        let moving = self.batch_add_listed(f, |b| &mut b.lazyfree);
        self.lazyfree_move(moving);
    }

    /// `folio_batch_move_lru(lru_lazyfree)` ([`Kernel::listed_move`]).
    fn lazyfree_move(&self, pfns: Vec<Pfn>) {
        let takes = |f: Folio| f.head().test(pg::SWAPBACKED) && self.folio_swap(f).is_none();
        self.listed_move(pfns, takes, pg::SWAPBACKED | pg::ACTIVE | pg::REFERENCED, &self.stats.pglazyfree);
    }

    /// `folio_deactivate`: an active folio on the LRU joins this CPU's
    /// `lru_deactivate` batch ([`Kernel::batch_add_listed`]); the batch
    /// moves it to the inactive list without `PG_active` and
    /// `PG_referenced` (`pgdeactivate`), if it is still active then. An
    /// inactive folio stays where it is.
    pub fn folio_deactivate(&self, f: Folio) {
        let h = f.head();
        if !h.test(pg::LRU) || !h.test(pg::ACTIVE) {
            return;
        }
        let moving = self.batch_add_listed(f, |b| &mut b.deactivate);
        self.deactivate_move(moving);
    }

    /// `folio_batch_move_lru(lru_deactivate)` ([`Kernel::listed_move`]).
    fn deactivate_move(&self, pfns: Vec<Pfn>) {
        let takes = |f: Folio| f.head().test(pg::ACTIVE);
        self.listed_move(pfns, takes, pg::ACTIVE | pg::REFERENCED, &self.stats.pgdeactivate);
    }

    /// `folio_batch_add_and_move` of a folio on its list (`lru_deactivate`,
    /// `lru_lazyfree`): it joins the batch `which` picks with a reference;
    /// from 6.11 to 6.16 it leaves its list as it joins
    /// (`folio_test_clear_lru`: the isolation's reference is the batch's),
    /// so that nobody isolates it meanwhile, where otherwise it keeps
    /// `PG_lru` (and a write fault, seeing it on the LRU, does not drain
    /// the batch before its refcount check). Returns the batch to move
    /// (see [`Kernel::batch_add`]).
    fn batch_add_listed(&self, f: Folio, which: impl FnOnce(&mut CpuBatches) -> &mut Vec<Pfn>) -> Vec<Pfn> {
        if self.config.release().lru_batches_clear_lru() {
            if !self.lru.isolate(f) {
                return Vec::new();
            }
        } else {
            f.ref_add(1);
        }
        self.batch_add(f, f.pfn, which)
    }

    /// `folio_batch_move_lru` of a batch [`Kernel::batch_add_listed`] filled:
    /// each folio that `takes` still (and that is still on its list, or
    /// left it as it joined) loses the flags `clear` and goes to the head
    /// of the inactive list, counted in `stat` (in pages); one it no longer
    /// takes stays as it was (back on its list, if it left it: Linux's
    /// never left it, and keeps its place); the batch's references are
    /// dropped.
    fn listed_move(&self, pfns: Vec<Pfn>, takes: impl Fn(Folio) -> bool, clear: u64, stat: &AtomicU64) {
        let left_lists = self.config.release().lru_batches_clear_lru();
        for pfn in pfns {
            let f = Folio::from_head(&self.phys, pfn);
            if takes(f) && (left_lists || self.lru.isolate(f)) {
                f.head().clear(clear);
                self.lru.putback(f, LruList::Inactive);
                Stats::add(stat, f.nr_pages());
                if !left_lists {
                    self.folio_put_refs(f, 1);
                }
            } else if left_lists {
                self.lru.putback(f, LruList::of(f.head()));
            }
            self.folio_put_refs(f, 1);
        }
    }

    /// `lru_add_drain`: this CPU's batches move (`lru_add` first, `mlock`
    /// last).
    pub fn lru_add_drain(&self) {
        self.drain_cpu(self.lru_batches.here());
    }

    /// The drain before a zap (munmap, `exit_mmap`, `MADV_DONTNEED`):
    /// this CPU's batches, before 6.14; none after.
    pub fn zap_drain(&self) {
        if self.config.release().zap_drains_lru_batches() {
            self.lru_add_drain();
        }
    }

    /// `lru_add_drain_all`: every CPU's batches move.
    pub fn lru_add_drain_all(&self) {
        self.lru_batches.cpus.iter().for_each(|b| self.drain_cpu(b));
    }

    /// `lru_cache_disable` (migration's): every CPU's batches move, and no
    /// folio waits in one until the guard is dropped (`lru_cache_enable`).
    pub fn lru_cache_disable(&self) -> LruCacheDisabled<'_> {
        self.lru_batches.disabled.fetch_add(1, Relaxed);
        self.lru_add_drain_all();
        LruCacheDisabled(&self.lru_batches)
    }

    fn lru_cache_disabled(&self) -> bool {
        self.lru_batches.disabled.load(Relaxed) > 0
    }

    fn drain_cpu(&self, batches: &Mutex<CpuBatches>) {
        let CpuBatches { add, deactivate, lazyfree, mlock } = std::mem::take(&mut *batches.lock().unwrap());
        self.lru_add_move(add);
        self.deactivate_move(deactivate);
        self.lazyfree_move(lazyfree);
        // mlock_drain_local(), after lru_add_drain_cpu().
        self.mlock_folio_batch(mlock);
    }

    /// The references the CPUs' LRU batches hold on the folio at `head`
    /// (for the checker).
    pub fn lru_batch_refs(&self, head: Pfn) -> u64 {
        let waiting = |b: &CpuBatches| {
            let mlock = b.mlock.iter().map(|(p, _)| p);
            b.add.iter().chain(&b.deactivate).chain(&b.lazyfree).chain(mlock).filter(|&&p| p == head).count() as u64
        };
        self.lru_batches.cpus.iter().map(|b| waiting(&b.lock().unwrap())).sum()
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use crate::release::KernelVersion;
    use crate::sync::cacheline::{account_as, take, Structure};
    use crate::sync::on_cpu;
    use crate::{Config, Machine};

    /// The lists' lock line is taken once per batch of small folios added
    /// on a CPU (15 before 6.9, 31 after), once for a large folio (which
    /// moves the batch), and once per 32 (6.9: 31) frees.
    #[test]
    fn the_lock_line_is_taken_once_per_batch() {
        for (release, adds, frees) in [(KernelVersion::new(6, 7), 4 + 1, 1), (KernelVersion::NEWEST, 2 + 1, 2)] {
            let m = Machine::new(Config { memory: 16 << 20, kernel: Some(release), ..Config::default() }).unwrap();
            let k = &m.kernel;
            let small: Vec<_> = (0..62).map(|_| m.alloc_folio(0).unwrap()).collect();
            let large = m.alloc_folio(2).unwrap();
            account_as(1);
            crate::kernel::lru::forget_freed();
            take();
            on_cpu(0, || small.iter().chain([&large]).for_each(|&f| k.folio_add_lru(f)));
            assert_eq!(take().accesses_of(Structure::LruLock), adds, "{release}: 62 small adds and a large one");
            small.iter().for_each(|&f| k.folio_put_refs(f, 1));
            assert_eq!(take().accesses_of(Structure::LruLock), frees, "{release}: 62 frees");
            account_as(0);
            k.folio_put_refs(large, 1);
        }
    }

    /// A folio waits in its CPU's batch, off the LRU with the batch's
    /// reference, until that CPU drains; another CPU's drain leaves it,
    /// `lru_add_drain_all` takes it.
    #[test]
    fn a_folio_waits_in_its_cpus_batch_until_that_cpu_drains() {
        let m = Machine::new(Config { memory: 16 << 20, ..Config::default() }).unwrap();
        let k = &m.kernel;
        let f = m.alloc_folio(0).unwrap();
        on_cpu(0, || k.folio_add_lru(f));
        assert_eq!((f.refcount(), k.lru_batch_refs(f.pfn)), (2, 1));
        assert!(!f.head().test(crate::phys::pg::LRU), "a waiting folio is on no list");
        on_cpu(1, || k.lru_add_drain());
        assert_eq!(k.lru_batch_refs(f.pfn), 1, "another CPU's drain leaves it waiting");
        on_cpu(1, || k.lru_add_drain_all());
        assert_eq!((f.refcount(), k.lru_batch_refs(f.pfn)), (1, 0));
        assert!(f.head().test(crate::phys::pg::LRU));
        k.folio_put_refs(f, 1);
        assert_eq!(k.lru.sizes(), (0, 0), "freed off its list");
    }

    /// An active folio `folio_deactivate` sends waits in its CPU's batch
    /// with a reference, on its list with `PG_lru` except from 6.11 to
    /// 6.16, until a drain moves it to the inactive list; an inactive
    /// folio does not wait.
    #[test]
    fn a_deactivated_folio_waits_in_its_cpus_batch() {
        use crate::kernel::lru::LruList;
        use crate::phys::pg;
        for (release, keeps_lru) in
            [(KernelVersion::new(6, 1), true), (KernelVersion::new(6, 12), false), (KernelVersion::NEWEST, true)]
        {
            let m = Machine::new(Config { memory: 16 << 20, kernel: Some(release), ..Config::default() }).unwrap();
            let k = &m.kernel;
            let f = m.alloc_folio(0).unwrap();
            k.lru.putback(f, LruList::Active);
            on_cpu(0, || k.folio_deactivate(f));
            assert_eq!((f.refcount(), k.lru_batch_refs(f.pfn)), (2, 1), "{release}");
            assert_eq!(f.head().test(pg::LRU), keeps_lru, "{release}");
            on_cpu(0, || k.lru_add_drain());
            assert_eq!((f.refcount(), k.lru.sizes()), (1, (1, 0)), "{release}: on the inactive list");
            assert!(!f.head().test(pg::ACTIVE) && f.head().test(pg::LRU));
            on_cpu(0, || k.folio_deactivate(f));
            assert_eq!(k.lru_batch_refs(f.pfn), 0, "{release}: an inactive folio does not wait");
        }
    }
}
