//! `std`'s mutex and reader-writer lock, aware of simulated CPUs: outside
//! a simulation they are `std`'s; inside one ([`super::sim`]) a contended
//! lock is waited for in simulated time, so that the CPU holding it, whose
//! clock is then the smallest, runs and lets it go instead of the waiter
//! blocking the only running thread.
//!
//! The mutex models the kernel's spinlocks and its `struct mutex`, whose
//! waiters spin while the owner runs (`mutex_optimistic_spin`; a simulated
//! owner is never preempted): in a simulation a waiter queues and spins
//! until a release lets the first in the queue try (qspinlock's MCS
//! queue, the mutex's OSQ); no newcomer takes a spinlock past them, while
//! a mutex's newcomer may (`Mutex::new_mutex`). Its wait is simulated
//! time spent spinning.
//! The reader-writer lock models `struct rw_semaphore`
//! (kernel/locking/rwsem.c): a writer first spins while the owner lets it
//! (`rwsem_optimistic_spin`, [`sim::optimistic_spin`]); then, as a
//! reader does at once, it sleeps on the lock's wait list and is woken by
//! the release that frees it. Linux's fairness rules hold in
//! a simulation: with a waiter queued, a new reader or writer does not
//! take the lock by its fast path (`RWSEM_FLAG_WAITERS` is in
//! `RWSEM_READ_FAILED_MASK`), so a waiting writer blocks new readers; a
//! reader in the slow path takes a free lock anyway (reader lock
//! stealing) unless the first waiter has waited long enough for the
//! handoff, and a woken waiter takes it directly.
//!
//! A `struct mutex`'s waiter spins only while its owner runs; if the
//! owner sleeps (on a rwsem, as a hugetlb fault holding its fault mutex
//! may) it sleeps too ([`sim::mutex_wait`]).

use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};

use super::sim;

/// A guard's `Deref` (and with `mut` its `DerefMut`) to the `std` guard it
/// holds, and its `Drop`: the `std` guard goes, then the lock's
/// `released` hook runs.
macro_rules! guard_impls {
    ($guard:ident) => {
        impl<T: ?Sized> std::ops::Deref for $guard<'_, T> {
            type Target = T;
            fn deref(&self) -> &T {
                self.inner.as_ref().expect("held until dropped")
            }
        }

        impl<T: ?Sized> Drop for $guard<'_, T> {
            fn drop(&mut self) {
                drop(self.inner.take());
                self.lock.released();
            }
        }
    };
    ($guard:ident, mut) => {
        guard_impls!($guard);

        impl<T: ?Sized> std::ops::DerefMut for $guard<'_, T> {
            fn deref_mut(&mut self) -> &mut T {
                self.inner.as_mut().expect("held until dropped")
            }
        }
    };
}

/// `std::sync::Mutex`, waited for in simulated time inside a simulation:
/// a spinlock, or with `barging` a `struct mutex`.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized> {
    /// Whether a newcomer may take the free lock past queued waiters, as
    /// `__mutex_trylock_fast` may past the OSQ's spinners (a qspinlock's
    /// fast path fails while its queue is not empty).
    barging: bool,
    inner: std::sync::Mutex<T>,
}

/// The mutex held; dropping it is the unlock, which in a simulation lets
/// the first queued waiter try.
#[derive(Debug)]
pub struct MutexGuard<'a, T: ?Sized> {
    inner: Option<std::sync::MutexGuard<'a, T>>,
    lock: &'a Mutex<T>,
}

impl<T> Mutex<T> {
    /// A spinlock (`spinlock_t`).
    pub const fn new(t: T) -> Mutex<T> {
        Mutex { barging: false, inner: std::sync::Mutex::new(t) }
    }

    /// A sleeping `struct mutex`, whose optimistic spinners a newcomer may
    /// beat to the lock.
    pub const fn new_mutex(t: T) -> Mutex<T> {
        Mutex { barging: true, inner: std::sync::Mutex::new(t) }
    }

    pub fn into_inner(self) -> LockResult<T> {
        self.inner.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// The lock's queue key: its address.
    fn key(&self) -> usize {
        self as *const Self as *const () as usize
    }

    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        let got = match sim::active() {
            true => self.spinning(),
            false => self.inner.lock(),
        };
        wrap(got, |g| MutexGuard { inner: Some(g), lock: self })
    }

    /// Takes it if it is free and, in a simulation, a spinlock's queue is
    /// empty (`queued_spin_trylock` fails while it is not).
    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        if !self.barging && sim::active() && sim::first_waiter(self.key()).is_some() {
            return Err(TryLockError::WouldBlock);
        }
        let got = match self.inner.try_lock() {
            Ok(g) => Ok(MutexGuard { inner: Some(g), lock: self }),
            Err(TryLockError::WouldBlock) => return Err(TryLockError::WouldBlock),
            Err(TryLockError::Poisoned(p)) => {
                Err(TryLockError::Poisoned(PoisonError::new(MutexGuard { inner: Some(p.into_inner()), lock: self })))
            }
        };
        if self.barging {
            sim::mutex_taken(self.key());
        }
        got
    }

    /// After a release: in a simulation, lets the first queued waiter try.
    fn released(&self) {
        if self.barging {
            sim::mutex_released(self.key());
        }
        super::wake_waiters(self.key());
    }

    /// Takes it in a simulation, queued behind earlier waiters and
    /// spinning until a release lets it try.
    fn spinning(&self) -> LockResult<std::sync::MutexGuard<'_, T>> {
        let (key, mut rounds) = (self.key(), 0u32);
        loop {
            if rounds > 0 || self.barging || sim::first_waiter(key).is_none() {
                let got = match self.inner.try_lock() {
                    Ok(g) => Ok(g),
                    Err(TryLockError::Poisoned(p)) => Err(p),
                    Err(TryLockError::WouldBlock) => {
                        rounds += 1;
                        self.wait(rounds > 1);
                        continue;
                    }
                };
                super::sleep_done(rounds, key);
                if self.barging {
                    sim::mutex_taken(key);
                }
                return got;
            }
            rounds += 1;
            self.wait(false);
        }
    }

    /// Queues on it in a simulation: a spinlock's waiter spins, a
    /// `struct mutex`'s spins while the owner runs.
    fn wait(&self, front: bool) {
        match self.barging {
            true => sim::mutex_wait(self.key(), front),
            false => sim::spin_wait(self.key(), front),
        }
    }
}

guard_impls!(MutexGuard, mut);

/// `std::sync::RwLock` as a `struct rw_semaphore`: its waiters sleep
/// inside a simulation.
#[derive(Debug, Default)]
pub struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

/// The read side held; dropping it is `up_read`.
#[derive(Debug)]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    inner: Option<std::sync::RwLockReadGuard<'a, T>>,
    lock: &'a RwLock<T>,
}

/// The write side held; dropping it is `up_write`.
#[derive(Debug)]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    inner: Option<std::sync::RwLockWriteGuard<'a, T>>,
    lock: &'a RwLock<T>,
}

impl<T> RwLock<T> {
    pub const fn new(t: T) -> RwLock<T> {
        RwLock(std::sync::RwLock::new(t))
    }
}

/// Wraps a `std` lock result in the facade's guard.
fn wrap<G, W>(r: LockResult<G>, f: impl FnOnce(G) -> W) -> LockResult<W> {
    match r {
        Ok(g) => Ok(f(g)),
        Err(p) => Err(PoisonError::new(f(p.into_inner()))),
    }
}

impl<T: ?Sized> RwLock<T> {
    /// The lock's wait-list key: its address.
    fn key(&self) -> usize {
        self as *const Self as *const () as usize
    }

    /// `down_read`.
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        let got = match sim::active() {
            true => self.sleeping(false, || self.0.try_read()),
            false => self.0.read(),
        };
        wrap(got, |g| RwLockReadGuard { inner: Some(g), lock: self })
    }

    /// `down_write`.
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        let got = match sim::active() {
            true => self.sleeping(true, || self.0.try_write()),
            false => self.0.write(),
        };
        wrap(got, |g| RwLockWriteGuard { inner: Some(g), lock: self })
    }

    /// `down_read_trylock`: fails while a writer holds it, and in a
    /// simulation also while anyone waits.
    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, T>> {
        self.try_as(false, |l| l.try_read(), |g| RwLockReadGuard { inner: Some(g), lock: self })
    }

    /// `down_write_trylock`: fails while anyone holds it, and in a
    /// simulation also while anyone waits.
    pub fn try_write(&self) -> TryLockResult<RwLockWriteGuard<'_, T>> {
        self.try_as(true, |l| l.try_write(), |g| RwLockWriteGuard { inner: Some(g), lock: self })
    }

    /// One try of the inner lock by `take` (to write if `writer`), its
    /// guard wrapped by `f`; in a simulation a waiter makes it fail (the
    /// waiter comes first).
    fn try_as<'a, G, W>(
        &'a self,
        writer: bool,
        take: impl FnOnce(&'a std::sync::RwLock<T>) -> TryLockResult<G>,
        f: impl FnOnce(G) -> W,
    ) -> TryLockResult<W> {
        if sim::active() && sim::first_waiter(self.key()).is_some() {
            return Err(TryLockError::WouldBlock);
        }
        let got = match take(&self.0) {
            Ok(g) => Ok(f(g)),
            Err(TryLockError::WouldBlock) => return Err(TryLockError::WouldBlock),
            Err(TryLockError::Poisoned(p)) => Err(TryLockError::Poisoned(PoisonError::new(f(p.into_inner())))),
        };
        sim::rwsem_taken(self.key(), writer);
        got
    }

    /// Whether nobody holds it (a probe: takes and drops the write side;
    /// a poisoned lock nobody holds is free, its next holder gets the
    /// poison).
    fn free(&self) -> bool {
        !matches!(self.0.try_write(), Err(TryLockError::WouldBlock))
    }

    /// Takes it with `try_lock` in a simulation, by the rules of the
    /// module comment, a writer spinning optimistically before it sleeps
    /// on the wait list ([`sim::optimistic_spin`]).
    fn sleeping<G>(&self, writer: bool, mut try_lock: impl FnMut() -> TryLockResult<G>) -> LockResult<G> {
        let (key, mut spins) = (self.key(), 0);
        let mut attempt = || match try_lock() {
            Ok(g) => Some(Ok(g)),
            Err(TryLockError::Poisoned(p)) => Some(Err(p)),
            Err(TryLockError::WouldBlock) => None,
        };
        let got = loop {
            let woken = spins > 0;
            let steal = !writer && self.free() && !sim::handoff(key);
            if woken || sim::first_waiter(key).is_none() || steal {
                if let Some(got) = attempt() {
                    break got;
                }
            }
            if writer && !woken {
                if let Some(got) = sim::optimistic_spin(key, &mut attempt) {
                    break got;
                }
            }
            super::sleep_wait(&mut spins, key, writer);
        };
        super::sleep_done(spins, key);
        sim::rwsem_taken(key, writer);
        got
    }

    /// After a release in a simulation: `up_read` or `up_write`
    /// ([`sim::rwsem_released`]).
    fn released(&self) {
        sim::rwsem_released(self.key());
    }
}

impl<'a, T> RwLockWriteGuard<'a, T> {
    /// `downgrade_write`: the write hold becomes a read hold, with no
    /// moment when the lock is free; in a simulation the readers queued
    /// first are woken ([`sim::rwsem_downgraded`]).
    pub fn downgrade(mut self) -> RwLockReadGuard<'a, T> {
        let inner = self.inner.take().expect("held until dropped");
        let lock = self.lock;
        std::mem::forget(self);
        let read = std::sync::RwLockWriteGuard::downgrade(inner);
        sim::rwsem_downgraded(lock.key());
        RwLockReadGuard { inner: Some(read), lock }
    }
}

guard_impls!(RwLockReadGuard);
guard_impls!(RwLockWriteGuard, mut);
