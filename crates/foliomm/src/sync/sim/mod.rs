//! Simulated CPUs with virtual time: a deterministic, machine-independent
//! way to run a threaded workload on 1 to 64 CPUs.
//!
//! Each workload thread is one simulated CPU with its own clock. Only one
//! runs at a time: the baton goes to the runnable CPU with the smallest
//! clock (ties broken by a seeded order), so the interleaving, the counts
//! and the simulated times depend on the seed alone, not on the host's
//! cores or its scheduler. A CPU's clock advances by the cost of what it
//! does ([`Profile`]): every access to a shared cache line
//! ([`crate::sync::cacheline`]'s hooks, through the [`coherence`] model),
//! every round of waiting for a lock (the facade's spin loops and its
//! locks' contended paths), and the private work the fault path declares
//! ([`work`]). A CPU waiting for a spinning lock spins in simulated time
//! until the holder, whose clock is then the smallest, runs and lets it
//! go; a CPU waiting for a sleeping lock ([`sleep`]) leaves the run queue
//! until the release wakes it ([`wake`], [`wait`]'s rules), and resumes
//! the profile's wake-up latency after the release. The time a CPU waits
//! is reported by the structure of the lock's line.
//!
//! Mechanism: OS threads passing a baton (`park`/`unpark`), chosen over a
//! custom shuttle scheduler (which would need the shuttle build of the
//! whole library) and coroutines (which would need `unsafe` stack
//! switching outside `phys`). A CPU keeps the baton while its clock is
//! within the profile's quantum of the next one's, which bounds the
//! hand-offs; with a quantum of 0 the order is exactly by clock.
//!
//! Differs from Linux: nothing preempts a CPU between its events, and a
//! CPU that sleeps is idle (no other task runs on it).

pub mod coherence;
pub mod profile;
mod rwsem_owner;
mod wait;
mod work;

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

pub use coherence::Outcome;
pub use profile::Profile;
#[cfg(not(any(loom, shuttle)))]
pub(crate) use rwsem_owner::rwsem_downgraded;
#[cfg_attr(any(loom, shuttle), allow(unused_imports))] // the facade's mutex is loom's or shuttle's there
pub(crate) use rwsem_owner::{mutex_released, mutex_taken, mutex_wait};
pub(crate) use rwsem_owner::{optimistic_spin, rwsem_released, rwsem_taken};
pub use work::{atomics_are_cheap, work, Work};

use super::structure::{Structure, Transfers, N};
use wait::{WaitLists, Waiter};

/// What one simulated CPU did: its clock at the end, its accesses and
/// transfers per structure, its invalidations, and the time it waited
/// for locks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuReport {
    /// Picoseconds.
    pub clock: u64,
    pub transfers: Transfers,
    pub invalidations: u64,
    /// Picoseconds spent waiting for locks (spinning or asleep); of which
    /// `transfers.waited` those in lines of each [`Structure`] (the rest:
    /// locks in lines no accounted access named).
    pub waited: u64,
    /// Picoseconds spent waiting for contended lines.
    pub queued: u64,
}

#[derive(Debug)]
struct Cpu {
    report: CpuReport,
    done: bool,
    /// Asleep on a wait list: not runnable until woken.
    asleep: bool,
    /// Whether that wait spins (the CPU stays on its CPU, as Linux's
    /// `owner_on_cpu` sees it).
    spinning: bool,
    /// When a timed wait ends if nothing wakes it first, and the key it
    /// waits on.
    deadline: Option<(u64, usize)>,
    /// When it last queued at a wait list's tail (picoseconds).
    queued_at: u64,
    thread: Option<Thread>,
    /// The seeded tie-break: lower first.
    rank: u64,
}

#[derive(Debug)]
struct State {
    cpus: Vec<Cpu>,
    current: Option<usize>,
    registered: usize,
    caches: coherence::Caches,
    waits: WaitLists,
    owners: rwsem_owner::Owners,
    /// Set when every CPU left sleeps: each fails instead of hanging.
    deadlock: bool,
}

/// How a CPU waits on a lock: to write (or for an exclusive lock), at
/// the head of the list (a woken waiter that lost the lock again),
/// spinning rather than asleep, and until when at most.
#[derive(Clone, Copy, Debug)]
struct Wait {
    writer: bool,
    front: bool,
    spinning: bool,
    deadline: Option<u64>,
}

impl State {
    /// Wakes CPU `cpu`, taken off its wait list: it runs again at `at`,
    /// or at its own clock if that is later.
    fn resume(&mut self, cpu: usize, at: u64) {
        let c = &mut self.cpus[cpu];
        c.asleep = false;
        c.deadline = None;
        c.report.clock = c.report.clock.max(at);
    }
}

/// A simulation in progress.
#[derive(Debug)]
pub struct Sim {
    state: Mutex<State>,
    profile: Profile,
    quantum: u64,
}

thread_local! {
    static ME: RefCell<Option<(Arc<Sim>, usize)>> = const { RefCell::new(None) };
    /// Whether `ME` is set: one load on the hot paths that ask.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread runs as a simulated CPU.
pub fn active() -> bool {
    ACTIVE.get()
}

/// `splitmix64`: the seeded tie-break order.
fn mix(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Runs `body(cpu)` on `cpus` simulated CPUs (1 to 64) under `profile`,
/// each on an OS thread of its own but one at a time, in the order the
/// clocks and `seed` give; returns the bodies' results and what each CPU
/// did. `quantum` (picoseconds) lets a CPU run on while its clock is
/// within that much of the smallest other one.
pub fn run<R: Send>(
    cpus: usize,
    profile: Profile,
    seed: u64,
    quantum: u64,
    body: impl Fn(usize) -> R + Sync,
) -> (Vec<R>, Vec<CpuReport>) {
    assert!((1..=64).contains(&cpus), "1 to 64 simulated CPUs, not {cpus}");
    let cpu = |i| Cpu {
        report: CpuReport::default(),
        done: false,
        asleep: false,
        spinning: false,
        deadline: None,
        queued_at: 0,
        thread: None,
        rank: mix(seed, i as u64),
    };
    let state = State {
        cpus: (0..cpus).map(cpu).collect(),
        current: None,
        registered: 0,
        caches: Default::default(),
        waits: Default::default(),
        owners: Default::default(),
        deadlock: false,
    };
    let sim = Arc::new(Sim { state: Mutex::new(state), profile, quantum });
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cpus)
            .map(|i| {
                let (sim, body) = (sim.clone(), &body);
                s.spawn(move || {
                    ME.with(|m| *m.borrow_mut() = Some((sim.clone(), i)));
                    ACTIVE.set(true);
                    sim.start(i);
                    // Done even if the body panics: the others run on.
                    let _done = Finish(&sim, i);
                    body(i)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a simulated CPU panicked")).collect()
    });
    let state = sim.lock();
    (results, state.cpus.iter().map(|c| c.report.clone()).collect())
}

/// Marks its CPU done and passes the baton on when dropped: at the end of
/// the CPU's body, or while a panic unwinds it.
struct Finish<'s>(&'s Sim, usize);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish(self.1);
        ACTIVE.set(false);
        ME.with(|m| *m.borrow_mut() = None);
    }
}

impl Sim {
    /// The state, also after a CPU panicked while holding it (the run then
    /// fails at its join, instead of the others hanging).
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers CPU `me`'s thread; the last to register gives the baton
    /// to the first CPU; every CPU then waits for its turn.
    fn start(&self, me: usize) {
        let mut st = self.lock();
        st.cpus[me].thread = Some(std::thread::current());
        st.registered += 1;
        if st.registered == st.cpus.len() {
            let first = self.next(&st, None);
            self.hand_to(&mut st, first);
        }
        drop(st);
        self.wait_turn(me);
    }

    /// CPU `me` is done: the baton goes on.
    fn finish(&self, me: usize) {
        let mut st = self.lock();
        st.cpus[me].done = true;
        let next = self.next(&st, None);
        self.hand_to(&mut st, next);
    }

    /// The CPU to run next: the smallest clock among the runnable ones
    /// and those whose timed wait ends (at its end), seeded ties; unless
    /// `me` is within the quantum of it.
    fn next(&self, st: &State, me: Option<usize>) -> Option<usize> {
        let due = |i: usize| {
            let c = &st.cpus[i];
            match (c.done, c.asleep, c.deadline) {
                (false, false, _) => Some(c.report.clock),
                (false, true, Some((end, _))) => Some(c.report.clock.max(end)),
                _ => None,
            }
        };
        let best = (0..st.cpus.len()).filter_map(|i| Some((due(i)?, st.cpus[i].rank, i))).min()?;
        match me {
            Some(me)
                if !st.cpus[me].done
                    && !st.cpus[me].asleep
                    && st.cpus[me].report.clock <= best.0.saturating_add(self.quantum) =>
            {
                Some(me)
            }
            _ => Some(best.2),
        }
    }

    /// Gives the baton to `next` (ending its timed wait if it sleeps: it
    /// leaves the wait list at the wait's end); with no CPU runnable while
    /// some sleep, declares a deadlock and wakes every thread to fail.
    fn hand_to(&self, st: &mut State, next: Option<usize>) {
        st.current = next;
        if next.is_none() && st.cpus.iter().any(|c| c.asleep) {
            st.deadlock = true;
            st.cpus.iter().filter_map(|c| c.thread.as_ref()).for_each(Thread::unpark);
        }
        if let Some(n) = next.filter(|&n| st.cpus[n].asleep) {
            let (end, key) = st.cpus[n].deadline.take().expect("only a timed wait ends unwoken");
            st.waits.remove(key, n);
            let c = &mut st.cpus[n];
            c.asleep = false;
            c.report.clock = c.report.clock.max(end);
        }
        if let Some(t) = next.and_then(|n| st.cpus[n].thread.clone()) {
            t.unpark();
        }
    }

    fn wait_turn(&self, me: usize) {
        loop {
            let mut st = self.lock();
            if st.current == Some(me) {
                return;
            }
            if st.deadlock && st.cpus[me].asleep {
                // Leave the simulation before failing: the unwinding
                // thread's drops then run as plain code, not as events of
                // a CPU that has no turn.
                st.cpus[me].asleep = false;
                drop(st);
                ACTIVE.set(false);
                panic!("simulated deadlock: every CPU left sleeps on a lock");
            }
            drop(st);
            std::thread::park();
        }
    }

    /// CPU `me` sleeps on `key` until it is woken or, with a `deadline`,
    /// until its clock reaches that; charges the time to the structure of
    /// `key`'s line. A writer that goes to sleep stops the optimistic
    /// spinners on the rwsems it holds ([`rwsem_owner`]).
    fn sleep(&self, me: usize, key: usize, w: Wait) {
        let mut st = self.lock();
        let from = st.cpus[me].report.clock;
        if !w.front {
            st.cpus[me].queued_at = from;
        }
        let since = st.cpus[me].queued_at;
        let waiter = Waiter { cpu: me, writer: w.writer, spinning: w.spinning, since };
        st.waits.add(key, waiter, w.front);
        if !w.spinning {
            rwsem_owner::owner_sleeps(&mut st, me, from + self.profile.spin);
        }
        let c = &mut st.cpus[me];
        c.asleep = true;
        c.spinning = w.spinning;
        c.deadline = w.deadline.map(|d| (d, key));
        let next = self.next(&st, None);
        self.hand_to(&mut st, next);
        drop(st);
        self.wait_turn(me);
        let mut st = self.lock();
        let waited = st.cpus[me].report.clock - from;
        charge_wait(&mut st, me, key, waited);
    }

    /// Wakes the waiters a release of `key` by CPU `me` wakes: they run
    /// again the profile's wake-up latency from now, or a spin round from
    /// now if they spin.
    fn wake(&self, me: usize, key: usize) {
        let mut st = self.lock();
        let now = st.cpus[me].report.clock;
        for w in st.waits.take_woken(key) {
            st.resume(w.cpu, now + if w.spinning { self.profile.spin } else { self.profile.wakeup });
        }
    }

    /// Advances CPU `me`'s clock by `cost` (recording it with `f`), then
    /// passes the baton if another CPU is due.
    fn advance(&self, me: usize, f: impl FnOnce(&mut State, &Profile) -> u64) {
        let mut st = self.lock();
        let cost = f(&mut st, &self.profile);
        st.cpus[me].report.clock += cost;
        let next = self.next(&st, Some(me));
        if next == Some(me) {
            return;
        }
        self.hand_to(&mut st, next);
        drop(st);
        self.wait_turn(me);
    }
}

/// Runs `f` with this thread's simulation and CPU, if it has one.
fn with_me(f: impl FnOnce(&Sim, usize)) {
    ME.with(|m| {
        if let Some((sim, me)) = m.borrow().as_ref() {
            f(sim, *me);
        }
    });
}

/// An access by this CPU to the line at `addr`, a line of `s`.
pub(crate) fn access(s: Structure, addr: usize, write: bool) {
    with_me(|sim, me| {
        sim.advance(me, |st, p| {
            let now = st.cpus[me].report.clock;
            let out = st.caches.access(p, me, now, addr >> 6, write, s as u8);
            let r = &mut st.cpus[me].report;
            r.queued += out.queued;
            r.transfers.accesses[s as usize] += 1;
            r.transfers.transfers[s as usize] += out.transfer as u64;
            r.invalidations += out.invalidated as u64;
            out.cost
        })
    });
}

/// The `len` bytes at `addr` were freed: their lines leave every cache,
/// and rwsems there their owner records.
pub(crate) fn forget(addr: usize, len: usize) {
    with_me(|sim, _| {
        let lines = addr >> 6..=(addr + len.max(1) - 1) >> 6;
        let mut st = sim.lock();
        st.owners.forget(lines.clone());
        st.caches.forget(lines);
    });
}

/// This thread's simulated CPU, from 1, if it runs as one.
pub fn cpu() -> Option<usize> {
    ME.with(|m| m.borrow().as_ref().map(|&(_, me)| me + 1))
}

/// This CPU's clock in picoseconds (0 outside a simulation).
pub fn now() -> u64 {
    report().clock
}

/// What this CPU did so far (nothing outside a simulation).
pub fn report() -> CpuReport {
    let mut report = CpuReport::default();
    with_me(|sim, me| report = sim.lock().cpus[me].report.clone());
    report
}

/// Adds `waited` to CPU `me`'s lock waits, under the structure of the
/// line at `key` if an accounted access named it.
fn charge_wait(st: &mut State, me: usize, key: usize, waited: u64) {
    let tag = st.caches.tag((key & !rwsem_owner::OSQ) >> 6).map(usize::from).filter(|&t| t < N);
    let r = &mut st.cpus[me].report;
    r.waited += waited;
    if let Some(t) = tag {
        r.transfers.waited[t] += waited;
    }
}

/// One round of spinning for the lock at `key` (an address; 0: none).
#[cfg_attr(any(loom, shuttle), allow(dead_code))] // `backoff` yields there instead
pub(crate) fn spin(key: usize) {
    with_me(|sim, me| {
        sim.advance(me, |st, p| {
            charge_wait(st, me, key, p.spin);
            p.spin
        })
    });
}

/// Sleeps this CPU on the wait list of the lock at `key`, to write if
/// `writer`, at the head if `front` (a woken waiter that lost the lock
/// again), until a release of `key` wakes it; the caller then tries the
/// lock again. Must follow the failed try with no event between, so
/// that no release can slip in (only one CPU runs at a time).
pub(crate) fn sleep(key: usize, writer: bool, front: bool) {
    with_me(|sim, me| {
        sim.sleep(me, key, Wait { writer, front, spinning: false, deadline: None });
    });
}

/// Spins this CPU, queued on the lock at `key` (at the head if `front`),
/// until a release of `key` lets it try again: one event for the whole
/// wait instead of one per round, charged to the structure of `key`'s
/// line as [`spin`]'s rounds are. Must follow the failed try with no
/// event between, as [`sleep`].
#[cfg_attr(any(loom, shuttle), allow(dead_code))] // the facade's mutex is loom's or shuttle's there
pub(crate) fn spin_wait(key: usize, front: bool) {
    with_me(|sim, me| {
        sim.sleep(me, key, Wait { writer: true, front, spinning: true, deadline: None });
    });
}

/// Who waits on the lock at `key`: None if nobody, else whether the first
/// waiter waits to write.
pub(crate) fn first_waiter(key: usize) -> Option<bool> {
    let mut first = None;
    with_me(|sim, _| first = sim.lock().waits.first(key).map(|w| w.writer));
    first
}

/// This CPU, woken from the lock at `key`'s wait list, has taken it.
pub(crate) fn acquired(key: usize) {
    with_me(|sim, me| sim.lock().waits.acquired(key, me));
}

/// Whether the first waiter on the lock at `key` has the handoff: it has
/// waited `RWSEM_WAIT_TIMEOUT` by this CPU's clock, and no newcomer may
/// steal the lock from it.
#[cfg_attr(any(loom, shuttle), allow(dead_code))] // the facade's RwLock is loom's or shuttle's there
pub(crate) fn handoff(key: usize) -> bool {
    let mut handoff = false;
    with_me(|sim, me| {
        let st = sim.lock();
        let first = st.waits.first(key).map(|w| w.since);
        handoff = first.is_some_and(|since| since + wait::HANDOFF_AFTER <= st.cpus[me].report.clock);
    });
    handoff
}

/// A release of the lock at `key`: wakes its first waiter, and every
/// queued reader with a reader ([`wait`]'s rules). Nothing outside a
/// simulation.
pub(crate) fn wake(key: usize) {
    with_me(|sim, me| sim.wake(me, key));
}

#[cfg(test)]
mod tests;
