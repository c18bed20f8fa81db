//! The private work a simulated CPU declares, at the profile's costs.

use super::with_me;

/// Private work the model declares: a fault's, a page's zeroing, a
/// system call's, a fork's, the locked RMWs of a mapcount update, a
/// computation of an MM's rmap sub-IDs, steps of a page-table walk, the
/// body of a hugetlb fault, and folios moved on or off an LRU list.
#[derive(Clone, Copy, Debug)]
pub enum Work {
    Fault,
    ZeroPage,
    Syscall,
    Fork,
    Atomics(u64),
    SubIds,
    PtSteps(u64),
    HugetlbFault,
    LruFolios(u64),
}

/// Charges this CPU for `w` (nothing outside a simulation).
pub fn work(w: Work) {
    with_me(|sim, me| {
        sim.advance(me, |_, p| match w {
            Work::Fault => p.fault,
            Work::ZeroPage => p.zero_page,
            Work::Syscall => p.syscall,
            Work::Fork => p.fork,
            Work::Atomics(n) => n * p.atomic,
            Work::SubIds => p.subid_calc,
            Work::PtSteps(n) => n * p.pt_step,
            Work::HugetlbFault => p.hugetlb_fault,
            Work::LruFolios(n) => n * p.lru_folio,
        })
    });
}

/// Whether this simulated CPU's atomic RMWs cost no more than plain
/// stores (its profile's `atomic` is 0); false outside a simulation,
/// where the host's CPU is not known.
pub fn atomics_are_cheap() -> bool {
    let mut cheap = false;
    with_me(|sim, _| cheap = sim.profile.atomic == 0);
    cheap
}
