//! Seed 000's atomic seqcount (the RFC's `rmap_id` seqcount with concurrent
//! writers and the exclusive-writer fast path).

use super::atomic::{fence, AtomicI32, Ordering::*};
use super::backoff;

/// Seed 000's "atomic seqcount": a sequence count whose write side is an
/// atomic increment, so that several writers may be inside at once, while
/// readers retry whenever a writer was inside or the sequence moved. A writer
/// that finds nobody else inside enters exclusively and may update the
/// protected values with plain loads and stores instead of atomic
/// read-modify-writes; shared writers wait until it leaves.
///
/// The 32-bit word holds the number of writers inside (bits 0..15), the
/// exclusive flag (bit 15) and the sequence (bits 16..32). A writer that
/// finds nobody inside tries to enter exclusively with one compare-exchange;
/// any other writer registers as a shared writer with one atomic add (from
/// then on nobody can enter exclusively) and waits for an exclusive writer
/// to leave. Leaving is one atomic add either way (the seed counts 2 atomic
/// RMWs for the seqcount). As `write_seqcount_begin` does with `smp_wmb()`,
/// entering is followed by a release fence, so a reader that sees a value
/// written inside also sees the writer's entry. Differs from the seed: the
/// counter is one i32 of the memmap, and waiting spins and yields.
pub struct AtomicSeqcount<'a>(pub &'a AtomicI32);

/// An open write section: whether the writer is alone in it, and the rounds
/// it spun to get in.
#[derive(Clone, Copy, Debug)]
pub struct SeqWrite {
    pub exclusive: bool,
    pub spins: u32,
}

const WRITERS: u32 = 0x7fff;
const EXCLUSIVE: u32 = 0x8000;
const SEQ_ONE: u32 = 0x1_0000;

impl AtomicSeqcount<'_> {
    /// Enters the write side; the writer is exclusive (and may use plain
    /// updates) when nobody else was inside.
    pub fn write_begin(&self) -> SeqWrite {
        let s = self.0.load(Relaxed) as u32;
        if s & WRITERS == 0 && self.0.compare_exchange(s as i32, (s | EXCLUSIVE | 1) as i32, Acquire, Relaxed).is_ok() {
            fence(Release);
            return SeqWrite { exclusive: true, spins: 0 };
        }
        let mut spins = 0;
        let mut s = self.0.fetch_add(1, Acquire) as u32 + 1;
        while s & EXCLUSIVE != 0 {
            backoff(&mut spins);
            s = self.0.load(Acquire) as u32;
        }
        fence(Release);
        SeqWrite { exclusive: false, spins }
    }

    /// Leaves the write side, moving the sequence on.
    pub fn write_end(&self, w: SeqWrite) {
        let leave = if w.exclusive { EXCLUSIVE + 1 } else { 1 };
        self.0.fetch_add(SEQ_ONE.wrapping_sub(leave) as i32, Release);
    }

    /// Reads a consistent snapshot with `read`, retrying while writers are
    /// inside or a write happened meanwhile.
    pub fn read<T>(&self, read: impl Fn() -> T) -> T {
        let mut spins = 0;
        loop {
            let s1 = self.0.load(Acquire) as u32;
            if s1 & (WRITERS | EXCLUSIVE) != 0 {
                backoff(&mut spins);
                continue;
            }
            let v = read();
            fence(Acquire);
            if self.0.load(Relaxed) as u32 == s1 {
                return v;
            }
        }
    }

    /// Whether no writer is inside (for the checker at a quiescent point).
    pub fn is_idle(&self) -> bool {
        self.0.load(Acquire) as u32 & (WRITERS | EXCLUSIVE) == 0
    }
}
