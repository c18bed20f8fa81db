//! The steps a process runs: mapping, protecting, advising, remapping,
//! forking and exiting, writing and reading (checked against the reference
//! byte model), observing and pinning.

use foliomm::Errno;

use super::state::State;
use super::{Failed, StepResult};
use crate::backend::Thread;
use crate::error::{BackendResult, StepError};
use crate::lang::{Cmd, Place, Step};
use crate::observation::Observation;
use crate::op::{Access, Op, Reply};

pub(super) fn errno(e: Errno) -> String {
    e.name().to_string()
}

/// Compares a backend result with the step's expected failure. Only an
/// errno can be expected: a backend failure or an unsupported call fails
/// the run whatever the step's `fails` clause says.
pub(super) fn outcome<T>(step: &Step, r: BackendResult<T>) -> Result<Option<T>, Failed> {
    match (r, step.fails) {
        (Ok(v), None) => Ok(Some(v)),
        (Err(StepError::Errno(e)), Some(want)) if e == want => Ok(None),
        (Err(StepError::Errno(e)), Some(want)) => {
            Err(format!("failed with {}, expected {}", errno(e), errno(want)).into())
        }
        (Err(StepError::Errno(e)), None) => Err(format!("failed with {e}").into()),
        (Err(e), _) => Err(e.into()),
        (Ok(_), Some(want)) => Err(format!("succeeded, expected it to fail with {}", errno(want)).into()),
    }
}

impl State<'_> {
    /// Runs a step of thread `tid` of process `p` (both exist by now).
    pub(super) fn process(&mut self, step: &Step, p: String, tid: u32) -> StepResult {
        let t = Thread { proc: &p, tid };
        // `fails [ONLY] ERRNO` outside ONLY: the step must succeed.
        let run = self.run_kind();
        let must_succeed;
        let step = match step.fails.is_some() && !step.fails_only.matches(run) {
            true => {
                must_succeed = Step { fails: None, ..step.clone() };
                &must_succeed
            }
            false => step,
        };
        match &step.cmd {
            Cmd::Mmap { .. }
            | Cmd::Munmap(_)
            | Cmd::Mprotect(..)
            | Cmd::Madvise(..)
            | Cmd::Mlock(..)
            | Cmd::Split(..)
            | Cmd::MovePages(_)
            | Cmd::Mbind(_)
            | Cmd::NumaScan(_)
            | Cmd::Mremap { .. } => self.mapping_step(step, t),
            Cmd::CreateFile { .. }
            | Cmd::Close(_)
            | Cmd::Unlink(_)
            | Cmd::Seal { .. }
            | Cmd::Truncate { .. }
            | Cmd::Punch { .. }
            | Cmd::Fallocate { .. }
            | Cmd::Pwrite { .. }
            | Cmd::Pread { .. } => self.file_step(step, t),
            Cmd::Observe { place, .. } if self.files.contains_key(&place.map) => self.file_step(step, t),
            Cmd::ShmGet { .. } | Cmd::ShmAt { .. } | Cmd::ShmDt(_) | Cmd::ShmRm(_) => self.shm_step(step, t),
            Cmd::Userfaultfd { .. } | Cmd::Uffd(_) => self.uffd_step(step, t),
            Cmd::Fork(child) => {
                if self.live.contains(child) || self.exited.contains(child) {
                    let when = if self.exited.contains(child) { "existed (it has exited" } else { "exists (" };
                    return Err(format!(
                        "process {child} already {when}; a name is never reused: give each fork its own)"
                    )
                    .into());
                }
                if outcome(step, self.perform(t, Op::Fork { child: child.clone() }))?.is_some() {
                    let mut copy = self.refs[&p].clone();
                    copy.unlock_all();
                    self.refs.insert(child.clone(), copy);
                    for ps in self.holders.values_mut().filter(|ps| ps.contains(&p)) {
                        ps.insert(child.clone());
                    }
                    self.live.insert(child.clone());
                }
                Ok(format!("{child} forked"))
            }
            Cmd::ClearSoftDirty => {
                outcome(step, self.perform(t, Op::ClearSoftDirty))?;
                Ok("soft-dirty bits cleared".into())
            }
            &Cmd::SetCpu(cpu) => {
                outcome(step, self.perform(t, Op::SetCpu { cpu }))?;
                Ok(format!("on CPU {cpu}"))
            }
            Cmd::Exit if tid != 0 => {
                self.perform(t, Op::ExitThread)?;
                let name = step.thread.as_deref().unwrap_or_default();
                if let Some(slot) = self.threads.get_mut(&p).and_then(|ts| ts.get_mut(name)) {
                    *slot = None;
                }
                Ok("thread exited".into())
            }
            Cmd::Exit => {
                self.perform(t, Op::Exit)?;
                self.uffds.exited(&p);
                self.threads.remove(&p);
                self.live.remove(&p);
                self.refs.remove(&p);
                self.exited.insert(p.clone());
                Ok("exited".into())
            }
            Cmd::Wait(child) => match (self.exited.contains(child), self.live.contains(child)) {
                (true, _) => Ok(format!("{child} reaped")),
                (_, true) => Err(format!("wait: process {child} has not exited (give it an 'exit' line first)").into()),
                _ => {
                    let known: Vec<&str> = self.live.iter().chain(&self.exited).map(String::as_str).collect();
                    let hint = crate::lang::suggest::did_you_mean(child, known);
                    Err(format!("wait: there is no process {child}{hint} (no fork made it)").into())
                }
            },
            Cmd::Write { place, val, every_byte } => {
                let val = val.unwrap_or((step.line % 251 + 1) as u8);
                self.write(step, t, place, Access::Write { val, every_byte: *every_byte })?;
                Ok(format!("wrote {val:#04x}"))
            }
            Cmd::Pattern { place, seed } => {
                // An unknown mapping is a step error (from `place`), not a panic.
                self.place(place)?;
                let origin = self.maps[&place.map].0;
                self.write(step, t, place, Access::Pattern { origin, seed: *seed })?;
                Ok(format!("wrote pattern {seed}"))
            }
            Cmd::Read { .. } => self.read_step(step, t),
            Cmd::Observe { place, name, except } => {
                let (a, l) = self.place(place)?;
                let Some(o) =
                    outcome(step, self.perform(t, Op::Observe { addr: a, len: l }).and_then(Reply::observation))?
                else {
                    return Ok("failed as expected".into());
                };
                // A VMA reaching past the observed mapping was merged with
                // a neighbour, which lies there only by the backend's
                // layout (another mapping, or the host worker's memory).
                let v = o.process.vma;
                let (start, len) = self.maps[&place.map];
                let vma_hidden = v.end > v.start && (v.start < start || v.end > start + len);
                Ok(self.record(name, Observation { addr: a, vma_hidden, ..o }.except(except)))
            }
            Cmd::Pin { .. } => self.pin_step(step, t),
            Cmd::Unpin(name) => {
                let (pin, holder, tid) = self.pins.remove(name).ok_or_else(|| format!("unknown pin '{name}'"))?;
                outcome(step, self.perform(Thread { proc: &holder, tid }, Op::Unpin { pin }))?;
                Ok(format!("{name} unpinned"))
            }
            Cmd::Query { op, name } => {
                let Some(o) = outcome(step, self.perform(t, op.clone()).and_then(Reply::observation))? else {
                    return Ok("failed as expected".into());
                };
                Ok(self.record(name, o))
            }
            Cmd::ObservePin { pin, name } => {
                let (id, holder, tid) = self.pins.get(pin).cloned().ok_or_else(|| format!("unknown pin '{pin}'"))?;
                let observed = self.perform(Thread { proc: &holder, tid }, Op::ObservePin { pin: id });
                let Some(o) = outcome(step, observed.and_then(Reply::observation))? else {
                    return Ok("failed as expected".into());
                };
                Ok(self.record(name, o))
            }
            _ => unreachable!("global commands have no process"),
        }
    }

    /// A read, in chunks where it should succeed (no buffer of a large
    /// mapping), each compared with the reference model.
    fn read_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        let Cmd::Read { place, every_byte } = &step.cmd else { unreachable!("not this step") };
        let (a, l) = self.place(place)?;
        // A read that should succeed goes in chunks, so that verifying
        // a large mapping needs no buffer of its size.
        let chunk = if step.fails.is_none() { READ_CHUNK } else { l.max(1) };
        let (mut done, mut bytes) = (0, 0);
        while done < l || (l == 0 && done == 0) {
            let (at, len) = (a + done, (l - done).min(chunk));
            let read = Op::Access { addr: at, len, access: Access::Read { every_byte: *every_byte } };
            let fills = self.uffd_fills(t, at, len)?;
            let got = self.perform(t, read).and_then(Reply::bytes);
            let Some(got) = outcome(step, got)? else {
                return Ok("failed as expected".into());
            };
            if fills.sigbus_at.is_some() {
                return Err(
                    "the read succeeded but its userfaultfd (made with sigbus) says it fails with SIGBUS".into()
                );
            }
            self.apply_uffd_fills(&p, &fills);
            let rs = self.refs.get_mut(&p).unwrap();
            rs.settle(at, len, &got, *every_byte);
            let mut want = std::mem::take(&mut self.want);
            let said = match every_byte {
                true => {
                    want.resize(len as usize, 0);
                    rs.read_into(at, &mut want)
                }
                false => rs.read_byte_per_page(at, len).map(|w| want = w),
            };
            said.map_err(|e| format!("the read succeeded but the reference model says it fails with {e}"))?;
            if let Some(runs) = self.expected_reads.as_mut() {
                for &b in &want {
                    match runs.last_mut() {
                        Some((n, v)) if *v == b => *n += 1,
                        _ => runs.push((1, b)),
                    }
                }
            }
            compare_bytes(at, *every_byte, &got, &want)?;
            self.want = want;
            bytes += got.len();
            done += len.max(1);
        }
        Ok(format!("{bytes} bytes as expected"))
    }

    /// Takes GUP references of `kind` on a place, by a kind the backend can take.
    fn pin_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        let Cmd::Pin { name, place, kind } = &step.cmd else { unreachable!("not this step") };
        if !self.backend.supports_gup(*kind) {
            let why = format!("cannot take a {kind} reference: the {} backend has no way to", self.backend.name());
            return Err(StepError::Unsupported(why).into());
        }
        let (a, l) = self.place(place)?;
        let Some(id) = outcome(step, self.perform(t, Op::Pin { addr: a, len: l, kind: *kind }).and_then(Reply::value))?
        else {
            return Ok("failed as expected".into());
        };
        // FOLL_WRITE breaks COW: a private file page becomes the process's own.
        match kind {
            crate::op::GupKind::Pin { write: true, .. } => self.refs.get_mut(&p).unwrap().break_cow(a, l),
            _ => self.refs.get_mut(&p).unwrap().fault_read(a, l),
        }
        self.pins.insert(name.clone(), (id, p, t.tid));
        Ok(format!("{name} pinned"))
    }
}

/// The most a read or a pattern write asks of the backend at once (a
/// multiple of the page size); below glibc's largest mmap threshold (32
/// MiB), so that the model's buffer for one chunk after another comes from
/// the heap, not from fresh host memory each time.
pub(super) const READ_CHUNK: u64 = 16 << 20;

impl State<'_> {
    /// A write step, mirrored into the reference model. It goes in chunks:
    /// of [`READ_CHUNK`] where it should succeed (no buffer of the whole range), of
    /// a page where it should fail with ENOMEM, so that the reference holds
    /// exactly the pages written before the fault that found no memory (a
    /// page is written whole or not at all); else in one piece.
    fn write(&mut self, step: &Step, t: Thread, place: &Place, access: Access) -> Result<(), Failed> {
        let (a, l) = self.place(place)?;
        let chunk = match step.fails {
            None => READ_CHUNK,
            Some(Errno::ENOMEM) => 4096,
            Some(_) => l.max(1),
        };
        let mut at = a;
        while at < a + l {
            let len = ((at / chunk + 1) * chunk).min(a + l) - at;
            let fills = self.uffd_fills(t, at, len)?;
            let r = self.perform(t, Op::Access { addr: at, len, access }).and_then(Reply::done);
            self.apply_uffd_fills(t.proc, &fills);
            let (len_done, sigbus) = fills.reach(at, len);
            let got = errno_of(&r);
            let failed = r.is_err();
            // Every chunk but the last must succeed; the last ends as the step says.
            if failed || at + len == a + l {
                outcome(step, r)?;
            }
            if let Some(got) = got.filter(|g| mirrored(*g, self.hugetlb.contains_key(&place.map))) {
                let rs = self.refs.get_mut(t.proc).unwrap();
                let expected = match access {
                    _ if len_done == 0 => Ok(()),
                    Access::Write { val, every_byte: true } => rs.fill(at, len_done, val),
                    Access::Write { val, every_byte: false } => rs.write_byte_per_page(at, len_done, val),
                    Access::Pattern { origin, seed } => {
                        rs.write(at, &crate::op::pattern_bytes(origin, at, len_done, seed))
                    }
                    Access::Read { .. } => unreachable!("a write"),
                };
                // A userfaultfd made with UFFD_FEATURE_SIGBUS stops it there.
                let expected = expected.and(if sigbus { Err(Errno::SIGBUS) } else { Ok(()) });
                same_result("write", got, expected)?;
            }
            if failed {
                break;
            }
            at += len;
        }
        Ok(())
    }
}

/// How a backend call ended, as far as the reference model can follow:
/// `Some(None)` for success, `Some(Some(e))` for errno `e`, `None` for a
/// backend failure (the run stops on it anyway).
fn errno_of<T>(r: &BackendResult<T>) -> Option<Option<Errno>> {
    match r {
        Ok(_) => Some(None),
        Err(StepError::Errno(e)) => Some(Some(*e)),
        Err(_) => None,
    }
}

/// Whether the reference model can follow an access that ended so: it
/// succeeded, or stopped at the first page the mappings forbid (having
/// written the pages before, as a CPU does). Running out of memory part
/// way it cannot follow, nor a SIGBUS on a hugetlb mapping (`hugetlb`),
/// which may mean the pool had no page.
fn mirrored(got: Option<Errno>, hugetlb: bool) -> bool {
    matches!(got, None | Some(Errno::EFAULT | Errno::EACCES)) || (got == Some(Errno::SIGBUS) && !hugetlb)
}

/// Checks that the reference model's access ended as the backend's did.
fn same_result(what: &str, got: Option<Errno>, expected: foliomm::Result<()>) -> Result<(), String> {
    match (got, expected) {
        (None, Ok(())) => Ok(()),
        (Some(g), Err(e)) if g == e => Ok(()),
        (None, Err(e)) => Err(format!("the {what} succeeded but the reference model says it fails with {e}")),
        (Some(g), Ok(())) => Err(format!("the {what} failed with {g} but the reference model says it succeeds")),
        (Some(g), Err(e)) => Err(format!("the {what} failed with {g} but the reference model says {e}")),
    }
}

pub(super) fn compare_bytes(addr: u64, every_byte: bool, got: &[u8], want: &[u8]) -> Result<(), String> {
    // One memcmp first: the search for the first difference is for failures.
    if got == want {
        return Ok(());
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => Ok(()),
        None => Err(format!("read {} bytes, the reference has {}", got.len(), want.len())),
        Some(i) => {
            let at = addr + if every_byte { i as u64 } else { i as u64 * 4096 };
            Err(format!(
                "data integrity: the byte at {at:#x} reads {:#04x}, the reference model says {:#04x}",
                got[i], want[i]
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interp::FailureKind;

    /// Only an errno can be expected: a backend failure or an unsupported
    /// call fails a step written `fails EINVAL`.
    #[test]
    fn only_an_errno_matches_a_fails_clause() {
        let step = &crate::lang::parse("P: munmap a fails EINVAL\n").unwrap()[0];
        assert!(matches!(outcome::<()>(step, Err(StepError::Errno(Errno::EINVAL))), Ok(None)));
        let kind = |e: StepError| outcome::<()>(step, Err(e)).unwrap_err().kind;
        assert_eq!(kind(StepError::Errno(Errno::ENOMEM)), FailureKind::Scenario);
        let broken = crate::error::Machinery::Worker { thread: "P/0".into(), why: "closed its socket".into() };
        assert_eq!(kind(StepError::Machinery(broken)), FailureKind::Backend);
        assert_eq!(kind(StepError::Unsupported("errno 75".into())), FailureKind::Unsupported);
    }
}
