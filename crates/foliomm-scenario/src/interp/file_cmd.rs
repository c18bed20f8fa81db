//! The steps on files through their descriptors: creating a memfd or a
//! tmpfs file, closing, unlinking and sealing it, truncating, punching
//! holes, fallocate, pwrite and pread
//! (checked against the reference byte model), and observing a file's
//! page in the page cache.

use super::process::{compare_bytes, outcome};
use super::state::State;
use super::StepResult;
use crate::backend::Thread;
use crate::lang::{Cmd, Step};
use crate::op::{FileKind, Op, Reply};
use foliomm::internals::arch::PAGE_SIZE;
use foliomm::internals::machine::HugeSize;

impl State<'_> {
    /// Runs a file step of thread `t`.
    pub(super) fn file_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        match &step.cmd {
            Cmd::CreateFile { name, size, kind } => {
                let Some(h) =
                    outcome(step, self.perform(t, Op::CreateFile { kind: *kind, size: *size }).and_then(Reply::value))?
                else {
                    return Ok("failed as expected".into());
                };
                let unit = match kind {
                    FileKind::Hugetlbfs(size) => size.pages(),
                    _ => 1,
                };
                self.files.insert(name.clone(), (h, self.ref_files.new_file(*size, unit)));
                if let FileKind::Hugetlbfs(size) = kind {
                    self.hugetlb.insert(name.clone(), *size);
                }
                self.holders.insert(name.clone(), [p].into());
                Ok(format!("{name} = file {h}"))
            }
            Cmd::Close(file) => {
                let (h, _) = self.file(file, &p)?;
                if outcome(step, self.perform(t, Op::Close { file: h }))?.is_some() {
                    self.holders.get_mut(file).expect("a held file").remove(&p);
                }
                Ok("closed".into())
            }
            Cmd::Unlink(file) => {
                let (h, _) = self.file(file, &p)?;
                outcome(step, self.perform(t, Op::Unlink { file: h }))?;
                Ok("unlinked".into())
            }
            Cmd::Seal { file, seals } => {
                let (h, _) = self.file(file, &p)?;
                outcome(step, self.perform(t, Op::AddSeals { file: h, seals: *seals }))?;
                Ok(format!("sealed {seals:#x}"))
            }
            Cmd::Punch { file, offset, len } => {
                let (h, id) = self.file(file, &p)?;
                if outcome(step, self.perform(t, Op::PunchHole { file: h, offset: *offset, len: *len }))?.is_some() {
                    self.ref_files.punch(id, *offset, offset + len);
                    if let Some(&huge) = self.hugetlb.get(file) {
                        self.hugetlb_hole(id, *offset..offset + len, huge);
                    }
                }
                Ok("hole punched".into())
            }
            Cmd::Truncate { file, size } => {
                let (h, id) = self.file(file, &p)?;
                if outcome(step, self.perform(t, Op::Ftruncate { file: h, size: *size }))?.is_some() {
                    self.ref_files.truncate(id, *size);
                    for rs in self.refs.values_mut() {
                        rs.drop_file_pages(id, size.div_ceil(PAGE_SIZE)..u64::MAX);
                    }
                }
                Ok("truncated".into())
            }
            Cmd::Fallocate { file, offset, len, keep_size } => {
                let (h, id) = self.file(file, &p)?;
                let r = self.perform(t, Op::Fallocate { file: h, offset: *offset, len: *len, keep_size: *keep_size });
                if outcome(step, r)?.is_some() {
                    self.ref_files.allocate(id, *offset, offset + len);
                    if !keep_size {
                        self.ref_files.extend(id, offset + len);
                    }
                }
                Ok("allocated".into())
            }
            Cmd::Pwrite { .. } => self.pwrite_step(step, t),
            Cmd::Pread { .. } => self.pread_step(step, t),
            Cmd::Observe { place, name, except } => {
                let (h, _) = self.file(&place.map, &p)?;
                let offset = place.range.map_or(0, |r| r.0);
                let Some(o) =
                    outcome(step, self.perform(t, Op::ObserveFile { file: h, offset }).and_then(Reply::observation))?
                else {
                    return Ok("failed as expected".into());
                };
                Ok(self.record(name, o.except(except)))
            }
            _ => unreachable!("not a file step"),
        }
    }

    /// A hole punched at `hole` (bytes) in the hugetlbfs file `id` of
    /// `huge` pages: the huge pages it covers whole leave every mapping of
    /// the file, private copies too (`hugetlbfs_punch_hole`).
    pub(super) fn hugetlb_hole(&mut self, id: u64, hole: std::ops::Range<u64>, huge: HugeSize) {
        let unit = huge.bytes();
        let pages = hole.start.next_multiple_of(unit) / PAGE_SIZE..hole.end / unit * unit / PAGE_SIZE;
        for rs in self.refs.values_mut() {
            rs.drop_file_pages(id, pages.clone());
        }
    }

    /// `pwrite` in 64 MiB pieces (no buffer of the whole range), mirrored
    /// into the reference files.
    fn pwrite_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        let Cmd::Pwrite { file, offset, len, val } = &step.cmd else { unreachable!("not this step") };
        let (h, id) = self.file(file, &p)?;
        // In 64 MiB pieces: no buffer of the whole range.
        let mut done = 0;
        while done < *len {
            let (at, n) = (offset + done, (*len - done).min(super::process::READ_CHUNK));
            let data = vec![*val; n as usize];
            // Pieces before the last must succeed; the last ends as the step says.
            let write = Op::Pwrite { file: h, offset: at, data: data.clone() };
            let wrote = match self.perform(t, write).and_then(Reply::value) {
                Ok(w) if done + n < *len => w,
                r => match outcome(step, r)? {
                    Some(w) => w,
                    None => return Ok("failed as expected".into()),
                },
            };
            if wrote != n {
                return Err(format!("pwrite wrote {} of {len} bytes", done + wrote).into());
            }
            self.ref_files.write(id, at, &data);
            done += n;
        }
        Ok(format!("wrote {len} bytes of {val:#04x}"))
    }

    /// `pread` in 64 MiB pieces until one comes back short (the end of the
    /// file), each compared with the reference files.
    fn pread_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        let Cmd::Pread { file, offset, len } = &step.cmd else { unreachable!("not this step") };
        let (h, id) = self.file(file, &p)?;
        // In 64 MiB pieces, until one comes back short (the end of
        // the file): no buffer of the whole range.
        let mut done = 0;
        loop {
            let (at, n) = (offset + done, (*len - done).min(super::process::READ_CHUNK));
            let Some(got) =
                outcome(step, self.perform(t, Op::Pread { file: h, offset: at, len: n }).and_then(Reply::bytes))?
            else {
                return Ok("failed as expected".into());
            };
            compare_bytes(at, true, &got, &self.ref_files.read(id, at, n))?;
            done += got.len() as u64;
            if (got.len() as u64) < n || done == *len {
                break;
            }
        }
        Ok(format!("read {done} bytes as expected"))
    }
}
