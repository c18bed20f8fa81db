//! The model backend: a [`foliomm::Machine`] with one [`foliomm::Mm`] per
//! scenario process and one [`foliomm::Cpu`] for the interpreter's thread.

use std::collections::HashMap;
use std::sync::Arc;

use foliomm::folio::thp::ThpMode;
use foliomm::mm::gup::Pin;
use foliomm::mm::Advice;
use foliomm::mm_types::Prot;
use foliomm::{Config, Cpu, Errno, Machine, Mm, MmapFlags};

use crate::backend::{Access, Backend, BackendError, GupKind, Observation};
use crate::lang::MachineSetting;

/// Runs scenarios on the model.
#[derive(Default)]
pub struct ModelBackend {
    machine: Option<(Arc<Machine>, Cpu)>,
    procs: HashMap<String, Arc<Mm>>,
    pins: HashMap<u64, Pin>,
    next_pin: u64,
}

impl ModelBackend {
    pub fn new() -> ModelBackend {
        ModelBackend::default()
    }

    /// The machine, once started.
    pub fn machine(&self) -> Option<&Arc<Machine>> {
        self.machine.as_ref().map(|(m, _)| m)
    }

    fn mm(&self, proc: &str) -> Result<Arc<Mm>, Errno> {
        self.procs.get(proc).cloned().ok_or(Errno::EINVAL)
    }

    fn m(&mut self) -> (&Arc<Machine>, &mut Cpu) {
        let (m, c) = self.machine.as_mut().expect("the interpreter starts the backend first");
        (m, c)
    }
}

impl Backend for ModelBackend {
    fn name(&self) -> &'static str {
        "model"
    }

    fn refusal(&self, s: &MachineSetting) -> Option<String> {
        match s {
            MachineSetting::MmIds(n) if u32::try_from(*n).is_err() => {
                Some(format!("mm_ids {n} does not fit a 32-bit MM ID"))
            }
            MachineSetting::Debug(d) if !foliomm::machine::DebugSwitches::default().set(d) => Some(format!(
                "unknown debug switch '{d}' (known: {})",
                foliomm::machine::DebugSwitches::NAMES.join(", ")
            )),
            _ => None,
        }
    }

    fn start(&mut self, settings: &[MachineSetting]) -> Result<(), BackendError> {
        // The precision report is cheap at scenario scale: always on.
        let mut config = Config { precision: true, ..Config::default() };
        for s in settings {
            match s {
                MachineSetting::Memory(m) => config.memory = *m,
                MachineSetting::Mapcount(d) => config.mapcount = *d,
                MachineSetting::Zap(z) => config.zap = *z,
                MachineSetting::Tlb(n) => config.tlb_entries = *n as usize,
                // Refused above when it does not fit.
                MachineSetting::MmIds(n) => config.max_mm_id = u32::try_from(*n).ok(),
                MachineSetting::Debug(d) => {
                    config.debug.set(d);
                }
            }
        }
        let m = Machine::new(config.clone())
            .map_err(|e| BackendError(format!("cannot build a machine with {} bytes: {e}", config.memory)))?;
        let cpu = m.new_cpu();
        self.machine = Some((m, cpu));
        Ok(())
    }

    fn set_thp(&mut self, enabled: Option<ThpMode>, sizes: &[(u32, ThpMode)]) -> Result<(), BackendError> {
        let (m, _) = self.m();
        if let Some(e) = enabled {
            m.thp
                .set_enabled(e)
                .map_err(|_| BackendError(format!("'{}' is not a valid top-level THP mode", e.name())))?;
        }
        for &(order, mode) in sizes {
            m.thp
                .set_order(order, mode)
                .map_err(|_| BackendError(format!("no anonymous mTHP size {}K", 4 << order)))?;
        }
        Ok(())
    }

    fn spawn(&mut self, proc: &str) -> Result<(), Errno> {
        let mm = self.m().0.new_mm()?;
        self.procs.insert(proc.into(), mm);
        Ok(())
    }

    fn fork(&mut self, parent: &str, child: &str) -> Result<(), Errno> {
        let c = self.mm(parent)?.fork()?;
        self.procs.insert(child.into(), c);
        Ok(())
    }

    fn exit(&mut self, proc: &str) {
        if let Some(mm) = self.procs.remove(proc) {
            mm.exit();
        }
    }

    fn mmap(
        &mut self,
        proc: &str,
        at: Option<u64>,
        len: u64,
        prot: Prot,
        fixed: bool,
        populate: bool,
    ) -> Result<u64, Errno> {
        self.mm(proc)?.mmap(at.unwrap_or(0), len, prot, MmapFlags { fixed, populate, noreplace: false })
    }

    fn munmap(&mut self, proc: &str, addr: u64, len: u64) -> Result<(), Errno> {
        self.mm(proc)?.munmap(addr, len)
    }

    fn mprotect(&mut self, proc: &str, addr: u64, len: u64, prot: Prot) -> Result<(), Errno> {
        self.mm(proc)?.mprotect(addr, len, prot)
    }

    fn madvise(&mut self, proc: &str, addr: u64, len: u64, advice: Advice) -> Result<(), Errno> {
        self.mm(proc)?.madvise(addr, len, advice)
    }

    fn mremap(&mut self, proc: &str, addr: u64, len: u64, new_len: u64, to: Option<u64>) -> Result<u64, Errno> {
        self.mm(proc)?.mremap(addr, len, new_len, true, to)
    }

    fn access(&mut self, proc: &str, addr: u64, len: u64, access: Access) -> Result<Vec<u8>, Errno> {
        let mm = self.mm(proc)?;
        let (_, cpu) = self.m();
        match access {
            Access::Write { val, every_byte: true } => cpu.fill(&mm, addr, len, val).map(|_| Vec::new()),
            Access::Write { val, every_byte: false } => {
                cpu.write_byte_per_page(&mm, addr, len, val).map(|_| Vec::new())
            }
            Access::Pattern { origin, seed } => {
                cpu.write(&mm, addr, &crate::backend::pattern_bytes(origin, addr, len, seed)).map(|_| Vec::new())
            }
            Access::Read { every_byte: true } => {
                let mut buf = vec![0; len as usize];
                cpu.read(&mm, addr, &mut buf).map(|_| buf)
            }
            Access::Read { every_byte: false } => cpu.read_byte_per_page(&mm, addr, len),
        }
    }

    fn observe(&mut self, proc: &str, addr: u64, len: u64) -> Result<Observation, Errno> {
        let mm = self.mm(proc)?;
        let page = mm.page_info(addr);
        let range = mm.range_info(addr, addr + len);
        let mut byte = [0u8];
        if page.present {
            let (_, cpu) = self.m();
            cpu.read(&mm, addr, &mut byte)?;
        }
        Ok(Observation { page, range, byte: byte[0], via_gup: false })
    }

    fn pin(&mut self, proc: &str, addr: u64, len: u64, kind: GupKind) -> Result<u64, Errno> {
        let mm = self.mm(proc)?;
        let pin = match kind {
            GupKind::Get => mm.get_user_pages(addr, len)?,
            GupKind::Pin { write, longterm } => mm.pin_user_pages(addr, len, write, longterm)?,
        };
        self.next_pin += 1;
        self.pins.insert(self.next_pin, pin);
        Ok(self.next_pin)
    }

    fn unpin(&mut self, pin: u64) -> Result<(), Errno> {
        let pin = self.pins.remove(&pin).ok_or(Errno::EINVAL)?;
        self.m().0.unpin_user_pages(pin);
        Ok(())
    }

    fn observe_pin(&mut self, pin: u64) -> Result<Observation, Errno> {
        let p = self.pins.get(&pin).ok_or(Errno::EINVAL)?;
        let m = &self.machine.as_ref().expect("started").0;
        let pfn = p.frames.first().copied().flatten().unwrap_or(m.zero_pfn);
        let f = foliomm::folio::Folio::containing(&m.phys, pfn);
        let page = foliomm::mm::PageInfo {
            present: true,
            pfn,
            zero_page: f.is_zero_page(),
            folio_order: f.order(),
            refcount: f.refcount() as u64,
            ..Default::default()
        };
        let byte = m.phys.read_byte(pfn, (p.addr % 4096) as usize);
        Ok(Observation { page, range: Default::default(), byte, via_gup: true })
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let Some(m) = self.machine() else {
            return Vec::new();
        };
        let mut c = m.stats.snapshot();
        c.push(("frames_in_use".into(), m.frames_in_use()));
        c
    }

    fn check(&self) -> Vec<String> {
        self.machine().map(|m| m.check().iter().map(ToString::to_string).collect()).unwrap_or_default()
    }
}
