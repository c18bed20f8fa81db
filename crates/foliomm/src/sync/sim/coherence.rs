//! A MESI-style coherence model of the lines the simulated CPUs share: each
//! line is modified in one CPU or clean in a set of them, and an access
//! costs what the profile says for the state it finds.
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
enum Line {
    /// Modified in this CPU.
    Modified(usize),
    /// Clean in these CPUs (a bit each).
    Shared(u64),
}

/// What one access cost and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Picoseconds.
    pub cost: u64,
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
    /// An access by `cpu` (0 to 63) to the line at `line` (an address
    /// shifted by 6), a write if `write`; the line's state afterwards is
    /// the access's, and with the profile's adjacent-line prefetch the
    /// 128-byte buddy line follows a transfer.
    pub fn access(&mut self, p: &Profile, cpu: usize, line: usize, write: bool) -> Outcome {
        let out = self.one(p, cpu, line, write);
        if p.adjacent_prefetch && out.transfer {
            // The buddy line comes along (its own later access is a hit).
            self.one(p, cpu, line ^ 1, false);
        }
        out
    }

    fn one(&mut self, p: &Profile, cpu: usize, line: usize, write: bool) -> Outcome {
        let me = 1u64 << cpu;
        let state = self.lines.get(&line).copied();
        let (out, next) = match state {
            None => (
                Outcome { cost: p.memory, ..Outcome::default() },
                if write { Line::Modified(cpu) } else { Line::Shared(me) },
            ),
            Some(Line::Modified(o)) if o == cpu => (Outcome { cost: p.hit, ..Outcome::default() }, Line::Modified(cpu)),
            Some(Line::Modified(o)) => {
                let cost = if p.socket(o) == p.socket(cpu) { p.hitm } else { p.remote_hitm };
                let next = if write { Line::Modified(cpu) } else { Line::Shared(me | 1 << o) };
                (Outcome { cost, transfer: true, invalidated: false }, next)
            }
            Some(Line::Shared(set)) => {
                let read = if set & me != 0 { p.hit } else { p.clean_read };
                let others = set & !me != 0;
                match write {
                    false => (Outcome { cost: read, ..Outcome::default() }, Line::Shared(set | me)),
                    true => {
                        let cost = read + if others { p.invalidate } else { 0 };
                        (Outcome { cost, transfer: false, invalidated: others }, Line::Modified(cpu))
                    }
                }
            }
        };
        self.lines.insert(line, next);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ping_pong_of_writes_transfers_every_time_and_readers_share() {
        let p = Profile::two_socket_server();
        let mut c = Caches::default();
        assert_eq!(c.access(&p, 0, 7, true).cost, p.memory);
        assert_eq!(c.access(&p, 0, 7, true).cost, p.hit);
        let o = c.access(&p, 1, 7, true);
        assert!(o.transfer && o.cost == p.hitm);
        let read = c.access(&p, 2, 7, false);
        assert!(read.transfer, "a read of a modified line is a HITM too");
        assert_eq!(c.access(&p, 1, 7, false).cost, p.hit, "the writer keeps a clean copy");
        let w = c.access(&p, 2, 7, true);
        assert!(w.invalidated && !w.transfer && w.cost == p.hit + p.invalidate);
    }

    #[test]
    fn a_line_modified_on_the_other_socket_costs_more() {
        let p = Profile::two_socket_server();
        let mut c = Caches::default();
        c.access(&p, 0, 1, true);
        assert_eq!(c.access(&p, 30, 1, true).cost, p.remote_hitm);
    }

    #[test]
    fn the_adjacent_line_follows_a_transfer_when_prefetching() {
        let p = Profile { adjacent_prefetch: true, ..Profile::two_socket_server() };
        let mut c = Caches::default();
        c.access(&p, 0, 2, true);
        c.access(&p, 0, 3, true);
        c.access(&p, 1, 2, true);
        assert_eq!(c.access(&p, 1, 3, false).cost, p.hit, "the buddy came along");
    }
}
