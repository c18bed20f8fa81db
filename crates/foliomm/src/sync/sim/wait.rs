//! Wait lists of the locks in simulated time, keyed by the lock word's
//! address: a rwsem's `sem->wait_list` (kernel/locking/rwsem.c), the
//! per-VMA lock's `mm->vma_writer_wait` (an `rcuwait`), and the queue of
//! a spinlock's or mutex's spinning waiters (qspinlock's MCS queue, the
//! mutex's OSQ), whose order they take the lock in.
//!
//! A waiter is queued in arrival order; a release wakes the first waiter
//! and, if it waits to read, every other reader in the list
//! (`rwsem_mark_wake` with `RWSEM_WAKE_ANY`, up to `MAX_READERS_WAKEUP`).
//! A woken reader takes the lock itself; a woken writer stays the first
//! waiter until it has the lock (Linux leaves it on the list: a release
//! meanwhile wakes nobody new), and if it loses the race goes back to
//! sleep at the head. A rwsem's optimistic spinners queue on a list of
//! their own (`sem->osq`, [`super::rwsem_owner`]); a waiter with a
//! deadline leaves its list when the deadline passes.
//!
//! Differs from Linux: the handoff after `RWSEM_WAIT_TIMEOUT` only stops
//! a rwsem's readers and spinning writers from taking the lock
//! (`sim::handoff`), and a mutex's first waiter may lose it to newcomers
//! any number of times (no `MUTEX_FLAG_HANDOFF`).

use std::collections::{HashMap, VecDeque};

/// `MAX_READERS_WAKEUP`: readers one release wakes at most.
const MAX_READERS_WAKEUP: usize = 0x100;
/// `RWSEM_WAIT_TIMEOUT` in picoseconds: one jiffy at HZ=250.
pub(super) const HANDOFF_AFTER: u64 = 4_000_000_000;

/// One sleeping CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Waiter {
    pub cpu: usize,
    /// Whether it waits to write (`RWSEM_WAITING_FOR_WRITE`), or for a
    /// spinning lock (exclusive too).
    pub writer: bool,
    /// Whether it spins rather than sleeps (a spinlock's or mutex's queued
    /// waiter): it sees the release a spin round later, with no wake-up.
    pub spinning: bool,
    /// When it first queued (picoseconds of its clock).
    pub since: u64,
}

/// Every lock's wait list, and the writer each woke that has not taken
/// the lock yet.
#[derive(Debug, Default)]
pub(super) struct WaitLists {
    lists: HashMap<usize, VecDeque<Waiter>>,
    woken_writer: HashMap<usize, Waiter>,
}

impl WaitLists {
    /// The waiters on `key` sleep from now on (their mutex's owner went to
    /// sleep): a release wakes them a wake-up later.
    pub fn stop_spinning(&mut self, key: usize) {
        self.lists.get_mut(&key).into_iter().flatten().for_each(|w| w.spinning = false);
    }

    /// Queues `w` on `key`: at the tail, or at the head if `front` (a
    /// woken waiter that lost the lock).
    pub fn add(&mut self, key: usize, w: Waiter, front: bool) {
        self.acquired(key, w.cpu);
        let list = self.lists.entry(key).or_default();
        match front {
            true => list.push_front(w),
            false => list.push_back(w),
        }
    }

    /// The first waiter on `key` (a woken writer that has not taken the
    /// lock yet, or the head of the list), if anyone waits.
    pub fn first(&self, key: usize) -> Option<Waiter> {
        let head = || self.lists.get(&key).and_then(|l| l.front().copied());
        self.woken_writer.get(&key).copied().or_else(head)
    }

    /// `cpu` has taken the lock at `key` (or sleeps again): it is no longer
    /// a woken writer.
    pub fn acquired(&mut self, key: usize, cpu: usize) {
        if self.woken_writer.get(&key).is_some_and(|w| w.cpu == cpu) {
            self.woken_writer.remove(&key);
        }
    }

    /// Takes `cpu` off the wait list of `key` (its timed wait ended).
    pub fn remove(&mut self, key: usize, cpu: usize) {
        if let Some(list) = self.lists.get_mut(&key) {
            list.retain(|w| w.cpu != cpu);
            if list.is_empty() {
                self.lists.remove(&key);
            }
        }
    }

    /// Takes every waiter on `key`.
    pub fn take_all(&mut self, key: usize) -> Vec<Waiter> {
        self.lists.remove(&key).map(Vec::from).unwrap_or_default()
    }

    /// Takes the waiters a release of `key` wakes: the first, and if it
    /// waits to read, every other reader (up to `MAX_READERS_WAKEUP`);
    /// none while a woken writer has not taken the lock yet.
    pub fn take_woken(&mut self, key: usize) -> Vec<Waiter> {
        if self.woken_writer.contains_key(&key) {
            // Still first: Linux's wake-up would find it again, and wake
            // nobody new.
            return Vec::new();
        }
        let Some(list) = self.lists.get_mut(&key) else { return Vec::new() };
        let woken = match list.front() {
            None => Vec::new(),
            Some(first) if first.writer => {
                let w = list.pop_front().expect("a first waiter");
                self.woken_writer.insert(key, w);
                vec![w]
            }
            Some(_) => {
                let mut woken = Vec::new();
                list.retain(|w| match !w.writer && woken.len() < MAX_READERS_WAKEUP {
                    true => {
                        woken.push(*w);
                        false
                    }
                    false => true,
                });
                woken
            }
        };
        if list.is_empty() {
            self.lists.remove(&key);
        }
        woken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(cpu: usize, writer: bool) -> Waiter {
        Waiter { cpu, writer, spinning: false, since: 0 }
    }

    fn cpus(woken: Vec<Waiter>) -> Vec<usize> {
        woken.iter().map(|w| w.cpu).collect()
    }

    #[test]
    fn a_writer_at_the_head_is_woken_alone_and_readers_together() {
        let mut l = WaitLists::default();
        for (cpu, writer) in [(1, true), (2, false), (3, true), (4, false)] {
            l.add(9, w(cpu, writer), false);
        }
        assert_eq!(cpus(l.take_woken(9)), [1]);
        assert_eq!(l.first(9), Some(w(1, true)), "the woken writer is first until it has the lock");
        l.acquired(9, 1);
        assert_eq!(cpus(l.take_woken(9)), [2, 4], "every queued reader, past the writer");
        assert_eq!(cpus(l.take_woken(9)), [3]);
        l.acquired(9, 3);
        assert!(l.first(9).is_none() && l.take_woken(9).is_empty());
    }

    #[test]
    fn a_waiter_that_lost_the_lock_goes_back_to_the_head() {
        let mut l = WaitLists::default();
        l.add(1, w(5, true), false);
        l.add(1, w(6, true), true);
        assert_eq!(cpus(l.take_woken(1)), [6]);
    }
}
