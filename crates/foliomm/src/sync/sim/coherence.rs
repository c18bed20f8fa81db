//! A MESI-style coherence model of the lines the simulated CPUs share: each
//! line is modified in one CPU or clean in a set of them, and an access
//! costs what the profile says for the state it finds.
//!
//! A line moves to one CPU at a time: an access that is not a hit starts
//! only once the line's last move (a transfer, an invalidation, a fetch
//! from memory) has completed, so CPUs that hammer one line queue for it,
//! as a contended lock word or counter serializes its writers.
//!
//! Differs from hardware: no capacity (a line stays in every cache that
//! held it until another CPU writes it), no exclusive-clean state (the
//! first reader's later write pays an invalidation of nobody: a hit), and
//! a line is the 64-byte line of the model's own memory that the accessed
//! word occupies.

use std::collections::HashMap;

use super::profile::Profile;

/// Where a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holders {
    /// Modified in this CPU.
    Modified(usize),
    /// Clean in these CPUs (a bit each).
    Shared(u64),
}

/// A line: where it is, when its last move completes (picoseconds), and
/// the caller's tag for it (the structure it belongs to).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Line {
    holders: Holders,
    ready: u64,
    tag: u8,
}

/// What one access cost and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Picoseconds, the wait for the line's last move included.
    pub cost: u64,
    /// Of which waiting for the line (picoseconds).
    pub queued: u64,
    /// Whether it took a line modified in another CPU (a HITM).
    pub transfer: bool,
    /// Whether a write invalidated clean copies in other CPUs.
    pub invalidated: bool,
}

/// Every line's state.
#[derive(Debug, Default)]
pub struct Caches {
    lines: HashMap<usize, Line>,
}

impl Caches {
    /// An access by `cpu` (0 to 63), at its time `now`, to the line at
    /// `line` (an address shifted by 6), a write if `write`, tagging the
    /// line `tag`; the line's state afterwards is the access's, and with
    /// the profile's adjacent-line prefetch the 128-byte buddy line
    /// follows a transfer.
    pub fn access(&mut self, p: &Profile, cpu: usize, now: u64, line: usize, write: bool, tag: u8) -> Outcome {
        let out = self.one(p, cpu, now, line, write, Some(tag));
        if p.adjacent_prefetch && out.transfer {
            // The buddy line comes along (its own later access is a hit).
            self.one(p, cpu, now, line ^ 1, false, None);
        }
        out
    }

    /// Forgets the lines `lines` (of an object that was freed): in no
    /// cache, their next access a fetch from memory.
    pub fn forget(&mut self, lines: std::ops::RangeInclusive<usize>) {
        lines.for_each(|l| _ = self.lines.remove(&l));
    }

    /// The tag of the last access to `line`, if it was accessed.
    pub fn tag(&self, line: usize) -> Option<u8> {
        self.lines.get(&line).map(|l| l.tag)
    }

    fn one(&mut self, p: &Profile, cpu: usize, now: u64, line: usize, write: bool, tag: Option<u8>) -> Outcome {
        let old = self.lines.get(&line).copied();
        let tag = tag.or(old.map(|l| l.tag)).unwrap_or(u8::MAX);
        let (mut out, holders) = moved(p, cpu, old.map(|l| l.holders), write);
        let mut ready = old.map_or(0, |l| l.ready);
        if out.cost != p.hit {
            // Not a hit: the line comes once its last move is done; a move
            // of its own (anything but a clean read) holds it meanwhile.
            out.queued = ready.saturating_sub(now);
            out.cost += out.queued;
            if write || out.transfer || old.is_none() {
                ready = now + out.cost;
            }
        }
        self.lines.insert(line, Line { holders, ready, tag });
        out
    }
}

/// The cost of an access by `cpu` to a line held by `holders` (None: by
/// no CPU), and who holds it afterwards.
fn moved(p: &Profile, cpu: usize, holders: Option<Holders>, write: bool) -> (Outcome, Holders) {
    use Holders::{Modified, Shared};
    let me = 1u64 << cpu;
    match holders {
        None => (Outcome { cost: p.memory, ..Outcome::default() }, if write { Modified(cpu) } else { Shared(me) }),
        Some(Modified(o)) if o == cpu => (Outcome { cost: p.hit, ..Outcome::default() }, Modified(cpu)),
        Some(Modified(o)) => {
            let cost = if p.socket(o) == p.socket(cpu) { p.hitm } else { p.remote_hitm };
            let next = if write { Modified(cpu) } else { Shared(me | 1 << o) };
            (Outcome { cost, transfer: true, ..Outcome::default() }, next)
        }
        Some(Shared(set)) => {
            let read = if set & me != 0 { p.hit } else { p.clean_read };
            let others = set & !me != 0;
            match write {
                false => (Outcome { cost: read, ..Outcome::default() }, Shared(set | me)),
                true => {
                    let cost = read + if others { p.invalidate } else { 0 };
                    (Outcome { cost, invalidated: others, ..Outcome::default() }, Modified(cpu))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accesses a microsecond apart: none waits for another.
    fn apart(c: &mut Caches, p: &Profile, t: &mut u64, cpu: usize, line: usize, write: bool) -> Outcome {
        *t += 1_000_000;
        c.access(p, cpu, *t, line, write, 0)
    }

    #[test]
    fn a_ping_pong_of_writes_transfers_every_time_and_readers_share() {
        let p = Profile::two_socket_server();
        let (mut c, mut t) = (Caches::default(), 0);
        assert_eq!(apart(&mut c, &p, &mut t, 0, 7, true).cost, p.memory);
        assert_eq!(apart(&mut c, &p, &mut t, 0, 7, true).cost, p.hit);
        let o = apart(&mut c, &p, &mut t, 1, 7, true);
        assert!(o.transfer && o.cost == p.hitm);
        let read = apart(&mut c, &p, &mut t, 2, 7, false);
        assert!(read.transfer, "a read of a modified line is a HITM too");
        assert_eq!(apart(&mut c, &p, &mut t, 1, 7, false).cost, p.hit, "the writer keeps a clean copy");
        let w = apart(&mut c, &p, &mut t, 2, 7, true);
        assert!(w.invalidated && !w.transfer && w.cost == p.hit + p.invalidate);
    }

    #[test]
    fn cpus_that_hammer_one_line_queue_for_it() {
        let p = Profile::two_socket_server();
        let mut c = Caches::default();
        c.access(&p, 0, 0, 9, true, 0);
        // Three CPUs write it at the same instant: each waits for the last.
        let waits: Vec<u64> = (1..4).map(|cpu| c.access(&p, cpu, 1_000_000, 9, true, 0).queued).collect();
        assert_eq!(waits, [0, p.hitm, 2 * p.hitm]);
    }

    #[test]
    fn a_line_modified_on_the_other_socket_costs_more() {
        let p = Profile::two_socket_server();
        let (mut c, mut t) = (Caches::default(), 0);
        apart(&mut c, &p, &mut t, 0, 1, true);
        assert_eq!(apart(&mut c, &p, &mut t, 30, 1, true).cost, p.remote_hitm);
    }

    #[test]
    fn the_adjacent_line_follows_a_transfer_when_prefetching() {
        let p = Profile { adjacent_prefetch: true, ..Profile::two_socket_server() };
        let (mut c, mut t) = (Caches::default(), 0);
        apart(&mut c, &p, &mut t, 0, 2, true);
        apart(&mut c, &p, &mut t, 0, 3, true);
        apart(&mut c, &p, &mut t, 1, 2, true);
        assert_eq!(apart(&mut c, &p, &mut t, 1, 3, false).cost, p.hit, "the buddy came along");
    }
}
