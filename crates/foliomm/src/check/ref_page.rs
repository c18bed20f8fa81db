//! One page of the reference model's bytes, stored by what it holds: a page
//! whose bytes are all one value costs no allocation, one with a few bytes
//! set costs those bytes, and any other page is a 4 KiB block shared by
//! every copy (a fork, a private copy of a file page) until one of them
//! writes it. Reads and writes see plain bytes whichever the class.

use std::sync::Arc;

use crate::arch::PAGE_SIZE;

const PS: usize = PAGE_SIZE as usize;

/// The most bytes a page keeps apart from its base value before it is
/// stored whole.
const FEW: usize = 16;

/// A page's bytes.
#[derive(Clone, Debug)]
pub(super) enum RefPage {
    /// Every byte is this value.
    Uniform(u8),
    /// Every byte is `base` but those listed (offset, value), sorted by
    /// offset, at most [`FEW`], none equal to `base`.
    Few { base: u8, set: Vec<(u16, u8)> },
    /// Any bytes, shared until written.
    Full(Arc<[u8; PS]>),
}

/// The version of a page `MADV_FREE` let go that reclaim dropped
/// (`super::ref_lazy`).
#[derive(Clone, Debug, Default)]
pub(super) struct Lazy {
    /// What the page reads if it was dropped: zeros, and every write since.
    pub(super) dropped: RefPage,
    /// Written since `MADV_FREE`: whichever version it is, it stays.
    pub(super) written: bool,
}

impl Default for RefPage {
    /// A page of zeros.
    fn default() -> RefPage {
        RefPage::Uniform(0)
    }
}

impl RefPage {
    /// Byte `off` (0..4096).
    pub(super) fn byte(&self, off: usize) -> u8 {
        match self {
            RefPage::Uniform(v) => *v,
            RefPage::Few { base, set } => {
                set.binary_search_by_key(&(off as u16), |&(o, _)| o).map_or(*base, |i| set[i].1)
            }
            RefPage::Full(b) => b[off],
        }
    }

    /// Copies the bytes from `off` into `out`.
    pub(super) fn read(&self, off: usize, out: &mut [u8]) {
        match self {
            RefPage::Full(b) => out.copy_from_slice(&b[off..off + out.len()]),
            RefPage::Uniform(v) => out.fill(*v),
            RefPage::Few { base, set } => {
                out.fill(*base);
                let end = off + out.len();
                for &(o, v) in set.iter().filter(|&&(o, _)| (off..end).contains(&(o as usize))) {
                    out[o as usize - off] = v;
                }
            }
        }
    }

    /// Writes `data` from byte `off`.
    pub(super) fn write(&mut self, off: usize, data: &[u8]) {
        if let [v, rest @ ..] = data {
            if off == 0 && data.len() == PS && rest.iter().all(|b| b == v) {
                return *self = RefPage::Uniform(*v);
            }
        }
        self.change(off, data.len(), |i| data[i]);
    }

    /// Sets `len` bytes from `off` to `val` (`memset`).
    pub(super) fn fill(&mut self, off: usize, len: usize, val: u8) {
        if off == 0 && len == PS {
            return *self = RefPage::Uniform(val);
        }
        self.change(off, len, |_| val);
    }

    /// Sets byte `off + i` to `value(i)` for `i` in `0..len`, keeping the
    /// cheapest class that holds the result.
    fn change(&mut self, off: usize, len: usize, value: impl Fn(usize) -> u8) {
        if let RefPage::Full(b) = self {
            let b = Arc::make_mut(b);
            (0..len).for_each(|i| b[off + i] = value(i));
            return;
        }
        let base = match self {
            RefPage::Uniform(v) | RefPage::Few { base: v, .. } => *v,
            RefPage::Full(_) => unreachable!("handled above"),
        };
        let mut set = match std::mem::take(self) {
            RefPage::Few { set, .. } => set,
            _ => Vec::new(),
        };
        for i in 0..len {
            let (at, v) = ((off + i) as u16, value(i));
            match (set.binary_search_by_key(&at, |&(o, _)| o), v == base) {
                (Ok(k), true) => drop(set.remove(k)),
                (Ok(k), false) => set[k].1 = v,
                (Err(_), true) => {}
                (Err(k), false) => set.insert(k, (at, v)),
            }
            if set.len() > FEW {
                let mut whole = Box::new([base; PS]);
                set.iter().for_each(|&(o, v)| whole[o as usize] = v);
                (i + 1..len).for_each(|j| whole[off + j] = value(j));
                return *self = RefPage::Full(Arc::from(whole));
            }
        }
        *self = match set.is_empty() {
            true => RefPage::Uniform(base),
            false => RefPage::Few { base, set },
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every class reads back what was written, as a plain array does.
    #[test]
    fn each_class_reads_as_plain_bytes() {
        let mut page = RefPage::default();
        let mut plain = [0u8; PS];
        let steps: [(usize, usize, u8); 6] =
            [(0, 1, 7), (4095, 1, 9), (100, 3, 0), (8, 8, 0x5a), (8, 8, 0), (1000, 40, 3)];
        for (k, &(off, len, val)) in steps.iter().enumerate() {
            match k % 2 {
                0 => page.fill(off, len, val),
                _ => page.write(off, &vec![val; len]),
            }
            plain[off..off + len].fill(val);
            let mut got = [0u8; PS];
            page.read(0, &mut got);
            assert!(got == plain, "after step {k} ({page:?})");
        }
        assert!(matches!(page, RefPage::Full(_)), "40 bytes set is too many to list");
        page.fill(0, PS, 1);
        assert!(matches!(page, RefPage::Uniform(1)));
    }

    /// A few bytes stay a list; writing back the base value empties it.
    #[test]
    fn a_page_keeps_the_cheapest_class() {
        let mut page = RefPage::default();
        page.write(12, &[1, 2]);
        assert!(matches!(&page, RefPage::Few { base: 0, set } if set == &[(12, 1), (13, 2)]));
        page.write(12, &[0, 0]);
        assert!(matches!(page, RefPage::Uniform(0)));
    }

    /// A copy shares a whole page until one of them writes it.
    #[test]
    fn a_copy_shares_a_full_page_until_written() {
        let mut a = RefPage::Full(Arc::new([4; PS]));
        let b = a.clone();
        assert!(matches!((&a, &b), (RefPage::Full(x), RefPage::Full(y)) if Arc::ptr_eq(x, y)));
        a.write(5, &[6]);
        assert_eq!((a.byte(5), b.byte(5)), (6, 4));
    }
}
