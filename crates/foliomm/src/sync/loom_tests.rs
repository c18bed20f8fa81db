//! Loom checks of the lock protocols: every interleaving (up to loom's
//! preemption bound, `LOOM_MAX_PREEMPTIONS`) of a few threads is run, and
//! each must keep the protocol's promise. Run with
//! `RUSTFLAGS="--cfg loom" cargo test --release -p foliomm --lib loom`.

use loom::sync::Arc;

use super::atomic::{AtomicI32, AtomicU64, Ordering::Relaxed};
use super::{thread, AtomicSeqcount, BitSpinLock};

/// Two values a writer keeps equal, under a seqcount.
#[derive(Default)]
struct Pair {
    seq: AtomicI32,
    a: AtomicU64,
    b: AtomicU64,
}

impl Pair {
    /// One write section adding 1 to both values: plain when exclusive,
    /// atomic adds when shared (as the rmap-id design updates its sums).
    fn write(&self) -> bool {
        let sc = AtomicSeqcount(&self.seq);
        let w = sc.write_begin();
        for v in [&self.a, &self.b] {
            if w.exclusive {
                v.store(v.load(Relaxed) + 1, Relaxed);
            } else {
                v.fetch_add(1, Relaxed);
            }
        }
        sc.write_end(w);
        w.exclusive
    }

    fn snapshot(&self) -> (u64, u64) {
        AtomicSeqcount(&self.seq).read(|| (self.a.load(Relaxed), self.b.load(Relaxed)))
    }
}

/// Two threads each add 1 under the lock taken by `lock`; the total must be 2.
fn two_increments(lock: for<'a> fn(&'a AtomicU64, u32) -> BitSpinLock<'a>) {
    loom::model(move || {
        let shared = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let s = shared.clone();
                thread::spawn(move || {
                    let _g = lock(&s.0, 0);
                    // A non-atomic increment: lost if two holders overlap.
                    s.1.store(s.1.load(Relaxed) + 1, Relaxed);
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(shared.1.load(Relaxed), 2, "an increment was lost");
        assert_eq!(shared.0.load(Relaxed), 0, "the lock bit is released");
    });
}

#[test]
fn loom_bit_spinlock_excludes() {
    two_increments(|w, b| BitSpinLock::lock(w, b));
}

#[test]
#[should_panic(expected = "an increment was lost")]
fn loom_bit_spinlock_without_acquire_release_is_caught() {
    two_increments(|w, b| BitSpinLock::lock_relaxed(w, b));
}

#[test]
fn loom_seqcount_writers_at_once_and_a_reader() {
    // Whether any explored interleaving had a writer enter shared (while
    // another was inside): the concurrent-writer path must be reachable.
    static SAW_SHARED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    loom::model(|| {
        let p = Arc::new(Pair::default());
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let p = p.clone();
                thread::spawn(move || p.write())
            })
            .collect();
        let (a, b) = p.snapshot();
        assert_eq!(a, b, "a reader saw a half-done update");
        let exclusive: Vec<bool> = writers.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(p.snapshot(), (2, 2), "no update was lost");
        assert!(AtomicSeqcount(&p.seq).is_idle());
        if exclusive.contains(&false) {
            SAW_SHARED.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    });
    assert!(SAW_SHARED.load(std::sync::atomic::Ordering::Relaxed), "no interleaving had two writers inside at once");
}

#[test]
fn loom_seqcount_lone_writer_is_exclusive() {
    loom::model(|| {
        let p = Arc::new(Pair::default());
        let w = {
            let p = p.clone();
            thread::spawn(move || p.write())
        };
        let (a, b) = p.snapshot();
        assert_eq!(a, b);
        assert!(w.join().unwrap(), "a writer with nobody inside takes the exclusive fast path");
        assert!(p.write(), "and so does the next one once it left");
    });
}
