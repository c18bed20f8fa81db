//! The userfaultfd steps: making one, registering ranges, the resolving
//! ioctls and the handler's rules; and what the reference byte model must
//! learn from them: the pages a copy fills, and the pages a handler fills
//! when an access faults on them ([`State::uffd_fills`]).

use foliomm::internals::mm_types::{vm, UffdReason};
use foliomm::Errno;

use super::process::outcome;
use super::state::State;
use super::uffd_state::Reg;
use super::StepResult;
use crate::backend::Thread;
use crate::error::StepError;
use crate::lang::{Cmd, Place, Step, UffdStepCall};
use crate::op::{Op, Reply, UffdAction, UffdCall};

const PAGE: u64 = 4096;

/// `[addr, addr + len)` widened to whole pages.
fn pages(addr: u64, len: u64) -> (u64, u64) {
    let start = addr & !(PAGE - 1);
    (start, (addr + len.max(1)).div_ceil(PAGE) * PAGE - start)
}

impl State<'_> {
    /// Runs a userfaultfd step of thread `t`.
    pub(super) fn uffd_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        if let Cmd::Userfaultfd { name, sigbus } = &step.cmd {
            let made = self.perform(t, Op::Userfaultfd { sigbus: *sigbus }).and_then(Reply::value);
            if let Some(h) = outcome(step, made)? {
                self.uffds.names.insert((p, name.clone()), h);
                if *sigbus {
                    self.uffds.sigbus.insert(h);
                }
            }
            return Ok("made".into());
        }
        let Cmd::Uffd(u) = &step.cmd else { unreachable!("not a userfaultfd step") };
        let Some(&h) = self.uffds.names.get(&(p.clone(), u.uffd.clone())) else {
            return Err(format!(
                "no userfaultfd {} in process {p}: make it first ('{p}: {} = userfaultfd'); a child does not inherit one",
                u.uffd, u.uffd
            )
            .into());
        };
        let range = |s: &Self, place: &Place| s.place(place).map(|(a, l)| pages(a, l));
        let call = match &u.call {
            UffdStepCall::Register { place, modes } => {
                let (addr, len) = range(self, place)?;
                let page = self.hugetlb.get(&place.map).map_or(PAGE, |h| h.bytes());
                UffdCall::Register { addr, len, modes: *modes, page }
            }
            UffdStepCall::Unregister(place) => {
                let (addr, len) = range(self, place)?;
                UffdCall::Unregister { addr, len }
            }
            UffdStepCall::Fill { place, val, wp } => {
                let (addr, len) = range(self, place)?;
                UffdCall::Fill { addr, len, val: *val, wp: *wp }
            }
            UffdStepCall::Continue { place, wp } => {
                let (addr, len) = range(self, place)?;
                UffdCall::Continue { addr, len, wp: *wp }
            }
            UffdStepCall::WriteProtect { place, protect } => {
                let (addr, len) = range(self, place)?;
                UffdCall::WriteProtect { addr, len, protect: *protect }
            }
            UffdStepCall::Move { src, dst, holes } => {
                let (s, len) = range(self, src)?;
                let (d, dlen) = range(self, dst)?;
                if dlen != len {
                    return Err(format!("uffd_move: the source is {len:#x} bytes, the destination {dlen:#x}").into());
                }
                UffdCall::Move { src: s, dst: d, len, holes: *holes }
            }
            UffdStepCall::On { reason, action } => UffdCall::On { reason: *reason, action: *action },
        };
        let r = self.perform(t, Op::Uffd { uffd: h, call: call.clone() });
        // The filling ioctls reply with the bytes done; a short count is
        // EAGAIN (userfaultfd_copy and its siblings).
        let (len, what) = match call {
            UffdCall::Fill { len, .. } => (len, "filled"),
            UffdCall::Continue { len, .. } => (len, "mapped"),
            UffdCall::Move { len, .. } => (len, "moved"),
            _ => (0, ""),
        };
        if !what.is_empty() {
            let done = match r.and_then(Reply::value) {
                Ok(done) => done,
                Err(e) => return outcome(step, Err::<(), _>(e)).map(|_| "failed as expected".into()),
            };
            self.uffd_done(&p, &call, done)?;
            outcome(step, if done == len { Ok(()) } else { Err(StepError::Errno(Errno::EAGAIN)) })?;
            return Ok(format!("{} KiB {what}", done / 1024));
        }
        match call {
            UffdCall::Register { addr, len, modes, page } => {
                if outcome(step, r)?.is_some() {
                    self.uffds.forget(&p, addr, len);
                    let reg = Reg { start: addr, end: addr + len, uffd: h, modes, page };
                    self.uffds.regs.entry(p).or_default().push(reg);
                }
                Ok("registered".into())
            }
            UffdCall::Unregister { addr, len } => {
                if outcome(step, r)?.is_some() {
                    self.uffds.forget(&p, addr, len);
                }
                Ok("unregistered".into())
            }
            UffdCall::WriteProtect { .. } => outcome(step, r).map(|_| "ok".into()),
            UffdCall::On { reason, action } => {
                if outcome(step, r)?.is_some() {
                    self.uffds.rules.entry(h).or_default().insert(reason, action);
                }
                Ok("rule set".into())
            }
            UffdCall::Fill { .. } | UffdCall::Continue { .. } | UffdCall::Move { .. } => unreachable!("answered above"),
        }
    }

    /// What `done` bytes of a filling ioctl did to process `p`'s pages, in
    /// the reference model: a copy's pages hold its byte (the zero page
    /// reads 0, as an unpopulated page did); a move's destination reads
    /// what its source did, and the source reads zeros (it maps nothing).
    fn uffd_done(&mut self, p: &str, call: &UffdCall, done: u64) -> Result<(), String> {
        let rs = self.refs.get_mut(p).unwrap();
        match *call {
            UffdCall::Fill { addr, val, .. } => {
                rs.fill_pages(addr, done, val.unwrap_or(0)).map_err(|e| format!("the reference model cannot fill: {e}"))
            }
            UffdCall::Move { src, dst, .. } => {
                let bytes =
                    rs.read(src, done).map_err(|e| format!("the reference model cannot read the source: {e}"))?;
                rs.zap(src, done);
                let placed = rs.fill_pages(dst, done, 0).and_then(|()| rs.write(dst, &bytes));
                placed.map_err(|e| format!("the reference model cannot write the destination: {e}"))
            }
            _ => Ok(()),
        }
    }

    /// What an access of thread `t` to `[addr, addr + len)` will meet in
    /// ranges registered for missing faults: the empty pages a handler
    /// fills by copying (each with its byte), and the first empty page of a
    /// userfaultfd made with `sigbus`, where the access stops with SIGBUS.
    /// Asked of the backend's page tables (a peek) before the access.
    pub(super) fn uffd_fills(&mut self, t: Thread, addr: u64, len: u64) -> Result<Fills, StepError> {
        let mut fills = Fills::default();
        let Some(regs) = self.uffds.regs.get(t.proc) else { return Ok(fills) };
        let (start, span) = pages(addr, len);
        let mut wanted = Vec::new();
        for r in regs {
            let rule = self.uffds.rules.get(&r.uffd).and_then(|rules| rules.get(&UffdReason::Missing));
            let fill = match (self.uffds.sigbus.contains(&r.uffd), rule) {
                (true, _) => None,
                (false, Some(&UffdAction::Copy(val))) => Some(val),
                _ => continue,
            };
            if r.modes & vm::UFFD_MISSING == 0 {
                continue;
            }
            // Whole pages of the registration's size (huge pages in hugetlb).
            let (from, to) = (r.start.max(start) & !(r.page - 1), r.end.min(start + span));
            wanted.extend((from..to.max(from)).step_by(r.page as usize).map(|page| (page, r.page, fill)));
        }
        wanted.sort_unstable_by_key(|&(page, _, _)| page);
        for (page, size, fill) in wanted {
            let Reply::Peeked(pk) = self.perform(t, Op::Peek { addr: page })? else { continue };
            // A file page faults as missing when the file has a hole there
            // (whatever this mapping maps), an anonymous one when unmapped.
            let file = self.refs.get(t.proc).is_some_and(|r| r.file_backed(page));
            let missing = !pk.page.present && !pk.page.swapped && (!file || !pk.cached);
            if !missing {
                continue;
            }
            match fill {
                Some(val) => fills.pages.push((page, size, val)),
                None => {
                    fills.sigbus_at = Some(page.max(addr & !(PAGE - 1)));
                    break;
                }
            }
        }
        Ok(fills)
    }

    /// Applies the fills [`State::uffd_fills`] found to the reference model
    /// of `proc`, as the handler did before the access went on (those
    /// below the SIGBUS, if any).
    pub(super) fn apply_uffd_fills(&mut self, proc: &str, fills: &Fills) {
        let rs = self.refs.get_mut(proc).unwrap();
        for &(page, size, val) in fills.pages.iter().filter(|&&(page, _, _)| fills.sigbus_at.is_none_or(|s| page < s)) {
            // The page is mapped (the access found it registered and empty).
            let _ = rs.fill_pages(page, size, val);
        }
    }
}

/// What an access will meet in registered ranges ([`State::uffd_fills`]).
#[derive(Default)]
pub(super) struct Fills {
    /// The pages a handler fills: first address, size, byte.
    pages: Vec<(u64, u64, u8)>,
    pub(super) sigbus_at: Option<u64>,
}

impl Fills {
    /// How much of `[at, at + len)` the access performs before SIGBUS
    /// stops it, and whether it does.
    pub(super) fn reach(&self, at: u64, len: u64) -> (u64, bool) {
        match self.sigbus_at {
            Some(s) if s < at + len => (s.saturating_sub(at), true),
            _ => (len, false),
        }
    }
}
