//! What a frame holds, by class: one byte repeated ([`Sparse`] with no
//! exceptions: never written, zeroed, poisoned or filled), that byte with up
//! to two bytes set otherwise (a few bytes written), or fully materialized
//! bytes in the arena. A frame's class is one word of per-frame state, so a
//! frame that holds little costs 8 bytes of host memory instead of 4 KiB.
//!
//! Linux keeps every frame's 4 KiB; its nearest relatives are zram's
//! same-filled pages (a swapped-out page of one repeated word costs no
//! compressed storage) and the shared zero page. Model-only: the classes
//! change nothing a CPU, GUP, COW, swap or the checker can observe.

use crate::arch::PAGE_SIZE;

/// The most bytes a sparse frame holds apart from its base byte.
const MAX_FEW: usize = 2;

/// The tag in a state word's low bits.
const TAG_MASK: u64 = 0b11;
const TAG_SPARSE: u64 = 0;
/// The frame's bytes are in the arena.
pub(super) const FULL: u64 = 2;
/// One thread is writing the frame's bytes into the arena
/// ([`super::PhysMem`]'s materialize); everyone else waits.
pub(super) const BUSY: u64 = 3;

/// A frame of one base byte with up to two other bytes (offset, value),
/// kept sorted by offset and never equal to the base, so that equal
/// contents have equal states.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Sparse {
    base: u8,
    n: u8,
    few: [(u16, u8); MAX_FEW],
}

impl Sparse {
    /// Every byte `base`.
    pub const fn uniform(base: u8) -> Sparse {
        Sparse { base, n: 0, few: [(0, 0); MAX_FEW] }
    }

    /// The byte at `off`.
    pub fn byte(&self, off: usize) -> u8 {
        self.exceptions().iter().find(|&&(o, _)| o as usize == off).map_or(self.base, |&(_, b)| b)
    }

    /// The repeated byte and the bytes that differ from it.
    pub fn parts(&self) -> (u8, &[(u16, u8)]) {
        (self.base, self.exceptions())
    }

    fn exceptions(&self) -> &[(u16, u8)] {
        &self.few[..self.n as usize]
    }

    /// Sets the byte at `off`; false (and unchanged) if the frame would
    /// then hold more than this class can.
    pub fn set(&mut self, off: usize, val: u8) -> bool {
        let n = self.n as usize;
        let at = self.few[..n].partition_point(|&(o, _)| (o as usize) < off);
        let present = at < n && self.few[at].0 as usize == off;
        match (present, val == self.base) {
            (true, true) => {
                self.few.copy_within(at + 1..n, at);
                self.n -= 1;
            }
            (true, false) => self.few[at].1 = val,
            (false, true) => {}
            (false, false) if n == MAX_FEW => return false,
            (false, false) => {
                self.few.copy_within(at..n, at + 1);
                self.few[at] = (off as u16, val);
                self.n += 1;
            }
        }
        true
    }

    /// Writes `data` at `off`; false (and unchanged) if the result does not
    /// fit this class. A write of the whole frame with one byte repeated
    /// always fits.
    pub fn write(&mut self, off: usize, data: &[u8]) -> bool {
        if off == 0 && data.len() == PAGE_SIZE as usize && data.iter().all(|&b| b == data[0]) {
            *self = Sparse::uniform(data[0]);
            return true;
        }
        let mut next = *self;
        data.iter().enumerate().all(|(i, &b)| next.set(off + i, b)) && {
            *self = next;
            true
        }
    }

    /// Fills `len` bytes from `off` with `val`, as [`Sparse::write`].
    pub fn fill(&mut self, off: usize, len: usize, val: u8) -> bool {
        if off == 0 && len == PAGE_SIZE as usize {
            *self = Sparse::uniform(val);
            return true;
        }
        let mut next = *self;
        (off..off + len).all(|o| next.set(o, val)) && {
            *self = next;
            true
        }
    }

    /// The class that holds `bytes` (a whole frame), if one does: the base
    /// is the first byte.
    pub fn of_bytes(bytes: &[u8]) -> Option<Sparse> {
        let mut s = Sparse::uniform(bytes[0]);
        bytes.iter().enumerate().all(|(i, &b)| b == s.base || s.set(i, b)).then_some(s)
    }

    /// The state word: tag 0, count in bits 2..4, base in bits 8..16, then
    /// each exception's offset (12 bits) and byte in 24 bits.
    pub(super) fn encode(&self) -> u64 {
        let few = self.exceptions().iter().enumerate();
        let slots = few.fold(0, |acc, (k, &(o, b))| acc | (((o as u64) | (b as u64) << 12) << (16 + 24 * k)));
        TAG_SPARSE | (self.n as u64) << 2 | (self.base as u64) << 8 | slots
    }

    /// The sparse frame a state word names; None for a full or busy frame.
    pub(super) fn decode(state: u64) -> Option<Sparse> {
        if state & TAG_MASK != TAG_SPARSE {
            return None;
        }
        let mut s = Sparse::uniform((state >> 8) as u8);
        s.n = ((state >> 2) & 0b11) as u8;
        for k in 0..s.n as usize {
            let slot = state >> (16 + 24 * k);
            s.few[k] = ((slot & 0xfff) as u16, (slot >> 12) as u8);
        }
        Some(s)
    }
}

/// A frame's bytes taken out of the model ([`super::PhysMem::content`]): a
/// swap slot or a saved copy holds this.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub enum Content {
    Sparse(Sparse),
    Full(Box<[u8]>),
}

impl Content {
    /// The content of the whole frame `bytes`, as sparse as it can be.
    pub fn of_bytes(bytes: Box<[u8]>) -> Content {
        Sparse::of_bytes(&bytes).map_or(Content::Full(bytes), Content::Sparse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_of(s: &Sparse) -> Vec<u8> {
        (0..PAGE_SIZE as usize).map(|o| s.byte(o)).collect()
    }

    #[test]
    fn a_few_bytes_stay_sparse_and_round_trip_through_the_state_word() {
        let mut s = Sparse::uniform(0xaa);
        assert!(s.set(4095, 1) && s.set(7, 2));
        assert_eq!(s.parts(), (0xaa, &[(7, 2), (4095, 1)][..]), "exceptions sorted by offset");
        assert_eq!(Sparse::decode(s.encode()), Some(s));
        assert!(!s.set(8, 3), "a third byte does not fit");
        assert_eq!(Sparse::decode(s.encode()), Some(s), "a refused write changes nothing");
        assert!(s.set(7, 0xaa), "writing the base back removes the exception");
        assert_eq!(s.parts(), (0xaa, &[(4095, 1)][..]));
        assert!(Sparse::decode(FULL).is_none() && Sparse::decode(BUSY).is_none());
        assert_eq!(Sparse::decode(0), Some(Sparse::uniform(0)), "a zero state word is a zero frame");
    }

    #[test]
    fn writes_and_fills_agree_with_plain_bytes() {
        let mut s = Sparse::uniform(0);
        let mut plain = vec![0u8; PAGE_SIZE as usize];
        assert!(s.write(100, &[0, 9, 0]));
        plain[101] = 9;
        assert_eq!(bytes_of(&s), plain);
        assert!(!s.write(0, &[1, 2, 3]), "three new bytes do not fit");
        assert_eq!(bytes_of(&s), plain, "nothing of a refused write lands");
        assert!(s.fill(0, PAGE_SIZE as usize, 0x5a), "a whole-frame fill is uniform");
        assert_eq!(s, Sparse::uniform(0x5a));
        assert!(s.write(0, &[0x77; PAGE_SIZE as usize]));
        assert_eq!(s, Sparse::uniform(0x77));
        let mut mixed = vec![3u8; PAGE_SIZE as usize];
        mixed[10] = 4;
        assert_eq!(Content::of_bytes(mixed.clone().into_boxed_slice()), {
            let mut want = Sparse::uniform(3);
            want.set(10, 4);
            Content::Sparse(want)
        });
        mixed[11..14].copy_from_slice(&[5, 6, 7]);
        assert_eq!(Content::of_bytes(mixed.clone().into_boxed_slice()), Content::Full(mixed.into_boxed_slice()));
    }
}
