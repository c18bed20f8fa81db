//! The System V shared memory steps: `shmget` makes a segment (a file in
//! the reference byte model, which every process may attach), `shmat`
//! maps it shared as a named mapping, `shmdt` unmaps that mapping's
//! attach, `shmrm` removes the segment (`IPC_RMID`).

use foliomm::internals::mm_types::Prot;

use super::process::outcome;
use super::state::State;
use super::StepResult;
use crate::backend::Thread;
use crate::lang::{Cmd, Step};
use crate::op::{Op, Reply};

impl State<'_> {
    /// Runs a System V shared memory step of thread `t`.
    pub(super) fn shm_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        match &step.cmd {
            Cmd::ShmGet { name, size, hugetlb } => {
                let got = self.perform(t, Op::ShmGet { size: *size, hugetlb: *hugetlb }).and_then(Reply::value);
                let Some(id) = outcome(step, got)? else { return Ok("failed as expected".into()) };
                // The segment's file spans whole pages (whole huge pages).
                let unit = hugetlb.map_or(4096, |h| h.bytes());
                let len = size.next_multiple_of(unit);
                self.segments.insert(name.clone(), (id, self.ref_files.new_file(len, 1), len));
                if let Some(h) = hugetlb {
                    self.hugetlb.insert(name.clone(), *h);
                }
                Ok(format!("{name} = segment {id}"))
            }
            Cmd::ShmAt { name, shm, readonly } => {
                let &(id, file, len) = self.segments.get(shm).ok_or_else(|| format!("unknown segment '{shm}'"))?;
                let got = self.perform(t, Op::ShmAt { shm: id, readonly: *readonly }).and_then(Reply::value);
                let Some(addr) = outcome(step, got)? else { return Ok("failed as expected".into()) };
                let prot = if *readonly { Prot(Prot::READ) } else { Prot::RW };
                self.refs.get_mut(&p).unwrap().map_file(addr, len, prot, file, 0, true);
                self.maps.insert(name.clone(), (addr, len));
                if let Some(&h) = self.hugetlb.get(shm) {
                    self.hugetlb.insert(name.clone(), h);
                }
                Ok(format!("{name} = {addr:#x}"))
            }
            Cmd::ShmDt(map) => {
                let &(addr, len) = self.maps.get(map).ok_or_else(|| format!("unknown mapping '{map}'"))?;
                if outcome(step, self.perform(t, Op::ShmDt { addr }))?.is_some() {
                    self.refs.get_mut(&p).unwrap().unmap(addr, len);
                }
                Ok("detached".into())
            }
            Cmd::ShmRm(shm) => {
                let &(id, _, _) = self.segments.get(shm).ok_or_else(|| format!("unknown segment '{shm}'"))?;
                outcome(step, self.perform(t, Op::ShmRm { shm: id }))?;
                Ok("removed".into())
            }
            _ => unreachable!("not a System V shared memory step"),
        }
    }
}
