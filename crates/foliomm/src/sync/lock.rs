//! `std`'s mutex and reader-writer lock, aware of simulated CPUs: outside
//! a simulation they are `std`'s; inside one ([`super::sim`]) a contended
//! lock is waited for in simulated time (a [`super::sim::spin`] per try),
//! so that the CPU holding it, whose clock is then the smallest, runs and
//! lets it go instead of the waiter blocking the only running thread.

use std::sync::{LockResult, TryLockError, TryLockResult};

pub use std::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

/// Takes a lock with `try_lock` until it is free, spinning in simulated
/// time meanwhile.
fn simulated<G>(mut try_lock: impl FnMut() -> TryLockResult<G>) -> LockResult<G> {
    loop {
        match try_lock() {
            Ok(g) => return Ok(g),
            Err(TryLockError::Poisoned(p)) => return Err(p),
            Err(TryLockError::WouldBlock) => super::sim::spin(),
        }
    }
}

/// `std::sync::Mutex`, waited for in simulated time inside a simulation.
#[derive(Debug, Default)]
pub struct Mutex<T: ?Sized>(std::sync::Mutex<T>);

impl<T> Mutex<T> {
    pub const fn new(t: T) -> Mutex<T> {
        Mutex(std::sync::Mutex::new(t))
    }

    pub fn into_inner(self) -> LockResult<T> {
        self.0.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    pub fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
        match super::sim::active() {
            true => simulated(|| self.0.try_lock()),
            false => self.0.lock(),
        }
    }

    pub fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
        self.0.try_lock()
    }
}

/// `std::sync::RwLock`, waited for in simulated time inside a simulation.
#[derive(Debug, Default)]
pub struct RwLock<T: ?Sized>(std::sync::RwLock<T>);

impl<T> RwLock<T> {
    pub const fn new(t: T) -> RwLock<T> {
        RwLock(std::sync::RwLock::new(t))
    }
}

impl<T: ?Sized> RwLock<T> {
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, T>> {
        match super::sim::active() {
            true => simulated(|| self.0.try_read()),
            false => self.0.read(),
        }
    }

    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, T>> {
        match super::sim::active() {
            true => simulated(|| self.0.try_write()),
            false => self.0.write(),
        }
    }

    pub fn try_read(&self) -> TryLockResult<RwLockReadGuard<'_, T>> {
        self.0.try_read()
    }
}
