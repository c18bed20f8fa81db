//! The bytes of frames: reads, writes, fills and copies that keep each
//! frame in the cheapest class that holds it ([`super::content`]).
//!
//! A sparse frame changes class by a compare-and-swap of its state word, so
//! concurrent writers to it are serialised as on hardware. A write that no
//! sparse class holds materializes the frame: its state goes busy, its bytes
//! are written into the arena, and it turns full; from then on accesses are
//! atomic words of the arena, lock-free. A full frame turns sparse again
//! only when its owner resets it (allocation with `__GFP_ZERO`, freeing with
//! poisoning or `init_on_free`, a copy into it), never under a reader.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::content::{Content, Sparse, BUSY, FULL};
use super::{MigrateType, PhysMem};
use crate::arch::{Pfn, PAGE_SIZE, WORDS_PER_PAGE};
use crate::Errno;

/// A frame's class as one load saw it.
enum Class {
    Sparse(u64, Sparse),
    Full,
}

impl PhysMem {
    /// Allocates one zeroed frame whose bytes are in the arena from the
    /// start, for [`PhysMem::word`]: a page table, whose entries are read
    /// and written as atomic words with no class to check.
    pub fn alloc_words(&self, kind: MigrateType) -> Result<Pfn, Errno> {
        let pfn = self.alloc_pages_zeroed_as(0, kind)?;
        self.materialize(pfn);
        Ok(pfn)
    }

    /// Word `idx` (0..512) of frame `pfn`, which came from
    /// [`PhysMem::alloc_words`]: a page-table entry.
    pub fn word(&self, pfn: Pfn, idx: usize) -> &AtomicU64 {
        debug_assert!(idx < WORDS_PER_PAGE);
        debug_assert!(matches!(self.class(pfn), Class::Full), "frame {pfn:#x} is not in the arena");
        self.at(pfn, idx)
    }

    /// Word `idx` of frame `pfn` in the arena, whatever the frame's class.
    fn at(&self, pfn: Pfn, idx: usize) -> &AtomicU64 {
        self.arena.word(pfn as usize * WORDS_PER_PAGE + idx)
    }

    /// The class of `pfn` once no one is materializing it.
    fn class(&self, pfn: Pfn) -> Class {
        loop {
            match self.arena.state(pfn as usize).load(Acquire) {
                FULL => return Class::Full,
                BUSY => std::thread::yield_now(),
                s => return Class::Sparse(s, Sparse::decode(s).expect("a state word is sparse, full or busy")),
            }
        }
    }

    /// Writes frame `pfn`'s bytes into the arena, unless they are there.
    fn materialize(&self, pfn: Pfn) {
        let state = self.arena.state(pfn as usize);
        while let Class::Sparse(s, sparse) = self.class(pfn) {
            if state.compare_exchange(s, BUSY, Acquire, Relaxed).is_err() {
                continue;
            }
            let (base, few) = sparse.parts();
            self.arena.fill_frames(pfn as usize, 1, base);
            for &(off, b) in few {
                self.write_word_byte(pfn, off as usize, b);
            }
            state.store(FULL, Release);
        }
    }

    /// Applies `change` to frame `pfn` while it is sparse; false if the
    /// frame is full, the change does not fit its class, or the memory is
    /// dense (nothing done).
    fn change_sparse(&self, pfn: Pfn, change: impl Fn(&mut Sparse) -> bool) -> bool {
        if self.dense {
            return false;
        }
        let state = self.arena.state(pfn as usize);
        loop {
            let Class::Sparse(s, mut sparse) = self.class(pfn) else { return false };
            if !change(&mut sparse) {
                return false;
            }
            if state.compare_exchange(s, sparse.encode(), Release, Relaxed).is_ok() {
                return true;
            }
        }
    }

    /// Makes every byte of the `nr` frames from `pfn` `val`; the caller
    /// owns them (just allocated or being freed). Dense memory writes the
    /// bytes, with one bulk store.
    pub(super) fn reset_frames(&self, pfn: Pfn, nr: u64, val: u8) {
        let states = pfn as usize..(pfn + nr) as usize;
        if self.dense {
            states.clone().for_each(|f| self.arena.state(f).store(BUSY, Relaxed));
            self.arena.fill_frames(pfn as usize, nr as usize, val);
            states.for_each(|f| self.arena.state(f).store(FULL, Release));
        } else {
            let uniform = Sparse::uniform(val).encode();
            states.for_each(|f| self.arena.state(f).store(uniform, Release));
        }
    }

    /// Zeroes `nr` frames from `pfn` (`folio_zero_user`); the caller owns
    /// them. On simulated CPUs each frame costs the profile's zeroing.
    pub fn clear_frames(&self, pfn: Pfn, nr: u64) {
        (0..nr).for_each(|_| crate::sync::sim::work(crate::sync::sim::Work::ZeroPage));
        self.reset_frames(pfn, nr, 0);
    }

    /// Copies frame `src` to frame `dst` (`copy_user_highpage`); the caller
    /// owns `dst`. A sparse source costs one word.
    pub fn copy_frame(&self, dst: Pfn, src: Pfn) {
        if self.dense {
            self.materialize(src);
        }
        match self.class(src) {
            Class::Sparse(s, _) => self.arena.state(dst as usize).store(s, Release),
            Class::Full => {
                self.arena.state(dst as usize).store(BUSY, Relaxed);
                for i in 0..WORDS_PER_PAGE {
                    self.at(dst, i).store(self.at(src, i).load(Relaxed), Relaxed);
                }
                self.arena.state(dst as usize).store(FULL, Release);
            }
        }
    }

    /// What frame `pfn` holds, as sparse as it can be (zram's same-filled
    /// pages go further only in allowing a repeated word).
    pub fn content(&self, pfn: Pfn) -> Content {
        match self.class(pfn) {
            Class::Sparse(_, sparse) => Content::Sparse(sparse),
            Class::Full => {
                let mut buf = vec![0; PAGE_SIZE as usize].into_boxed_slice();
                self.read_bytes(pfn, 0, &mut buf);
                Content::of_bytes(buf)
            }
        }
    }

    /// Makes frame `pfn` hold `content`; the caller owns the frame.
    pub fn set_content(&self, pfn: Pfn, content: &Content) {
        match content {
            Content::Sparse(s) if self.dense => {
                let (base, few) = s.parts();
                self.reset_frames(pfn, 1, base);
                few.iter().for_each(|&(off, b)| self.write_byte(pfn, off as usize, b));
            }
            Content::Sparse(s) => self.arena.state(pfn as usize).store(s.encode(), Release),
            Content::Full(bytes) => self.write_bytes(pfn, 0, bytes),
        }
    }

    /// Reads byte `off` (0..4096) of frame `pfn`.
    pub fn read_byte(&self, pfn: Pfn, off: usize) -> u8 {
        match self.class(pfn) {
            Class::Sparse(_, sparse) => sparse.byte(off),
            Class::Full => (self.at(pfn, off / 8).load(Relaxed) >> ((off % 8) * 8)) as u8,
        }
    }

    /// Reads `buf.len()` bytes from frame `pfn` starting at `off`; whole
    /// aligned words are loaded at once.
    pub fn read_bytes(&self, pfn: Pfn, off: usize, buf: &mut [u8]) {
        if let Class::Sparse(_, sparse) = self.class(pfn) {
            let (base, few) = sparse.parts();
            buf.fill(base);
            let range = off..off + buf.len();
            for &(o, b) in few.iter().filter(|&&(o, _)| range.contains(&(o as usize))) {
                buf[o as usize - off] = b;
            }
            return;
        }
        let mut i = 0;
        while i < buf.len() {
            let pos = off + i;
            if pos.is_multiple_of(8) && buf.len() - i >= 8 {
                let v = self.at(pfn, pos / 8).load(Relaxed);
                buf[i..i + 8].copy_from_slice(&v.to_le_bytes());
                i += 8;
            } else {
                buf[i] = (self.at(pfn, pos / 8).load(Relaxed) >> ((pos % 8) * 8)) as u8;
                i += 1;
            }
        }
    }

    /// Writes `data` into frame `pfn` at `off`; on a full frame whole
    /// aligned words are stored at once, partial words with an atomic
    /// read-modify-write.
    pub fn write_bytes(&self, pfn: Pfn, off: usize, data: &[u8]) {
        if self.change_sparse(pfn, |s| s.write(off, data)) {
            return;
        }
        self.materialize(pfn);
        let mut i = 0;
        while i < data.len() {
            let pos = off + i;
            if pos.is_multiple_of(8) && data.len() - i >= 8 {
                let v = u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
                self.at(pfn, pos / 8).store(v, Relaxed);
                i += 8;
            } else {
                self.write_word_byte(pfn, pos, data[i]);
                i += 1;
            }
        }
    }

    /// Writes one byte of frame `pfn`.
    pub fn write_byte(&self, pfn: Pfn, off: usize, val: u8) {
        if !self.change_sparse(pfn, |s| s.set(off, val)) {
            self.materialize(pfn);
            self.write_word_byte(pfn, off, val);
        }
    }

    /// Writes one byte into the arena word that holds it, with an atomic
    /// read-modify-write (the frame is full or being materialized).
    fn write_word_byte(&self, pfn: Pfn, off: usize, val: u8) {
        let shift = (off % 8) * 8;
        let word = self.at(pfn, off / 8);
        let mut cur = word.load(Relaxed);
        loop {
            let new = (cur & !(0xffu64 << shift)) | ((val as u64) << shift);
            match word.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(x) => cur = x,
            }
        }
    }

    /// Fills `len` bytes of frame `pfn` from `off` with `val` (`memset`).
    pub fn fill(&self, pfn: Pfn, off: usize, len: usize, val: u8) {
        if self.change_sparse(pfn, |s| s.fill(off, len, val)) {
            return;
        }
        self.materialize(pfn);
        let pattern = u64::from_le_bytes([val; 8]);
        let mut pos = off;
        let end = off + len;
        while pos < end {
            if pos.is_multiple_of(8) && end - pos >= 8 {
                self.at(pfn, pos / 8).store(pattern, Relaxed);
                pos += 8;
            } else {
                self.write_word_byte(pfn, pos, val);
                pos += 1;
            }
        }
    }
}

#[cfg(all(test, not(any(loom, shuttle))))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const PAGE: usize = PAGE_SIZE as usize;

    /// One access to two frames, 0 and 1.
    #[derive(Clone, Debug)]
    enum Access {
        Write { frame: u64, off: usize, data: Vec<u8> },
        Fill { frame: u64, off: usize, len: usize, val: u8 },
        Byte { frame: u64, off: usize, val: u8 },
        Word { frame: u64, idx: usize, val: u64 },
        Copy { dst: u64 },
        Swap { frame: u64 },
        Reset { frame: u64, val: u8 },
    }

    fn access() -> impl Strategy<Value = Access> {
        let frame = 0..2u64;
        // Small values, so that many writes repeat the base byte.
        let data = proptest::collection::vec(0..3u8, 1..12);
        prop_oneof![
            (frame.clone(), 0..PAGE - 12, data).prop_map(|(frame, off, data)| Access::Write { frame, off, data }),
            (frame.clone(), 0..PAGE, 0..3u8, any::<bool>()).prop_map(|(frame, off, val, whole)| {
                let (off, len) = if whole { (0, PAGE) } else { (off, (PAGE - off).min(3)) };
                Access::Fill { frame, off, len, val }
            }),
            (frame.clone(), 0..PAGE, 0..3u8).prop_map(|(frame, off, val)| Access::Byte { frame, off, val }),
            (frame.clone(), 0..WORDS_PER_PAGE, any::<u64>()).prop_map(|(frame, idx, val)| Access::Word {
                frame,
                idx,
                val
            }),
            (0..2u64).prop_map(|dst| Access::Copy { dst }),
            frame.clone().prop_map(|frame| Access::Swap { frame }),
            (frame, 0..3u8).prop_map(|(frame, val)| Access::Reset { frame, val }),
        ]
    }

    proptest! {
        /// Every access path keeps each frame's bytes what plain 4 KiB
        /// buffers would hold, whichever class the frame is in.
        #[test]
        fn every_class_holds_what_plain_bytes_hold(
            accesses in proptest::collection::vec(access(), 1..40),
            dense in any::<bool>(),
        ) {
            let phys = PhysMem::new(4 << 20, false).unwrap().with_dense(dense);
            let mut plain = [vec![0u8; PAGE], vec![0u8; PAGE]];
            let mut written = [false; 2];
            for a in accesses {
                match a {
                    Access::Copy { dst: frame } | Access::Write { frame, .. } | Access::Fill { frame, .. }
                    | Access::Byte { frame, .. } | Access::Word { frame, .. } | Access::Swap { frame }
                    | Access::Reset { frame, .. } => written[frame as usize] = true,
                }
                match a {
                    Access::Write { frame, off, data } => {
                        phys.write_bytes(frame, off, &data);
                        plain[frame as usize][off..off + data.len()].copy_from_slice(&data);
                    }
                    Access::Fill { frame, off, len, val } => {
                        phys.fill(frame, off, len, val);
                        plain[frame as usize][off..off + len].fill(val);
                    }
                    Access::Byte { frame, off, val } => {
                        phys.write_byte(frame, off, val);
                        plain[frame as usize][off] = val;
                    }
                    Access::Word { frame, idx, val } => {
                        phys.materialize(frame);
                        phys.word(frame, idx).store(val, Relaxed);
                        plain[frame as usize][idx * 8..idx * 8 + 8].copy_from_slice(&val.to_le_bytes());
                    }
                    Access::Copy { dst } => {
                        phys.copy_frame(dst, 1 - dst);
                        plain[dst as usize] = plain[1 - dst as usize].clone();
                    }
                    Access::Swap { frame } => {
                        let content = phys.content(frame);
                        phys.reset_frames(frame, 1, 0xee);
                        phys.set_content(frame, &content);
                    }
                    Access::Reset { frame, val } => {
                        phys.reset_frames(frame, 1, val);
                        plain[frame as usize].fill(val);
                    }
                }
                for (frame, want) in plain.iter().enumerate() {
                    let mut got = vec![0u8; PAGE];
                    phys.read_bytes(frame as u64, 0, &mut got);
                    prop_assert!(got == *want, "frame {} differs from plain bytes", frame);
                    prop_assert_eq!(phys.read_byte(frame as u64, 4095), want[4095]);
                    let full = matches!(phys.class(frame as u64), Class::Full);
                    prop_assert!(!dense || !written[frame] || full, "dense memory left frame {} sparse", frame);
                }
            }
        }
    }

    /// Threads writing different bytes of one frame at once lose none of
    /// them, while the frame goes from zero through a few bytes to full.
    #[test]
    fn concurrent_writers_lose_no_byte() {
        let phys = PhysMem::new(4 << 20, false).unwrap();
        for round in 0..200u64 {
            let pfn = round % 16;
            phys.reset_frames(pfn, 1, 0);
            std::thread::scope(|s| {
                for t in 0..4usize {
                    let phys = &phys;
                    s.spawn(move || (0..8).for_each(|i| phys.write_byte(pfn, t * 512 + i * 3, 1 + t as u8)));
                }
            });
            for t in 0..4usize {
                for i in 0..8 {
                    assert_eq!(phys.read_byte(pfn, t * 512 + i * 3), 1 + t as u8, "round {round}: thread {t} byte {i}");
                }
            }
        }
    }

    /// A frame written a byte per page costs no arena word: it stays in
    /// its state word; a page table is materialized on first access.
    #[test]
    fn a_few_bytes_stay_out_of_the_arena() {
        let phys = PhysMem::new(4 << 20, false).unwrap();
        let data = phys.alloc_pages_zeroed(0).unwrap();
        phys.write_byte(data, 100, 7);
        assert!(matches!(phys.class(data), Class::Sparse(..)));
        let table = phys.alloc_words(MigrateType::Unmovable).unwrap();
        assert!(matches!(phys.class(table), Class::Full), "a page table is in the arena from the start");
        assert_eq!(phys.word(table, 5).load(Relaxed), 0);
        phys.write_bytes(data, 0, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(matches!(phys.class(data), Class::Full), "nine bytes set do not fit the sparse class");
        assert_eq!(phys.read_byte(data, 100), 7, "materializing kept the earlier byte");
    }
}
