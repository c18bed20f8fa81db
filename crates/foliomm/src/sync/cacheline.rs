//! Cache-line transfer accounting: which simulated CPU last wrote each cache
//! line the fault path shares, and how often a line moves from one simulated
//! CPU to another, grouped by the kernel structure it belongs to (as
//! `perf c2c` groups its HITM records). It lets a 2-core machine read the
//! scaling of a design at 16 or 56 CPUs from counts that do not depend on the
//! cores it runs on.
//!
//! The coherence model is MESI reduced to two states: a line is modified in
//! one CPU, or clean (shared by any number). An access by CPU `c` to a line
//! modified in another CPU is a transfer; a write leaves the line modified in
//! `c`, a read leaves it clean. Writes to a clean line are not transfers (the
//! invalidations they send move no data), so a line written by one CPU and
//! read by many costs one transfer per reader per write.
//!
//! A line is the 64-byte line the accessed word occupies in the model's own
//! memory, so words sharing a line in the model share its history; the model
//! mirrors the kernel's alignment where it matters ([`Aligned`] is
//! `____cacheline_aligned_in_smp`). Owner records live in a direct-mapped,
//! tagged table: a collision forgets a line's history (a transfer may go
//! uncounted), never invents one. Updates of a record are not atomic with one
//! another: two CPUs racing for a line may both count, or neither.
//!
//! Accounting is per OS thread and opt-in ([`account_as`]): each thread is one
//! simulated CPU, whatever core runs it. Threads that have not opted in pay
//! one thread-local load per accounted access.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::structure::N;
pub use super::structure::{Structure, Transfers};

/// A value alone in its cache line (`____cacheline_aligned_in_smp`).
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct Aligned<T>(pub T);

impl<T> Drop for Aligned<T> {
    fn drop(&mut self) {
        freed(self);
    }
}

impl<T> std::ops::Deref for Aligned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// `percpu_counter_batch` on a machine of up to 16 CPUs.
const PERCPU_BATCH: u32 = 32;
const TABLE_BITS: u32 = 20;
const LINE_SHIFT: u32 = 6;
/// Owner records: the line's tag (its number above the index bits, plus 1)
/// in the high half, the CPU that holds it modified (0: clean) in the low.
static OWNERS: [AtomicU64; 1 << TABLE_BITS] = [const { AtomicU64::new(0) }; 1 << TABLE_BITS];

thread_local! {
    static CPU: Cell<u32> = const { Cell::new(0) };
    static COUNTS: Cell<Transfers> = const { Cell::new(Transfers { accesses: [0; N], transfers: [0; N], waited: [0; N] }) };
    static PENDING: Cell<[u32; N]> = const { Cell::new([0; N]) };
}

/// Makes this OS thread simulated CPU `cpu` (1 or more) from now on, or
/// stops its accounting (0).
pub fn account_as(cpu: u32) {
    CPU.set(cpu);
}

/// The CPU this thread accounts as (0: none).
pub fn cpu() -> u32 {
    CPU.get()
}

/// Whether this thread's accesses are accounted (it runs as a simulated
/// CPU, or accounts as one).
#[inline]
pub fn accounting() -> bool {
    CPU.get() != 0 || super::sim::active()
}

/// Forgets every line's owner: all caches start cold (call it between
/// benchmark runs, while no thread accounts).
pub fn forget() {
    OWNERS.iter().for_each(|r| r.store(0, Relaxed));
}

/// This thread's counts since the last call, which resets them.
pub fn take() -> Transfers {
    COUNTS.take()
}

/// A write (or atomic read-modify-write) of `word`, a word of a line of `s`.
#[inline]
pub fn write<T>(s: Structure, word: &T) {
    access(s, word as *const T as usize, true);
}

/// A read of `word`, a word of a line of `s`.
#[inline]
pub fn read<T>(s: Structure, word: &T) {
    access(s, word as *const T as usize, false);
}

/// An access to the line of `addr`, a word of a line of `s` that the
/// model keeps elsewhere or not at all (a layout's place for it).
#[inline]
pub fn access_at(s: Structure, addr: usize, write: bool) {
    access(s, addr, write);
}

/// `obj` is being freed: on simulated CPUs its lines leave every cache,
/// so that the next object the allocator puts there starts cold wherever
/// it lands (and the costs do not depend on the allocator's reuse). The
/// kernel's slabs would hand it out warm in the freeing CPU's cache.
/// `obj` must be line-aligned (alone in its lines).
pub fn freed<T: ?Sized>(obj: &T) {
    // A smaller object may share a line with a live neighbour.
    debug_assert!(std::mem::align_of_val(obj) >= 64, "freed() takes line-aligned objects");
    if super::sim::active() {
        super::sim::forget(obj as *const T as *const () as usize, std::mem::size_of_val(obj));
    }
}

/// A lock's guard whose lock word is a word of a line of a structure:
/// taking the lock ([`Locked::take`]) and letting it go (the drop) are
/// each a write of that line, as `down_read` / `up_read`, `down_write` /
/// `up_write` and `mutex_lock` / `mutex_unlock` are each an atomic RMW of
/// the lock word. Differs from Linux: the release is accounted once the
/// lock is free, where Linux's RMW frees it when it completes (so the
/// hold is not lengthened by a line transfer the model's release would
/// otherwise wait for).
pub struct Locked<G> {
    s: Structure,
    word: usize,
    guard: Option<G>,
}

impl<G> Locked<G> {
    /// Accounts the write of `word` (the lock word, of a line of `s`), then
    /// takes the lock with `take`.
    pub fn take<T: ?Sized>(s: Structure, word: &T, take: impl FnOnce() -> G) -> Locked<G> {
        Self::try_take(s, word, || Some(take())).expect("take always takes")
    }

    /// As [`Locked::take`] for a trylock: None, with the write accounted
    /// (the failed attempt's RMW), if `try_take` did not take it.
    pub fn try_take<T: ?Sized>(s: Structure, word: &T, try_take: impl FnOnce() -> Option<G>) -> Option<Locked<G>> {
        let word = word as *const T as *const () as usize;
        access(s, word, true);
        Some(Locked { s, word, guard: Some(try_take()?) })
    }

    /// The same hold with its guard turned into another by `f` (a
    /// downgrade: an RMW of the lock word, accounted as a write).
    pub fn map<H>(mut self, f: impl FnOnce(G) -> H) -> Locked<H> {
        let guard = f(self.guard.take().expect("held until dropped"));
        access(self.s, self.word, true);
        let (s, word) = (self.s, self.word);
        std::mem::forget(self);
        Locked { s, word, guard: Some(guard) }
    }
}

impl<G: std::ops::Deref> std::ops::Deref for Locked<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        self.guard.as_ref().expect("held until dropped")
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Locked<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        self.guard.as_mut().expect("held until dropped")
    }
}

impl<G> Drop for Locked<G> {
    fn drop(&mut self) {
        drop(self.guard.take());
        access(self.s, self.word, true);
    }
}

/// An update by `amount` of a per-CPU counter whose shared count is `word`
/// (`percpu_counter_add_batch`): the shared line is written when this CPU's
/// pending amount reaches the batch. Differs from Linux: one pending amount
/// per structure and thread, not per counter, and its sign is ignored.
#[inline]
pub fn percpu_add<T>(s: Structure, word: &T, amount: i64) {
    if CPU.get() == 0 && !super::sim::active() {
        return;
    }
    let mut pending = PENDING.get();
    pending[s as usize] += amount.unsigned_abs().min(PERCPU_BATCH as u64) as u32;
    if pending[s as usize] >= PERCPU_BATCH {
        pending[s as usize] = 0;
        write(s, word);
    }
    PENDING.set(pending);
}

#[inline]
fn access(s: Structure, addr: usize, write: bool) {
    if super::sim::active() {
        return super::sim::access(s, addr, write);
    }
    let cpu = CPU.get();
    if cpu == 0 {
        return;
    }
    let line = addr >> LINE_SHIFT;
    let record = &OWNERS[line & ((1 << TABLE_BITS) - 1)];
    let tag = ((line >> TABLE_BITS) as u64 + 1) << 32;
    let old = record.load(Relaxed);
    let owner = if old & !0xffff_ffff == tag { old as u32 } else { 0 };
    let transfer = owner != 0 && owner != cpu;
    let new = match (write, transfer) {
        (true, _) => cpu,
        (false, true) => 0,
        (false, false) => owner,
    };
    if old != tag | new as u64 {
        record.store(tag | new as u64, Relaxed);
    }
    let mut c = COUNTS.get();
    c.accesses[s as usize] += 1;
    c.transfers[s as usize] += transfer as u64;
    COUNTS.set(c);
}

#[cfg(test)]
mod tests {
    use super::*;
    use Structure::*;

    /// Makes CPU 1 own `word`'s line and zeroes this thread's counts: the
    /// table may remember the line from an earlier test's stack.
    fn owned_by_cpu_1<T>(word: &T) {
        account_as(1);
        write(Folio, word);
        take();
    }

    #[test]
    fn ping_pong_of_writes_transfers_every_time() {
        let word = Aligned(0u64);
        owned_by_cpu_1(&word.0);
        for i in 0..10 {
            account_as(2 - i % 2);
            write(VmaLock, &word.0);
        }
        account_as(0);
        let t = take();
        assert_eq!((t.accesses_of(VmaLock), t.of(VmaLock)), (10, 10));
    }

    #[test]
    fn readers_share_a_clean_line_and_pay_once_per_write() {
        let word = Aligned(0u64);
        owned_by_cpu_1(&word.0);
        for cpu in [2, 3, 2, 3, 1] {
            account_as(cpu);
            read(MmLockSeq, &word.0);
        }
        account_as(0);
        // Only the first read finds the line modified elsewhere.
        assert_eq!(take().of(MmLockSeq), 1);
    }

    #[test]
    fn separate_lines_do_not_interfere_but_shared_ones_do() {
        let apart = [Aligned(0u32), Aligned(0u32)];
        let packed = Aligned([0u32, 0u32]);
        owned_by_cpu_1(&apart[0].0);
        owned_by_cpu_1(&packed.0);
        account_as(2);
        write(Ptl, &apart[1].0);
        take();
        for _ in 0..4 {
            for cpu in [1, 2] {
                account_as(cpu);
                write(Ptl, &apart[cpu as usize - 1].0);
                write(Folio, &packed.0[cpu as usize - 1]);
            }
        }
        account_as(0);
        let t = take();
        assert_eq!(t.of(Ptl), 0, "each CPU writes its own line");
        assert_eq!(t.of(Folio), 7, "false sharing: one line, two writers");
    }

    #[test]
    fn percpu_counters_touch_the_shared_line_once_per_batch() {
        let word = Aligned(0i64);
        take();
        for i in 0..(4 * PERCPU_BATCH) {
            account_as(1 + (i / PERCPU_BATCH) % 2);
            percpu_add(MmCounters, &word.0, 1);
        }
        account_as(0);
        assert_eq!(take().accesses_of(MmCounters), 4);
    }

    #[test]
    fn nothing_is_counted_without_opting_in() {
        let word = 0u64;
        account_as(0);
        take();
        write(ZoneLock, &word);
        assert_eq!(take(), Transfers::default());
    }
}
