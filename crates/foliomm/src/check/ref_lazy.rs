//! `MADV_FREE` in the reference model. Reclaim may drop a lazily freed
//! anonymous page at any time until it is written again; a dropped page
//! reads zeros, and a write to it faults in a zeroed page. So such a page
//! has two versions, its own bytes and those of a dropped page, both
//! written alike, until a read tells which one the process has: one that
//! reads the dropped version (and not its own bytes) was dropped, for good;
//! one written since that reads its own bytes was kept, for good (a write
//! makes its entry dirty, so reclaim keeps it). The model cannot know when
//! reclaim ran, so it lets a read settle it ([`RefSpace::settle`]).

use super::ref_page::{Lazy, RefPage};
use super::reference::{pieces, RefSpace};
use crate::arch::PAGE_SIZE;

const PS: u64 = PAGE_SIZE;

impl RefSpace {
    /// `MADV_FREE` of `[start, start + len)`: each private anonymous page
    /// with bytes of its own may read zeros from now on. (Pages never
    /// written read zeros either way.)
    pub fn lazyfree(&mut self, start: u64, len: u64) {
        let first = start & !(PS - 1);
        let end = start.saturating_add(len).next_multiple_of(PS);
        for p in (first..end).step_by(PS as usize) {
            let anon = self.maps.get(&p).is_some_and(|m| m.file.is_none());
            if anon && self.data.contains_key(&p) {
                self.lazy.insert(p, Lazy::default());
            }
        }
    }

    /// Before a read of `[addr, addr + len)` that returned `got` (every
    /// byte, or the first byte of each page) is compared with this model:
    /// each lazily freed page in it takes the version the bytes read
    /// show, when only one of the two matches them (a page not written
    /// since that reads its own bytes may still be dropped later).
    pub fn settle(&mut self, addr: u64, len: u64, got: &[u8], every_byte: bool) {
        if self.lazy.is_empty() {
            return;
        }
        let pages: Vec<u64> = self.lazy.range(addr & !(PS - 1)..addr.saturating_add(len)).map(|(&p, _)| p).collect();
        for p in pages {
            let read: Vec<(usize, u8)> = match every_byte {
                true => pieces(addr, len)
                    .filter(|&(at, _, _)| at & !(PS - 1) == p)
                    .flat_map(|(at, pos, n)| (0..n).map(move |i| ((at % PS) as usize + i, pos + i)))
                    .filter_map(|(off, pos)| got.get(pos).map(|&b| (off, b)))
                    .collect(),
                false => got.get(((p - (addr & !(PS - 1))) / PS) as usize).map(|&b| vec![(0, b)]).unwrap_or_default(),
            };
            let matches = |page: &RefPage| read.iter().all(|&(off, b)| page.byte(off) == b);
            let (Some(own), Some(lazy)) = (self.data.get(&p), self.lazy.get(&p)) else { continue };
            match (matches(own), matches(&lazy.dropped), lazy.written) {
                (false, true, _) => {
                    let dropped = self.lazy.remove(&p).map(|l| l.dropped).unwrap_or_default();
                    self.data.insert(p, dropped);
                }
                (true, false, true) => drop(self.lazy.remove(&p)),
                _ => {}
            }
        }
    }
}
