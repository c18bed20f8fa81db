//! What changed since the checker last asked: page tables written, blocks
//! allocated or freed, and MMs created or whose VMAs were write-locked
//! (by serial), recorded only while the
//! checker tracks changes ([`crate::check::Tracker`]), so that a check after a
//! step looks at what the step could have changed. Model-only: Linux keeps
//! no such record (its nearest relative is soft-dirty tracking).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use crate::arch::Pfn;

/// The record: off until the checker turns it on.
#[derive(Default)]
pub(super) struct Changes {
    on: AtomicBool,
    /// The table last recorded (plus one; 0 for none): a zap or fork
    /// writes one table many times in a row, recorded once.
    last_table: AtomicU64,
    tables: Mutex<Vec<Pfn>>,
    /// Blocks (first frame, order) allocated or freed.
    blocks: Mutex<Vec<(Pfn, u32)>>,
    mms: Mutex<Vec<u64>>,
    /// A list reached [`LIMIT`]: the record stopped (a program that turned
    /// tracking on and never asks again keeps no growing record).
    overflowed: AtomicBool,
}

/// The most entries a list of the record holds.
const LIMIT: usize = 1 << 20;

/// What changed: tables written, blocks allocated or freed, MMs new or
/// write-locked (repeats possible).
#[derive(Default, Debug)]
pub struct Changed {
    pub tables: Vec<Pfn>,
    pub blocks: Vec<(Pfn, u32)>,
    pub mms: Vec<u64>,
    /// More changed than the record holds: only a full check will do.
    pub overflowed: bool,
}

impl Changes {
    pub(super) fn set_tracking(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    pub(super) fn table_written(&self, table: Pfn) {
        if self.on.load(Relaxed) && self.last_table.swap(table + 1, Relaxed) != table + 1 {
            self.note(&self.tables, table);
        }
    }

    pub(super) fn block(&self, pfn: Pfn, order: u32) {
        if self.on.load(Relaxed) {
            self.note(&self.blocks, (pfn, order));
        }
    }

    pub(super) fn mm(&self, serial: u64) {
        if self.on.load(Relaxed) {
            self.note(&self.mms, serial);
        }
    }

    /// Adds `v` to `list`, unless it holds [`LIMIT`] entries.
    fn note<T>(&self, list: &Mutex<Vec<T>>, v: T) {
        let mut list = list.lock().unwrap();
        match list.len() < LIMIT {
            true => list.push(v),
            false => self.overflowed.store(true, Relaxed),
        }
    }

    pub(super) fn take(&self) -> Changed {
        self.last_table.store(0, Relaxed);
        let overflowed = self.overflowed.swap(false, Relaxed);
        Changed { tables: take(&self.tables), blocks: take(&self.blocks), mms: take(&self.mms), overflowed }
    }
}

fn take<T>(list: &Mutex<Vec<T>>) -> Vec<T> {
    std::mem::take(&mut *list.lock().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past its limit the record stops and says so once, then starts over.
    #[test]
    fn a_record_past_its_limit_overflows() {
        let c = Changes::default();
        c.set_tracking(true);
        (0..=LIMIT as u64).for_each(|i| c.mm(i));
        let taken = c.take();
        assert!(taken.overflowed && taken.mms.len() == LIMIT);
        c.mm(7);
        let again = c.take();
        assert!(!again.overflowed && again.mms == [7]);
    }
}
