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
}

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

const SHARED_ONE: u64 = 1;
const EXCLUSIVE_ONE: u64 = 1 << 16;
const EXCLUSIVE_MASK: u64 = 0xffff << 16;
const WRITERS: u64 = 0xffff_ffff;
const STEP: u64 = 1 << 32;

impl<'a> AtomicSeqcount<'a> {
    /// The seqcount in `word`, a word of a line of `s`, entered by `entry`.
    pub fn new(s: Structure, word: &'a AtomicU64, entry: SeqEntry) -> AtomicSeqcount<'a> {
        AtomicSeqcount { word, structure: s, entry }
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
        if self.entry != SeqEntry::SharedOnly && s & WRITERS == 0 {
            if self.entry == SeqEntry::Cmpxchg {
                if self.word.compare_exchange(s, s | EXCLUSIVE_ONE, Acquire, Relaxed).is_ok() {
                    fence(Release);
                    return SeqWrite { exclusive: true, ..w };
                }
            } else {
                let s = self.word.fetch_add(EXCLUSIVE_ONE, Acquire).wrapping_add(EXCLUSIVE_ONE);
                if s & WRITERS == EXCLUSIVE_ONE {
                    fence(Release);
                    return SeqWrite { exclusive: true, ..w };
                }
                // Raced with another writer: become a shared one.
                w.rmw += 1;
                w.lost = true;
                self.word.fetch_add(SHARED_ONE.wrapping_sub(EXCLUSIVE_ONE), Acquire);
                self.wait_exclusive(&mut w);
                return w;
            }
            w.rmw += 1;
            w.lost = true;
        }
        self.word.fetch_add(SHARED_ONE, Acquire);
        self.wait_exclusive(&mut w);
        w
    }

    /// [`SeqEntry::Locked`]: a test-and-test-and-set of the exclusive bit
    /// while no writer is inside (`bit_spin_lock`), then the plain
    /// sequence's write side; every failed compare-exchange is an RMW more.
    fn lock(&self, mut w: SeqWrite) -> SeqWrite {
        loop {
            let s = self.word.load(Relaxed);
            if s & WRITERS == 0 {
                if self.word.compare_exchange(s, s | EXCLUSIVE_ONE, Acquire, Relaxed).is_ok() {
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
        while self.word.load(Acquire) & EXCLUSIVE_MASK != 0 {
            backoff(&mut w.spins, self.key());
            self.touch(false);
        }
        fence(Release);
    }

    /// `raw_write_atomic_seqcount_end`: leaves the write side, moving the
    /// sequence on (one atomic add either way).
    pub fn write_end(&self, w: SeqWrite) {
        let leave = if w.exclusive { EXCLUSIVE_ONE } else { SHARED_ONE };
        self.touch(true);
        self.word.fetch_add(STEP.wrapping_sub(leave), Release);
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
        if s1 & WRITERS != 0 {
            return None;
        }
        let v = read();
        fence(Acquire);
        self.touch(false);
        (self.word.load(Relaxed) == s1).then_some(v)
    }

    /// Whether no writer is inside (for the checker at a quiescent point).
    pub fn is_idle(&self) -> bool {
        self.word.load(Acquire) & WRITERS == 0
    }
}
