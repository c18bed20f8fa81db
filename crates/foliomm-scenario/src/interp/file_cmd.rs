//! The steps on files through their descriptors: creating a memfd or a
//! tmpfs file, truncating, punching holes, fallocate, pwrite and pread
//! (checked against the reference byte model), and observing a file's
//! page in the page cache.

use super::process::{compare_bytes, outcome};
use super::state::State;
use super::StepResult;
use crate::backend::Thread;
use crate::lang::{Cmd, Step};

impl State<'_> {
    /// Runs a file step of thread `t`.
    pub(super) fn file_step(&mut self, step: &Step, t: Thread) -> StepResult {
        let p = t.proc.to_string();
        match &step.cmd {
            Cmd::CreateFile { name, size, kind } => {
                let Some(h) = outcome(step, self.timed(|b| b.create_file(t, *kind, *size)))? else {
                    return Ok("failed as expected".into());
                };
                self.files.insert(name.clone(), (h, self.ref_files.new_file(*size)));
                if let crate::backend::FileKind::Hugetlbfs(size) = kind {
                    self.hugetlb.insert(name.clone(), *size);
                }
                self.holders.insert(name.clone(), [p].into());
                Ok(format!("{name} = file {h}"))
            }
            Cmd::Punch { file, offset, len } => {
                let (h, id) = self.file(file, &p)?;
                if outcome(step, self.timed(|b| b.punch_hole(t, h, *offset, *len)))?.is_some() {
                    self.ref_files.punch(id, *offset, offset + len);
                }
                Ok("hole punched".into())
            }
            Cmd::Truncate { file, size } => {
                let (h, id) = self.file(file, &p)?;
                if outcome(step, self.timed(|b| b.ftruncate(t, h, *size)))?.is_some() {
                    self.ref_files.truncate(id, *size);
                    for rs in self.refs.values_mut() {
                        rs.truncate_file(id, size.div_ceil(4096));
                    }
                }
                Ok("truncated".into())
            }
            Cmd::Fallocate { file, offset, len, keep_size } => {
                let (h, id) = self.file(file, &p)?;
                let r = self.timed(|b| b.fallocate(t, h, *offset, *len, *keep_size));
                if outcome(step, r)?.is_some() && !keep_size {
                    self.ref_files.extend(id, offset + len);
                }
                Ok("allocated".into())
            }
            Cmd::Pwrite { file, offset, len, val } => {
                let (h, id) = self.file(file, &p)?;
                let data = vec![*val; *len as usize];
                let Some(n) = outcome(step, self.timed(|b| b.pwrite(t, h, *offset, &data)))? else {
                    return Ok("failed as expected".into());
                };
                if n != *len {
                    return Err(format!("pwrite wrote {n} of {len} bytes").into());
                }
                self.ref_files.write(id, *offset, &data);
                Ok(format!("wrote {len} bytes of {val:#04x}"))
            }
            Cmd::Pread { file, offset, len } => {
                let (h, id) = self.file(file, &p)?;
                let Some(got) = outcome(step, self.timed(|b| b.pread(t, h, *offset, *len)))? else {
                    return Ok("failed as expected".into());
                };
                compare_bytes(*offset, true, &got, &self.ref_files.read(id, *offset, *len))?;
                Ok(format!("read {} bytes as expected", got.len()))
            }
            Cmd::Observe { place, name } => {
                let (h, _) = self.file(&place.map, &p)?;
                let offset = place.range.map_or(0, |r| r.0);
                let Some(o) = outcome(step, self.timed(|b| b.observe_file(t, h, offset)))? else {
                    return Ok("failed as expected".into());
                };
                Ok(self.record(name, o))
            }
            _ => unreachable!("not a file step"),
        }
    }
}
