//! Loom checks of the per-VMA lock (seed 004): a reader against a writer
//! (no half-done change is ever seen, under `vma-rwsem` and
//! `vma-refcount`), and the lockless lookup against detach and immediate
//! reuse of the VMA object by another MM (`vma-refcount`): with the
//! revalidation a reader never holds a VMA that is not the one it looked
//! for; without it (the `no-vma-revalidate` switch), loom finds the
//! interleaving where it does. Run with
//! `RUSTFLAGS="--cfg loom" cargo test --release -p foliomm --lib loom`.

use super::fault_vma::lock_under_rcu;
use super::{Vma, VmaCache, VmaInit};
use crate::kernel::VmaLockDesign;
use crate::sync::atomic::{AtomicU64, Ordering::*};
use crate::sync::{thread, Arc, Mutex};

/// A VMA of MM `mm` over `[start, end)`, attached in write epoch `seq`.
fn attached(cache: &VmaCache, mm: u64, start: u64, end: u64, seq: u64) -> Arc<Vma> {
    let v = cache.alloc(VmaInit { mm, start, end, flags: 0, pgoff: 0, file: None });
    v.start_write(seq);
    v.mark_attached();
    v
}

/// A writer changes two words of a VMA's state under its write lock; a
/// reader that got the read lock must see both old or both new.
fn reader_against_writer(design: VmaLockDesign) {
    loom::model(move || {
        let cache = VmaCache::new(design);
        let vma = attached(&cache, 1, 0, 10, 1);
        let mm_seq = Arc::new(AtomicU64::new(2));
        let words = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let writer = {
            let (vma, mm_seq, words) = (vma.clone(), mm_seq.clone(), words.clone());
            thread::spawn(move || {
                let seq = mm_seq.fetch_add(1, AcqRel) + 1;
                vma.start_write(seq);
                words.0.store(1, Relaxed);
                words.1.store(1, Relaxed);
                mm_seq.fetch_add(1, Release);
            })
        };
        if vma.start_read(1, &mm_seq, true).is_ok() {
            let seen = (words.0.load(Relaxed), words.1.load(Relaxed));
            assert_eq!(seen.0, seen.1, "a reader saw a half-done change");
            vma.end_read();
        }
        writer.join().unwrap();
        assert_eq!(vma.lock.readers(), Some(0), "every read lock was released");
    });
}

#[test]
fn loom_vma_rwsem_reader_against_writer() {
    reader_against_writer(VmaLockDesign::VmaRwsem);
}

#[test]
fn loom_vma_refcount_reader_against_writer() {
    reader_against_writer(VmaLockDesign::VmaRefcount);
}

/// MM 1 unmaps its VMA over `[0, 10)` (write-lock, remove, detach, free)
/// and MM 2 at once maps `[100, 110)` with the same object, while a thread
/// of MM 1 looks address 5 up without the mmap_lock. Whatever the reader
/// holds must be MM 1's VMA over address 5, and stay so while held.
fn lookup_against_reuse(revalidate: bool) {
    loom::model(move || {
        let cache = Arc::new(VmaCache::new(VmaLockDesign::VmaRefcount));
        let x = attached(&cache, 1, 0, 10, 1);
        let tree = Arc::new(Mutex::new(Some(x)));
        let mm1_seq = Arc::new(AtomicU64::new(2));
        let unmapper = {
            let (cache, tree, mm1_seq) = (cache.clone(), tree.clone(), mm1_seq.clone());
            thread::spawn(move || {
                let seq = mm1_seq.fetch_add(1, AcqRel) + 1;
                let x = tree.lock().unwrap().clone().unwrap();
                x.start_write(seq);
                *tree.lock().unwrap() = None;
                x.mark_detached();
                cache.free(x);
                let y = attached(&cache, 2, 100, 110, 1);
                assert_eq!(y.mm(), 2);
                mm1_seq.fetch_add(1, Release);
            })
        };
        let lookup = || tree.lock().unwrap().clone();
        if let Some(v) = lock_under_rcu(lookup, 1, &mm1_seq, 5, revalidate, &mut 0) {
            let ok = v.mm() == 1 && v.contains(5);
            v.end_read();
            assert!(ok, "a reader holds a VMA reused for another MM or range");
        }
        unmapper.join().unwrap();
    });
}

#[test]
fn loom_vma_lookup_revalidates_a_reused_vma() {
    lookup_against_reuse(true);
}

#[test]
#[should_panic(expected = "a reader holds a VMA reused for another MM or range")]
fn loom_vma_lookup_without_revalidation_is_caught() {
    lookup_against_reuse(false);
}
