//! Loom checks of the lock protocols: every interleaving (up to loom's
//! preemption bound, `LOOM_MAX_PREEMPTIONS`) of a few threads is run, and
//! each must keep the protocol's promise. Run with
//! `RUSTFLAGS="--cfg loom" cargo test --release -p foliomm --lib loom`.

use loom::sync::Arc;

use super::atomic::{AtomicU64, Ordering::Relaxed};
use super::{thread, AtomicSeqcount, BitSpinLock, SeqEntry};

/// Two values a writer keeps equal, under a seqcount; with `merged`, the
/// second is the seqcount's own value (seed 000's merged mapcount).
struct Pair {
    seq: AtomicU64,
    a: AtomicU64,
    b: AtomicU64,
    entry: SeqEntry,
    merged: bool,
}

impl Pair {
    /// One write section adding 1 to both values: plain when exclusive,
    /// atomic adds when shared (as the rmap-id design updates its sums).
    fn new(entry: SeqEntry) -> Pair {
        Pair { seq: AtomicU64::new(0), a: AtomicU64::new(0), b: AtomicU64::new(0), entry, merged: false }
    }

    fn merged(entry: SeqEntry) -> Pair {
        Pair { seq: AtomicU64::new(AtomicSeqcount::merged_init(0)), merged: true, ..Pair::new(entry) }
    }

    fn seqcount(&self) -> AtomicSeqcount<'_> {
        let sc = AtomicSeqcount::new(super::cacheline::Structure::Folio, &self.seq, self.entry);
        if self.merged {
            sc.merged()
        } else {
            sc
        }
    }

    fn write(&self) -> bool {
        let sc = self.seqcount();
        let w = sc.write_begin();
        let values = if self.merged { &[&self.a][..] } else { &[&self.a, &self.b][..] };
        for v in values {
            if w.exclusive {
                v.store(v.load(Relaxed) + 1, Relaxed);
            } else {
                v.fetch_add(1, Relaxed);
            }
        }
        sc.write_end_adding(w, self.merged as i64);
        w.exclusive
    }

    fn snapshot(&self) -> (u64, u64) {
        let sc = self.seqcount();
        let b = || if self.merged { sc.merged_value() as u64 } else { self.b.load(Relaxed) };
        sc.read(|| (self.a.load(Relaxed), b()))
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
    two_increments(|w, b| BitSpinLock::lock(super::cacheline::Structure::Folio, w, b));
}

#[test]
#[should_panic(expected = "an increment was lost")]
fn loom_bit_spinlock_without_acquire_release_is_caught() {
    two_increments(|w, b| BitSpinLock::lock_relaxed(w, b));
}

/// Two writers and a reader under seqcount entry `entry`: no torn read, no
/// lost update; some interleaving had a writer take the exclusive path
/// exactly when the entry has one, and some had a writer share the section
/// exactly when the entry lets two in at once (all but `Locked`).
fn writers_at_once_and_a_reader(entry: SeqEntry) {
    writers_at_once_and_a_reader_of(entry, Pair::new);
}

fn writers_at_once_and_a_reader_of(entry: SeqEntry, pair: fn(SeqEntry) -> Pair) {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed as R};
    // What explored interleavings showed (outside loom's model: kept
    // across its executions): two writers inside at once, an exclusive one.
    let saw = std::sync::Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
    let seen = saw.clone();
    loom::model(move || {
        let p = Arc::new(pair(entry));
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
        assert!(p.seqcount().is_idle());
        seen[0].fetch_or(exclusive.contains(&false), R);
        seen[1].fetch_or(exclusive.contains(&true), R);
    });
    assert_eq!(
        saw[0].load(R),
        entry != SeqEntry::Locked,
        "{entry:?}: a writer shares the section exactly when the entry lets two in at once"
    );
    assert_eq!(
        saw[1].load(R),
        entry != SeqEntry::SharedOnly,
        "{entry:?}: the exclusive path is taken exactly when allowed"
    );
}

#[test]
fn loom_seqcount_shared_writers() {
    writers_at_once_and_a_reader(SeqEntry::SharedOnly);
}

#[test]
fn loom_seqcount_cmpxchg_exclusive_entry() {
    writers_at_once_and_a_reader(SeqEntry::Cmpxchg);
}

#[test]
fn loom_seqcount_add_return_exclusive_entry() {
    writers_at_once_and_a_reader(SeqEntry::AddReturn);
}

/// Stage all-merged: the second value is the word's own, changed by the
/// leaving RMW; readers still never see one value without the other.
#[test]
fn loom_seqcount_with_a_value_merged_into_its_word() {
    writers_at_once_and_a_reader_of(SeqEntry::AddReturn, Pair::merged);
}

/// The Q/A's bit spinlock + ordinary seqcount: never two writers inside,
/// so plain updates lose nothing, and a reader never sees half of one.
#[test]
fn loom_seqcount_locked_entry_admits_one_writer_at_a_time() {
    writers_at_once_and_a_reader(SeqEntry::Locked);
}

#[test]
fn loom_seqcount_lone_writer_is_exclusive() {
    for entry in [SeqEntry::Cmpxchg, SeqEntry::AddReturn] {
        loom::model(move || {
            let p = Arc::new(Pair::new(entry));
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
}

/// A reader that reads the two values once, without the seqcount: loom
/// must find the interleaving where it sees a writer's half-done update
/// (what the seqcount's retry is for).
#[test]
#[should_panic(expected = "a reader saw a half-done update")]
fn loom_seqcount_reader_that_never_retries_is_caught() {
    loom::model(|| {
        let p = Arc::new(Pair::new(SeqEntry::SharedOnly));
        let writer = {
            let p = p.clone();
            thread::spawn(move || p.write())
        };
        let (a, b) = (p.a.load(Relaxed), p.b.load(Relaxed));
        assert_eq!(a, b, "a reader saw a half-done update");
        writer.join().unwrap();
    });
}
