//! The primitives under real threads (the loom tests check every interleaving).

use super::atomic::{AtomicU64, Ordering::Relaxed};
use super::cacheline::Structure;
use super::*;

#[test]
fn excludes_other_holders() {
    let w = AtomicU64::new(0);
    let g = BitSpinLock::lock(Structure::Folio, &w, 3);
    assert!(BitSpinLock::try_lock(Structure::Folio, &w, 3).is_none());
    // A failed attempt leaves the holder's lock alone.
    assert_eq!(w.load(Relaxed) & (1 << 3), 1 << 3);
    assert!(BitSpinLock::try_lock(Structure::Folio, &w, 3).is_none());
    assert!(BitSpinLock::try_lock(Structure::Folio, &w, 4).is_some(), "other bits are independent");
    drop(g);
    assert!(BitSpinLock::try_lock(Structure::Folio, &w, 3).is_some());
}

#[test]
fn seqcount_readers_never_see_a_torn_pair() {
    // Writers keep two values equal; readers must never see them differ.
    for entry in [SeqEntry::SharedOnly, SeqEntry::Cmpxchg, SeqEntry::AddReturn, SeqEntry::Locked] {
        let seq = AtomicU64::new(0);
        let (a, b) = (AtomicU64::new(0), AtomicU64::new(0));
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        let sc = AtomicSeqcount::new(Structure::Folio, &seq, entry);
                        let w = sc.write_begin();
                        if w.exclusive {
                            a.store(a.load(Relaxed) + 1, Relaxed);
                            b.store(b.load(Relaxed) + 1, Relaxed);
                        } else {
                            a.fetch_add(1, Relaxed);
                            b.fetch_add(1, Relaxed);
                        }
                        sc.write_end(w);
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..20_000 {
                    let (x, y) =
                        AtomicSeqcount::new(Structure::Folio, &seq, entry).read(|| (a.load(Relaxed), b.load(Relaxed)));
                    assert_eq!(x, y, "{entry:?}: a reader saw a half-done update");
                }
            });
        });
        assert_eq!(a.load(Relaxed), 40_000, "{entry:?}: no update was lost");
        assert!(AtomicSeqcount::new(Structure::Folio, &seq, entry).is_idle());
    }
}

#[test]
fn serialises_increments() {
    let w = AtomicU64::new(0);
    let n = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..10_000 {
                    let _g = BitSpinLock::lock(Structure::Folio, &w, 0);
                    let v = n.load(Relaxed);
                    n.store(v + 1, Relaxed);
                }
            });
        }
    });
    assert_eq!(n.load(Relaxed), 20_000);
}
