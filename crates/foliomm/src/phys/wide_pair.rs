//! Two 64-bit words of a descriptor changed by one 128-bit atomic: seed
//! 000's idea "Using 128bit/256bit/512bit atomics might help" for the rmap
//! sums (stage `all-wide`). x86-64 has no 128-bit atomic add; Linux's
//! `try_cmpxchg128()` is a compare-exchange (`cmpxchg16b`; arm64's `casp`),
//! so an addition is a load and a loop of exchanges that fails whenever
//! another CPU changed either half in between.

use super::Page;
use crate::sync::atomic::Ordering::Relaxed;

/// Bytes 32..48 of a descriptor (its `w[0..4]`), as two 64-bit halves.
#[cfg(not(any(loom, shuttle)))]
pub struct WidePair<'a>(&'a portable_atomic::AtomicU128);

/// Under loom and shuttle, which have no 128-bit atomic, the halves are the
/// descriptor's `link` and `ids` (the same cache line), each changed by its
/// own 64-bit atomic: every addition stays atomic, which is all a reader
/// inside the rmap seqcount needs; only the number of locked operations
/// differs from the 128-bit pair.
#[cfg(any(loom, shuttle))]
pub struct WidePair<'a>([&'a crate::sync::atomic::AtomicU64; 2]);

// The pair's 16 bytes are 16-byte aligned in a 64-byte aligned descriptor.
#[cfg(not(any(loom, shuttle)))]
const _: () = assert!(
    std::mem::offset_of!(Page, w) % 16 == 0 && std::mem::offset_of!(Page, ids) >= std::mem::offset_of!(Page, w) + 16
);

impl Page {
    /// The 128-bit pair of this descriptor. Only a tail page's pair is
    /// meant: the second page's `w` holds the mapcount designs' fields.
    pub fn wide_pair(&self) -> WidePair<'_> {
        #[cfg(not(any(loom, shuttle)))]
        {
            let p = self.w.as_ptr() as *mut u128;
            // SAFETY: `w` starts 32 bytes into a 64-byte aligned descriptor
            // (asserted above), so `p` is aligned to 16, and `w[0..4]` lives
            // as long as `self`; `AtomicI32` has the layout of `i32`, with
            // interior mutability. The 32-bit accesses to these bytes are
            // the stores that prepare and clear a descriptor, when no one
            // else can reach the folio (ordered by the allocator's locks);
            // while the folio is allocated only the pair reaches them at
            // stage `all-wide`, the one user. No mixed-size access races.
            WidePair(unsafe { portable_atomic::AtomicU128::from_ptr(p) })
        }
        #[cfg(any(loom, shuttle))]
        WidePair([&self.link, &self.ids])
    }
}

#[cfg(not(any(loom, shuttle)))]
impl WidePair<'_> {
    /// Both halves, read at once.
    pub fn load(&self) -> [u64; 2] {
        split(self.0.load(Relaxed))
    }

    /// Sets both halves at once.
    pub fn store(&self, v: [u64; 2]) {
        self.0.store(join(v), Relaxed)
    }

    /// Adds `d` to the halves, each wrapping at 64 bits, by compare-exchange;
    /// returns how many exchanges failed (each a locked operation lost to
    /// another writer).
    pub fn add(&self, d: [u64; 2]) -> u64 {
        let mut failed = 0;
        let mut cur = self.0.load(Relaxed);
        loop {
            let [a, b] = split(cur);
            match self.0.compare_exchange(cur, join([a.wrapping_add(d[0]), b.wrapping_add(d[1])]), Relaxed, Relaxed) {
                Ok(_) => return failed,
                Err(now) => (cur, failed) = (now, failed + 1),
            }
        }
    }
}

#[cfg(any(loom, shuttle))]
impl WidePair<'_> {
    /// Both halves, one after the other.
    pub fn load(&self) -> [u64; 2] {
        self.0.map(|h| h.load(Relaxed))
    }

    /// Sets both halves, one after the other.
    pub fn store(&self, v: [u64; 2]) {
        self.0.iter().zip(v).for_each(|(h, v)| h.store(v, Relaxed));
    }

    /// Adds `d` to the halves, each by its own atomic; never fails.
    pub fn add(&self, d: [u64; 2]) -> u64 {
        self.0.iter().zip(d).for_each(|(h, d)| _ = h.fetch_add(d, Relaxed));
        0
    }
}

#[cfg(not(any(loom, shuttle)))]
fn split(v: u128) -> [u64; 2] {
    [v as u64, (v >> 64) as u64]
}

#[cfg(not(any(loom, shuttle)))]
fn join(v: [u64; 2]) -> u128 {
    v[0] as u128 | (v[1] as u128) << 64
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;

    #[test]
    fn halves_wrap_on_their_own_and_concurrent_adds_all_land() {
        let page = Page::default();
        let pair = page.wide_pair();
        pair.store([u64::MAX, 7]);
        assert_eq!(pair.add([1, 2]), 0);
        assert_eq!(pair.load(), [0, 9], "the low half wraps without carrying into the high one");
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| (0..10_000).for_each(|_| _ = page.wide_pair().add([1, u64::MAX])));
            }
        });
        assert_eq!(page.wide_pair().load(), [20_000, 9u64.wrapping_sub(20_000)]);
        // Little-endian: w[0] is the low half's low 32 bits, w[2] the high half's.
        assert_eq!(page.w[0].load(Relaxed) as u32, 20_000, "the pair is w[0..4]");
        assert_eq!(page.w[2].load(Relaxed) as u32, 9u64.wrapping_sub(20_000) as u32);
    }
}
