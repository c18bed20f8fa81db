//! A run's trace (`foliomm run --trace`): after every step that touches
//! mappings, what each live process's page tables map there and what the
//! folios' counters say, page by page (a few pages spread over each
//! touched range), looked at without side effects ([`Op::Peek`]); and every
//! such page of any other mapping, in any process, whose state the step
//! changed (a shmem PMD split zaps the other process's mapping of the
//! file too).
//!
//! [`Op::Peek`]: crate::op::Op::Peek

use foliomm::internals::mm::PageInfo;

use super::state::State;
use crate::backend::Thread;
use crate::lang::{Cmd, Place, Step};
use crate::op::{Op, Peek, Reply};

/// Pages looked at per touched range, spread from its first to its last.
const PAGES: u64 = 8;

/// One page of one process after a step.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TracePage {
    pub proc: String,
    /// The mapping's name and the page's offset in it.
    pub map: String,
    pub offset: u64,
    pub addr: u64,
    pub page: PageInfo,
    /// The byte at the page's first address.
    pub byte: u8,
    /// The mapcount design's raw fields of the page's large folio (MM-ID
    /// slots, `_large_mapcount`, ...), by Linux's names; empty where the
    /// backend cannot see them.
    pub fields: Vec<(String, i64)>,
}

impl State<'_> {
    /// The trace of `step`: for each live process, the pages of what it
    /// touched (a fork: every mapping), and the pages of `before` (every
    /// mapping's, taken by [`State::trace_all`] before the step) whose state
    /// changed, if the backend can look.
    pub(super) fn trace(&self, step: &Step, before: &[TracePage]) -> Vec<TracePage> {
        let places: Vec<Place> = match &step.cmd {
            Cmd::Fork(_) => self.maps.keys().map(|m| Place { map: m.clone(), range: None }).collect(),
            Cmd::Mmap { name, .. } | Cmd::Mremap { name, .. } => vec![Place { map: name.clone(), range: None }],
            Cmd::Munmap(p) | Cmd::Mprotect(p, _) | Cmd::Madvise(p, _) | Cmd::Mlock(p, _) | Cmd::Split(p, ..) => {
                vec![p.clone()]
            }
            Cmd::MovePages(m) => vec![m.place.clone()],
            Cmd::Mbind(m) => vec![m.place.clone()],
            Cmd::NumaScan(p) => vec![p.clone()],
            Cmd::Write { place, .. }
            | Cmd::Pattern { place, .. }
            | Cmd::Read { place, .. }
            | Cmd::Observe { place, .. }
            | Cmd::Pin { place, .. } => vec![place.clone()],
            _ => Vec::new(),
        };
        let mut out = self.peek_places(&places);
        for page in self.trace_all() {
            let same = |p: &TracePage| p.proc == page.proc && p.addr == page.addr;
            let changed = before.iter().find(|p| same(p)).is_none_or(|p| *p != page);
            if changed && !out.iter().any(same) && before.iter().any(same) {
                out.push(page);
            }
        }
        out
    }

    /// The sampled pages of every mapping in every live process, to tell
    /// afterwards what a step changed.
    pub(super) fn trace_all(&self) -> Vec<TracePage> {
        let mut names: Vec<&String> = self.maps.keys().collect();
        names.sort();
        self.peek_places(&names.into_iter().map(|m| Place { map: m.clone(), range: None }).collect::<Vec<_>>())
    }

    /// Up to [`PAGES`] pages spread over each of `places`, in each live
    /// process.
    fn peek_places(&self, places: &[Place]) -> Vec<TracePage> {
        let mut procs: Vec<&String> = self.live.iter().collect();
        procs.sort();
        let mut out = Vec::new();
        for place in places {
            let (Ok((start, len)), Some(&(base, _))) = (self.place(place), self.maps.get(&place.map)) else { continue };
            let pages = len.div_ceil(4096).max(1);
            let picks = (0..pages.min(PAGES)).map(|i| if pages <= PAGES { i } else { i * (pages - 1) / (PAGES - 1) });
            for i in picks {
                let addr = start + i * 4096;
                for p in &procs {
                    let peek = self.backend.perform(Thread::main(p), Op::Peek { addr }).and_then(Reply::peek);
                    if let Ok(Peek { page, byte, fields, .. }) = peek {
                        let (proc, map, offset) = (p.to_string(), place.map.clone(), addr - base);
                        out.push(TracePage { proc, map, offset, addr, page, byte, fields });
                    }
                }
            }
        }
        out
    }
}
