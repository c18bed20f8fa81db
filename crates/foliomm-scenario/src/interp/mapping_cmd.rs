//! The steps that change a process's mappings: mmap (with alignment, of
//! anonymous memory or a file), munmap, mprotect, madvise and mremap, each
//! mirrored into the reference byte model once the backend has done it.

use foliomm::internals::arch::PAGE_SIZE;
use foliomm::internals::mm::Advice;
use foliomm::{Errno, Prot};

use super::process::outcome;
use super::state::State;
use super::{Failed, StepResult};
use crate::backend::Thread;
use crate::error::StepError;
use crate::lang::{Cmd, Place, Step};
use crate::op::{MmapRequest, Op, Reply};

impl State<'_> {
    /// Runs a mapping step of thread `t`.
    pub(super) fn mapping_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        match &step.cmd {
            Cmd::Mmap { .. } => self.mmap_step(step, t),
            Cmd::Munmap(pl) => {
                let (a, l) = self.place(pl)?;
                if outcome(step, self.perform(t, Op::Munmap { addr: a, len: l }))?.is_some() {
                    self.uffds.forget(&p, a, l);
                    self.refs.get_mut(&p).unwrap().unmap(a, l);
                }
                Ok("ok".into())
            }
            Cmd::Mprotect(pl, prot) => {
                let (a, l) = self.place(pl)?;
                let r = self.perform(t, Op::Mprotect { addr: a, len: l, prot: *prot });
                // A hole fails the call after the VMAs before it changed.
                match r {
                    Ok(_) => self.refs.get_mut(&p).unwrap().protect(a, l, *prot),
                    Err(StepError::Errno(Errno::ENOMEM)) => {
                        self.refs.get_mut(&p).unwrap().protect_until_hole(a, l, *prot)
                    }
                    Err(_) => {}
                }
                outcome(step, r)?;
                Ok("ok".into())
            }
            Cmd::Madvise(..) => self.madvise_step(step, t),
            Cmd::Mlock(pl, lock) => {
                let (a, l) = self.place(pl)?;
                let r = self.perform(t, Op::Mlock { addr: a, len: l, lock: *lock });
                // mlock_fixup() leaves hugetlb VMAs unlocked.
                let hugetlb = self.hugetlb.contains_key(&pl.map);
                let rs = self.refs.get_mut(t.proc).unwrap();
                match r {
                    // populate_vma_page_range(): a private writable mapping
                    // is populated with FOLL_WRITE, which breaks COW.
                    Ok(_) if *lock => {
                        rs.lock(a, l, !hugetlb);
                        rs.break_cow(a, l);
                    }
                    Ok(_) => rs.lock(a, l, false),
                    Err(StepError::Errno(Errno::ENOMEM)) => rs.lock_until_hole(a, l, *lock && !hugetlb),
                    Err(_) => {}
                }
                outcome(step, r)?;
                Ok("ok".into())
            }
            Cmd::Split(pl, order, at) if !self.maps.contains_key(&pl.map) && self.files.contains_key(&pl.map) => {
                let (file, _) = self.file(&pl.map, t.proc)?;
                let (offset, end) = pl.range.ok_or("a file's split needs its range: split FILE[START..END]")?;
                let op = Op::SplitFile { file, offset, len: end - offset, order: *order, at: *at };
                outcome(step, self.perform(t, op))?;
                Ok("ok".into())
            }
            Cmd::Split(pl, order, at) => {
                let (addr, len) = self.place(pl)?;
                outcome(step, self.perform(t, Op::SplitHugePages { addr, len, order: *order, at: *at }))?;
                Ok("ok".into())
            }
            Cmd::MovePages(m) => {
                let (addr, len) = self.place(&m.place)?;
                let op = Op::MovePages { addr, len, node: m.node, all: m.all };
                let Some((unmoved, status)) = outcome(step, self.perform(t, op).and_then(|r| r.moved()))? else {
                    return Ok("failed as expected".into());
                };
                let shown = status_text(&status);
                if unmoved != m.unmoved {
                    return Err(format!("{unmoved} pages not migrated, expected {} (status {shown})", m.unmoved).into());
                }
                let run = self.run_kind();
                match m.status.iter().find(|(only, _)| only.matches(run)) {
                    Some((_, want)) if *want != status => {
                        Err(format!("status {shown}, expected {}", status_text(want)).into())
                    }
                    _ => Ok(format!("status {shown}")),
                }
            }
            Cmd::Mbind(m) => {
                let (addr, len) = self.place(&m.place)?;
                let op = Op::Mbind { addr, len, mode: m.mode, nodes: m.nodes, flags: m.flags };
                outcome(step, self.perform(t, op))?;
                Ok("ok".into())
            }
            Cmd::NumaScan(pl) => {
                let (addr, len) = self.place(pl)?;
                let updated = outcome(step, self.perform(t, Op::NumaScan { addr, len }).and_then(|r| r.value()))?;
                Ok(format!("{} pages made PROT_NONE", updated.unwrap_or(0)))
            }
            Cmd::Mremap { .. } => self.mremap_step(step, t),
            _ => unreachable!("not a mapping step"),
        }
    }

    /// `mmap`; with `align`, reserves `len + align` inaccessible bytes and
    /// a page more at each end,
    /// maps the aligned part over them with `MAP_FIXED` and unmaps the rest
    /// of the reservation, as the kernel selftests do.
    fn mmap_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        let Cmd::Mmap { name, len, prot, populate, at, fixed, align, shared, file, offset, hugetlb, noreserve, locked } =
            &step.cmd
        else {
            unreachable!("not this step")
        };
        // With `align`, map `len + align` (and a page more at each end)
        // and unmap what lies outside the aligned part, as the kernel
        // selftests do. The spare pages keep the mapping off whatever the
        // backend's layout put beside the reservation: once the ends are
        // unmapped it is no neighbour of it, so that it merges with it on
        // no backend (the host worker's own memory and an earlier
        // mapping lie in different places on the host and the model).
        let extra = align.map_or(0, |a| a + 2 * PAGE_SIZE);
        let Some(total) = len.checked_add(extra) else {
            return Err(
                format!("mmap of {len:#x} bytes aligned to {:#x}: the sum overflows", align.unwrap_or(0)).into()
            );
        };
        let handle = match file {
            Some(f) => Some(self.file(f, &p)?),
            None => None,
        };
        let mut req = MmapRequest {
            at: *at,
            len: total,
            prot: *prot,
            fixed: *fixed,
            populate: *populate,
            shared: *shared,
            hugetlb: *hugetlb,
            noreserve: *noreserve,
            locked: *locked,
            file: handle.map(|(h, _)| (h, *offset)),
        };
        // An aligned mapping is placed on an inaccessible reservation: a
        // file mapping then maps the offset asked for at its aligned start
        // on every backend, and no mapping merges at its mmap with a
        // neighbour the backend's layout put there (on the host, the
        // worker's own memory, whose anon_vma it would share).
        let placed = align.is_some();
        let raw_req = if placed { MmapRequest::anon(total, Prot::NONE) } else { req };
        let got = self.perform(t, Op::Mmap(raw_req)).and_then(Reply::value);
        // The reservation succeeding says nothing yet of a `fails` line:
        // the mapping over it decides.
        let raw = match (placed, got) {
            (true, Ok(raw)) => raw,
            (_, got) => match outcome(step, got)? {
                Some(raw) => raw,
                None => return Ok("failed as expected".into()),
            },
        };
        let addr = align.map_or(raw, |a| (raw + PAGE_SIZE).div_ceil(a) * a);
        let trim = |e: StepError| Failed::from(e).context("trimming the aligned mapping");
        if placed {
            (req.at, req.len, req.fixed) = (Some(addr), *len, true);
            let got = self.perform(t, Op::Mmap(req)).and_then(Reply::value);
            let mapped = outcome(step, got);
            if !matches!(mapped, Ok(Some(_))) {
                self.perform(t, Op::Munmap { addr: raw, len: total }).map_err(trim)?;
                mapped?;
                return Ok("failed as expected".into());
            }
        }
        if addr > raw {
            self.perform(t, Op::Munmap { addr: raw, len: addr - raw }).map_err(trim)?;
        }
        if raw + total > addr + len {
            let tail = Op::Munmap { addr: addr + len, len: raw + total - (addr + len) };
            self.perform(t, tail).map_err(trim)?;
        }
        self.maps.insert(name.clone(), (addr, *len));

        let file_size = file.as_ref().and_then(|f| self.hugetlb.get(f).copied());
        if let Some(size) = file_size.or(hugetlb.filter(|_| file.is_none())) {
            self.hugetlb.insert(name.clone(), size);
        }
        // hugetlbfs_file_mmap(): a writable shared mapping of a hugetlbfs
        // file makes the file cover it.
        if let (Some((_, id)), Some(_), true) = (handle, file_size, *shared && prot.0 & Prot::WRITE != 0) {
            self.ref_files.extend(id, offset + len);
        }
        let rs = self.refs.get_mut(&p).unwrap();
        match handle {
            Some((_, id)) => rs.map_file(addr, *len, *prot, id, offset / 4096, *shared),
            // Shared anonymous memory is a file of its own.
            None if *shared => {
                // Only shared mappings of it: its huge pages need no unit.
                let id = self.ref_files.new_file(*len, 1);
                rs.map_file(addr, *len, *prot, id, 0, true)
            }
            None => rs.map(addr, *len, *prot),
        }
        // MAP_LOCKED locks and populates (not hugetlb: mmap_region clears
        // VM_LOCKED there); populating a private writable mapping
        // write-faults it.
        let locked = *locked && !self.hugetlb.contains_key(name);
        let rs = self.refs.get_mut(&p).unwrap();
        if locked {
            rs.lock(addr, *len, true);
        }
        if *populate || locked {
            rs.break_cow(addr, *len);
        }
        Ok(format!("{name} = {addr:#x}"))
    }

    /// `madvise`, mirrored where it acted (Linux checks first: EINVAL
    /// changed nothing; ENOMEM acted on the mapped parts).
    fn madvise_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        let Cmd::Madvise(pl, adv) = &step.cmd else { unreachable!("not this step") };
        let (a, l) = self.place(pl)?;
        let r = self.perform(t, Op::Madvise { addr: a, len: l, advice: *adv }).and_then(Reply::done);
        // A madvise that fails with EINVAL changed nothing (Linux
        // checks first); one that meets a hole (ENOMEM) acted on the
        // mapped parts.
        let acted = matches!(r, Ok(()) | Err(StepError::Errno(Errno::ENOMEM)));
        if *adv == Advice::DontNeed && acted {
            // On hugetlb the range's end is rounded down to a huge page.
            let l = if let Some(huge) = self.hugetlb.get(&pl.map).map(|s| s.bytes()) {
                (a + l) / huge * huge - a.min((a + l) / huge * huge)
            } else {
                l
            };
            self.refs.get_mut(&p).unwrap().zap(a, l);
        }
        // MADV_REMOVE walks the range's VMAs in turn: a hole (ENOMEM)
        // punched every mapped part; a refusal (EINVAL, EACCES) the VMAs
        // before the refusing one (see `RefSpace::remove_until_refused`).
        // A misaligned start is EINVAL before the walk.
        let refused = match r {
            Err(StepError::Errno(e @ (Errno::EINVAL | Errno::EACCES))) if a % PAGE_SIZE == 0 => Some(e),
            _ => None,
        };
        if *adv == Advice::Remove && (acted || refused.is_some()) {
            let read_only_refused = !self.backend.release().remove_takes_a_maywrite_mapping();
            let rs = self.refs.get_mut(&p).unwrap();
            let holes = match refused {
                Some(e) => rs.remove_until_refused(a, l, e, read_only_refused),
                None => rs.remove(a, l),
            };
            if let Some(&huge) = self.hugetlb.get(&pl.map) {
                holes.into_iter().for_each(|(id, hole)| self.hugetlb_hole(id, hole, huge));
            }
        }
        if *adv == Advice::PopulateWrite && r.is_ok() {
            self.refs.get_mut(&p).unwrap().break_cow(a, l);
        }
        if *adv == Advice::PopulateRead && r.is_ok() {
            self.refs.get_mut(&p).unwrap().fault_read(a, l);
        }
        // An EINVAL stops MADV_FREE at a VMA it refuses, after the ones
        // before it: the reference lets the whole range go.
        if *adv == Advice::Free && matches!(r, Ok(()) | Err(StepError::Errno(_))) {
            self.refs.get_mut(&p).unwrap().lazyfree(a, l);
        }
        outcome(step, r)?;
        Ok("ok".into())
    }

    /// `mremap` with MREMAP_MAYMOVE (and MREMAP_FIXED to another mapping).
    fn mremap_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        let Cmd::Mremap { name, from, size, to, dontunmap } = &step.cmd else { unreachable!("not this step") };
        let (a, l) = self.place(from)?;
        let new_len = size.unwrap_or(l);
        // A hugetlb mapping's lengths are whole huge pages (align_hugetlb).
        let huge = self.hugetlb.get(&from.map).copied();
        let round = |n: u64| huge.map_or(n, |h| n.next_multiple_of(h.bytes()));
        let target = match to {
            Some(t) => Some(self.place(&Place { map: t.clone(), range: None })?.0),
            None => None,
        };
        let Some(n) = outcome(
            step,
            self.perform(t, Op::Mremap { addr: a, len: l, new_len, to: target, dontunmap: *dontunmap })
                .and_then(Reply::value),
        )?
        else {
            return Ok("failed as expected".into());
        };
        let (l, new_len) = (round(l), round(new_len));
        let rs = self.refs.get_mut(&p).unwrap();
        if target.is_some() {
            rs.unmap(n, new_len);
        }
        if *dontunmap {
            // The source stays mapped, emptied.
            rs.remap_keeping_source(a, l, n);
        } else {
            rs.remap(a, l.min(new_len), n, new_len);
            if n != a {
                self.uffds.forget(&p, a, l);
                rs.unmap(a, l);
            } else if new_len < l {
                // Shrunk in place: the tail is gone.
                rs.unmap(a + new_len, l - new_len);
            }
        }
        self.maps.insert(name.clone(), (n, new_len));
        if let Some(h) = huge {
            self.hugetlb.insert(name.clone(), h);
        }
        Ok(format!("{name} = {n:#x}"))
    }
}

/// `move_pages` statuses as a scenario writes them: runs folded (`0*512`),
/// errnos by name, `-` for one left unwritten.
fn status_text(status: &[Option<i32>]) -> String {
    let one = |s: Option<i32>| match s {
        None => "-".to_string(),
        Some(n) if n >= 0 => n.to_string(),
        Some(n) => foliomm::Errno::from_number(-n).map_or(n.to_string(), |e| e.name().to_string()),
    };
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < status.len() {
        let run = status[i..].iter().take_while(|&&s| s == status[i]).count();
        out.push(if run > 1 { format!("{}*{run}", one(status[i])) } else { one(status[i]) });
        i += run;
    }
    out.join(" ")
}
