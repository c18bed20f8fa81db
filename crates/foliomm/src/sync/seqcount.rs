//! Seed 000's atomic seqcount (the RFC's `include/linux/atomic_seqcount.h`:
//! `raw_atomic_seqcount_t` with concurrent writers, and from patch 16 on
//! the exclusive-writer fast path).

use super::atomic::{fence, AtomicU64, Ordering::*};
use super::backoff;
use super::cacheline::{self, Structure};

/// How a writer enters, by the series' stage: every writer shared (patches
/// 6-15), a lone writer exclusive through a compare-exchange (patches
/// 16-17, `atomic_long_try_cmpxchg`), or through an add-return that backs
/// off to shared when it finds company (patch 18, 64-bit only); or, as the
/// seed's Q/A asked ("a bit spinlock + ordinary seqcount instead of the
/// atomic seqcount"), every writer exclusive, waiting until it is alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeqEntry {
    SharedOnly,
    Cmpxchg,
    AddReturn,
    Locked,
}

/// Seed 000's "atomic seqcount": a sequence count whose write side is an
/// atomic add, so that several writers may be inside at once, while readers
/// retry whenever a writer was inside or the sequence moved. With an
/// exclusive entry ([`SeqEntry`]), a writer that finds nobody else inside
/// enters exclusively and may update the protected values with plain loads
/// and stores; shared writers wait until it leaves.
///
/// The 64-bit word holds shared writers (bits 0..16), exclusive writers
/// (bits 16..32: one bit set by the compare-exchange entry, a count for the
/// add-return entry, where several may race in before backing off) and the
/// sequence (bits 32..64), as patch 18's 64-bit layout. Entering is followed
/// by a release fence (`write_seqcount_begin`'s `smp_wmb()`), so a reader
/// that sees a value written inside also sees the writer's entry. Differs
/// from the RFC: the compare-exchange stages use patch 18's layout too (a
/// 32-bit sequence where the RFC had 47 bits), the word sits in the second
/// page's `link`, and waiting spins and yields.
pub struct AtomicSeqcount<'a> {
    word: &'a AtomicU64,
    /// The structure the word's line belongs to: every access to the word
    /// is one to its line ([`super::cacheline`]).
    structure: Structure,
    entry: SeqEntry,
    layout: &'static Layout,
}

/// Where the word keeps its writers and its sequence.
#[derive(Debug)]
struct Layout {
    shared_one: u64,
    exclusive_one: u64,
    exclusive_mask: u64,
    writers: u64,
    step: u64,
}

/// Patch 18's 64-bit layout.
static PATCH_18: Layout =
    Layout { shared_one: 1, exclusive_one: 1 << 16, exclusive_mask: 0xffff << 16, writers: 0xffff_ffff, step: 1 << 32 };

/// Seed 000's idea of "merging the total mapcount with the seqcount": 1,023
/// shared and 1,023 exclusive writers (bits 0..20), a value (bits 20..44,
/// biased by 2^23, so that it borrows from nothing), and a 20-bit sequence
/// on top, whose carry leaves the word.
static MERGED: Layout =
    Layout { shared_one: 1, exclusive_one: 1 << 10, exclusive_mask: 0x3ff << 10, writers: 0xf_ffff, step: 1 << 44 };
const VALUE_SHIFT: u32 = 20;
const VALUE_BIAS: i64 = 1 << 23;
const VALUE_MASK: u64 = (1 << 24) - 1;

/// An open write section: whether the writer is alone in it, and what
/// entering cost.
#[derive(Clone, Copy, Debug)]
pub struct SeqWrite {
    pub exclusive: bool,
    /// Rounds spun waiting for an exclusive writer to leave.
    pub spins: u32,
    /// Atomic RMWs of the entry: 1, or 2 when an exclusive attempt lost.
    pub rmw: u32,
    /// Whether an exclusive attempt lost a race (a failed compare-exchange,
    /// or an add-return that found another writer and backed off).
    pub lost: bool,
}

impl<'a> AtomicSeqcount<'a> {
    /// The seqcount in `word`, a word of a line of `s`, entered by `entry`.
    pub fn new(s: Structure, word: &'a AtomicU64, entry: SeqEntry) -> AtomicSeqcount<'a> {
        AtomicSeqcount { word, structure: s, entry, layout: &PATCH_18 }
    }

    /// The seqcount with a value merged into its word ([`MERGED`]): the
    /// value changes in the exit's RMW ([`Self::write_end_adding`]), so a
    /// shared writer saves the value's own RMW. Differs from patch 18's:
    /// at most 1,023 writers of each kind inside at once, a value within
    /// ±2^23, and a reader fooled only by 2^20 sections during its read.
    pub fn merged(self) -> AtomicSeqcount<'a> {
        AtomicSeqcount { layout: &MERGED, ..self }
    }

    /// A merged word holding `value`, no writer inside (`raw_seqcount_init`).
    pub fn merged_init(value: i64) -> u64 {
        ((value + VALUE_BIAS) as u64) << VALUE_SHIFT
    }

    /// The value of a merged word (a snapshot only inside [`Self::read`]).
    pub fn merged_value(&self) -> i64 {
        self.touch(false);
        ((self.word.load(Relaxed) >> VALUE_SHIFT) & VALUE_MASK) as i64 - VALUE_BIAS
    }

    /// Adds `delta` to a merged word's value without a write section (one
    /// RMW; readers retry, as for a section).
    pub fn add_merged(&self, delta: i64) {
        self.touch(true);
        self.word.fetch_add((delta as u64) << VALUE_SHIFT, Release);
    }

    /// An access to the word's line, a write if `write`.
    fn touch(&self, write: bool) {
        match write {
            true => cacheline::write(self.structure, self.word),
            false => cacheline::read(self.structure, self.word),
        }
    }

    /// The word's address, for the simulation's lock-wait accounting.
    fn key(&self) -> usize {
        self.word as *const AtomicU64 as usize
    }

    /// `raw_write_atomic_seqcount_begin`: enters the write side; the writer
    /// is exclusive (and may use plain updates) when the entry allows it
    /// and nobody else was inside.
    pub fn write_begin(&self) -> SeqWrite {
        let mut w = SeqWrite { exclusive: false, spins: 0, rmw: 1, lost: false };
        self.touch(true);
        if self.entry == SeqEntry::Locked {
            return self.lock(w);
        }
        let s = self.word.load(Relaxed);
        if self.entry != SeqEntry::SharedOnly && s & self.layout.writers == 0 {
            if self.entry == SeqEntry::Cmpxchg {
                if self.word.compare_exchange(s, s | self.layout.exclusive_one, Acquire, Relaxed).is_ok() {
                    fence(Release);
                    return SeqWrite { exclusive: true, ..w };
                }
            } else {
                let s = self.word.fetch_add(self.layout.exclusive_one, Acquire).wrapping_add(self.layout.exclusive_one);
                if s & self.layout.writers == self.layout.exclusive_one {
                    fence(Release);
                    return SeqWrite { exclusive: true, ..w };
                }
                // Raced with another writer: become a shared one.
                w.rmw += 1;
                w.lost = true;
                self.word.fetch_add(self.layout.shared_one.wrapping_sub(self.layout.exclusive_one), Acquire);
                self.wait_exclusive(&mut w);
                return w;
            }
            w.rmw += 1;
            w.lost = true;
        }
        self.word.fetch_add(self.layout.shared_one, Acquire);
        self.wait_exclusive(&mut w);
        w
    }

    /// [`SeqEntry::Locked`]: a test-and-test-and-set of the exclusive bit
    /// while no writer is inside (`bit_spin_lock`), then the plain
    /// sequence's write side; every failed compare-exchange is an RMW more.
    fn lock(&self, mut w: SeqWrite) -> SeqWrite {
        loop {
            let s = self.word.load(Relaxed);
            if s & self.layout.writers == 0 {
                if self.word.compare_exchange(s, s | self.layout.exclusive_one, Acquire, Relaxed).is_ok() {
                    fence(Release);
                    return SeqWrite { exclusive: true, ..w };
                }
                w.rmw += 1;
                w.lost = true;
            }
            backoff(&mut w.spins, self.key());
            self.touch(false);
        }
    }

    /// A shared writer waits for every exclusive writer to leave.
    fn wait_exclusive(&self, w: &mut SeqWrite) {
        while self.word.load(Acquire) & self.layout.exclusive_mask != 0 {
            backoff(&mut w.spins, self.key());
            self.touch(false);
        }
        fence(Release);
    }

    /// `raw_write_atomic_seqcount_end`: leaves the write side, moving the
    /// sequence on (one atomic add either way).
    pub fn write_end(&self, w: SeqWrite) {
        self.write_end_adding(w, 0);
    }

    /// Leaves the write side and, in a merged word, adds `delta` to its
    /// value, in the one atomic add.
    pub fn write_end_adding(&self, w: SeqWrite, delta: i64) {
        let leave = if w.exclusive { self.layout.exclusive_one } else { self.layout.shared_one };
        debug_assert!(delta == 0 || std::ptr::eq(self.layout, &MERGED), "a value in an unmerged word");
        self.touch(true);
        let add = self.layout.step.wrapping_sub(leave).wrapping_add((delta as u64) << VALUE_SHIFT);
        self.word.fetch_add(add, Release);
    }

    /// Reads a consistent snapshot with `read`, retrying while writers are
    /// inside or a write happened meanwhile (`raw_read_atomic_seqcount_begin`
    /// / `_retry`).
    pub fn read<T>(&self, read: impl Fn() -> T) -> T {
        let mut spins = 0;
        loop {
            if let Some(v) = self.try_read(&read) {
                return v;
            }
            backoff(&mut spins, self.key());
        }
    }

    /// Reads a snapshot with `read` once; None if a writer was inside or
    /// the sequence moved meanwhile (the caller may give up instead of
    /// retrying).
    pub fn try_read<T>(&self, read: impl Fn() -> T) -> Option<T> {
        self.touch(false);
        let s1 = self.word.load(Acquire);
        if s1 & self.layout.writers != 0 {
            return None;
        }
        let v = read();
        fence(Acquire);
        self.touch(false);
        (self.word.load(Relaxed) == s1).then_some(v)
    }

    /// Whether no writer is inside (for the checker at a quiescent point).
    pub fn is_idle(&self) -> bool {
        self.word.load(Acquire) & self.layout.writers == 0
    }
}
