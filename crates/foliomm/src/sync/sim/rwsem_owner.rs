//! A rwsem's owner (`sem->owner`) and its writers' optimistic spinning
//! (`rwsem_optimistic_spin`, kernel/locking/rwsem.c) on simulated CPUs,
//! and a `struct mutex`'s owner (`lock->owner`), on whom its waiters spin
//! only while it runs (`mutex_can_spin_on_owner`, kernel/locking/mutex.c):
//! a waiter that finds the owner asleep, or whose owner goes to sleep,
//! sleeps too and is woken a wake-up after the release.
//!
//! A writer that finds the rwsem taken spins before it sleeps, if the
//! owner is not marked non-spinnable and, when a writer owns it, that
//! writer runs (`rwsem_can_spin_on_owner`). It spins while a writer owner
//! runs, and at most (10 + readers/2) µs while readers own it; readers
//! that outlast that mark the rwsem non-spinnable (`RWSEM_NONSPINNABLE`)
//! until a writer takes it or a release that frees it finds waiters.
//! Spinners queue (`sem->osq`); a release wakes the first a spin round
//! later, and it takes the free lock past the sleeping waiters, whom the
//! release wakes a wake-up later, unless the first of them has the
//! handoff (`rwsem_try_write_lock_unqueued`).
//!
//! Differs from Linux: a spinner that finds the rwsem free but cannot take
//! it (a handoff) sleeps at once, where Linux's spins on until the handoff
//! waiter owns it; a sleeping waiter with the handoff does not spin; the
//! spinners' reads of the owner and count words move no lines; readers
//! never spin (nor do Linux's since 5.12).

use std::collections::HashMap;

use super::{with_me, Sim, State, Wait};

/// Set in a rwsem's key: the key of its spinners' queue (no lock word is
/// at such an address).
pub(super) const OSQ: usize = 1 << 63;

/// `sem->owner` as spinning reads it: the writer's CPU, or the readers
/// holding it, and `RWSEM_NONSPINNABLE`.
#[derive(Clone, Copy, Debug, Default)]
struct Owner {
    writer: Option<usize>,
    readers: u32,
    nonspinnable: bool,
}

/// The owners of the rwsems held now (or marked non-spinnable), by key.
#[derive(Debug, Default)]
pub(super) struct Owners(HashMap<usize, Owner>);

impl Owners {
    /// The rwsems at the keys in `lines` (line numbers) were freed.
    pub(super) fn forget(&mut self, lines: std::ops::RangeInclusive<usize>) {
        self.0.retain(|k, _| !lines.contains(&(k >> 6)));
    }
}

/// Whether CPU `cpu` is on its CPU (`owner_on_cpu`): not done, and
/// running or spinning.
fn on_cpu(st: &State, cpu: usize) -> bool {
    let c = &st.cpus[cpu];
    !c.done && (!c.asleep || c.spinning)
}

/// This CPU took the rwsem at `key`, to write if `writer`
/// (`rwsem_set_owner`, which clears `RWSEM_NONSPINNABLE`, or
/// `rwsem_set_reader_owned`, which keeps it). Nothing outside a simulation.
pub(crate) fn rwsem_taken(key: usize, writer: bool) {
    if !super::active() {
        return;
    }
    with_me(|sim, me| {
        let mut st = sim.lock();
        let o = st.owners.0.entry(key).or_default();
        match writer {
            true => *o = Owner { writer: Some(me), readers: 0, nonspinnable: false },
            false => {
                o.writer = None;
                o.readers += 1;
            }
        }
    });
}

/// This CPU let go of the rwsem at `key` (`up_read`, `up_write`): if that
/// freed it, wakes the first sleeping waiter (or the queued readers) and
/// the first spinner, and with waiters clears `RWSEM_NONSPINNABLE`. A
/// release the simulation did not see taken counts as freeing it.
pub(crate) fn rwsem_released(key: usize) {
    if !super::active() {
        return;
    }
    with_me(|sim, me| {
        let mut st = sim.lock();
        let waiters = st.waits.first(key).is_some();
        let freed = match st.owners.0.get_mut(&key) {
            Some(o) if o.writer.is_none() && o.readers > 1 => {
                o.readers -= 1;
                false
            }
            Some(o) if o.writer.is_none() && o.nonspinnable && !waiters => {
                o.readers = 0;
                true
            }
            _ => {
                st.owners.0.remove(&key);
                true
            }
        };
        drop(st);
        if freed {
            sim.wake(me, key);
            sim.wake(me, key | OSQ);
        }
    });
}

/// This CPU turned its write hold of the rwsem at `key` into a read hold
/// (`downgrade_write`): readers first in its queue are woken
/// (`rwsem_downgrade_wake`), a writer first in line is not. The first
/// spinner is woken a spin round later, to find readers owning it and
/// spin on them at most the readers' threshold (`rwsem_spin_on_owner`
/// returns when the owner stops being a writer). Nothing outside a
/// simulation.
#[cfg_attr(any(loom, shuttle), allow(dead_code))] // the facade's rwsem is loom's or shuttle's there
pub(crate) fn rwsem_downgraded(key: usize) {
    if !super::active() {
        return;
    }
    with_me(|sim, me| {
        let mut st = sim.lock();
        st.owners.0.insert(key, Owner { writer: None, readers: 1, nonspinnable: false });
        let reader_first = st.waits.first(key).is_some_and(|w| !w.writer);
        drop(st);
        if reader_first {
            sim.wake(me, key);
        }
        sim.wake(me, key | OSQ);
    });
}

/// CPU `me` goes to sleep: the spinners of the rwsems it holds to write
/// stop spinning at `at` (`rwsem_spin_on_owner` sees it off its CPU), and
/// those of the mutexes it holds sleep on (`mutex_spin_on_owner`).
pub(super) fn owner_sleeps(st: &mut State, me: usize, at: u64) {
    let held: Vec<usize> = st.owners.0.iter().filter(|(_, o)| o.writer == Some(me)).map(|(&k, _)| k).collect();
    for key in held {
        for w in st.waits.take_all(key | OSQ) {
            st.resume(w.cpu, at);
        }
        st.waits.stop_spinning(key);
    }
}

/// This CPU took the `struct mutex` at `key` (`__mutex_set_owner`).
/// Nothing outside a simulation.
#[cfg_attr(any(loom, shuttle), allow(dead_code))] // the facade's mutex is loom's or shuttle's there
pub(crate) fn mutex_taken(key: usize) {
    if !super::active() {
        return;
    }
    with_me(|sim, me| {
        sim.lock().owners.0.insert(key, Owner { writer: Some(me), ..Owner::default() });
    });
}

/// This CPU let go of the `struct mutex` at `key`. Nothing outside a
/// simulation.
#[cfg_attr(any(loom, shuttle), allow(dead_code))] // the facade's mutex is loom's or shuttle's there
pub(crate) fn mutex_released(key: usize) {
    if !super::active() {
        return;
    }
    with_me(|sim, _| {
        sim.lock().owners.0.remove(&key);
    });
}

/// Waits for the `struct mutex` at `key`, queued (at the head if
/// `front`), until a release lets it try: spinning while its owner runs
/// (`mutex_optimistic_spin`), asleep if the owner is off its CPU (the
/// slow path's `schedule`). Must follow the failed try with no event
/// between, as [`super::sleep`].
#[cfg_attr(any(loom, shuttle), allow(dead_code))] // the facade's mutex is loom's or shuttle's there
pub(crate) fn mutex_wait(key: usize, front: bool) {
    with_me(|sim, me| {
        let st = sim.lock();
        let spinning = st.owners.0.get(&key).and_then(|o| o.writer).is_none_or(|cpu| on_cpu(&st, cpu));
        drop(st);
        sim.sleep(me, key, Wait { writer: true, front, spinning, deadline: None });
    });
}

/// `rwsem_optimistic_spin` for the rwsem at `key`: if this CPU may spin
/// on its owner (`rwsem_can_spin_on_owner`), tries `try_lock` now and
/// each time the owner changes, unless the first sleeping waiter has the
/// handoff; returns what it took, or None if spinning ended first (and
/// always outside a simulation, or while a failed one unwinds).
pub(crate) fn optimistic_spin<T>(key: usize, mut try_lock: impl FnMut() -> Option<T>) -> Option<T> {
    if !super::active() {
        return None;
    }
    let mut spin = Spin::start(key)?;
    loop {
        if !super::handoff(key) {
            if let Some(t) = try_lock() {
                return Some(t);
            }
        }
        if !spin.wait() {
            return None;
        }
    }
}

/// One writer spinning on a rwsem: its key, whether it queued on the
/// spinners' queue yet, and when the readers' spin threshold ends.
struct Spin {
    key: usize,
    queued: bool,
    readers_until: Option<u64>,
}

impl Spin {
    /// `rwsem_can_spin_on_owner`: Some unless the owner is marked
    /// non-spinnable or is a writer off its CPU.
    fn start(key: usize) -> Option<Spin> {
        let mut may = false;
        with_me(|sim, _| {
            let st = sim.lock();
            let o = st.owners.0.get(&key).copied().unwrap_or_default();
            may = !o.nonspinnable && o.writer.is_none_or(|w| on_cpu(&st, w));
        });
        may.then_some(Spin { key, queued: false, readers_until: None })
    }

    /// Waits for the owner to change (`rwsem_spin_on_owner`); false if
    /// spinning ends instead.
    fn wait(&mut self) -> bool {
        let mut again = false;
        with_me(|sim, me| again = sim.spin_on_owner(me, self));
        again
    }
}

impl Drop for Spin {
    /// `osq_unlock`: it leaves the spinners' queue.
    fn drop(&mut self) {
        if !super::active() {
            return;
        }
        with_me(|sim, me| sim.lock().waits.acquired(self.key | OSQ, me));
    }
}

impl Sim {
    /// One wait of CPU `me`'s spin: true once it should try again (the
    /// owner let go or changed, a writer owner went to sleep, or the
    /// readers' threshold passed); false if it must stop: the rwsem is
    /// marked non-spinnable, its writer is off its CPU, it is free (a
    /// handoff kept it), or readers held it past the threshold (which
    /// marks it non-spinnable and stops the other spinners).
    fn spin_on_owner(&self, me: usize, spin: &mut Spin) -> bool {
        let mut st = self.lock();
        let key = spin.key;
        let o = st.owners.0.get(&key).copied().unwrap_or_default();
        let now = st.cpus[me].report.clock;
        let deadline = match o {
            Owner { nonspinnable: true, .. } | Owner { writer: None, readers: 0, .. } => return false,
            Owner { writer: Some(w), .. } => {
                spin.readers_until = None;
                if !on_cpu(&st, w) {
                    return false;
                }
                None
            }
            Owner { readers, .. } => {
                // `rwsem_rspin_threshold`: (20 + readers) / 2 µs, readers at most 30.
                let threshold = (20 + u64::from(readers.min(30))) * 500_000;
                let until = *spin.readers_until.get_or_insert(now + threshold);
                if now >= until {
                    st.owners.0.entry(key).or_default().nonspinnable = true;
                    for w in st.waits.take_all(key | OSQ) {
                        st.resume(w.cpu, now + self.profile.spin);
                    }
                    return false;
                }
                Some(until)
            }
        };
        drop(st);
        let front = std::mem::replace(&mut spin.queued, true);
        self.sleep(me, key | OSQ, Wait { writer: true, front, spinning: true, deadline });
        true
    }
}
