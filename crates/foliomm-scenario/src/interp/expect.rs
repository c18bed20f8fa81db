//! Observations and expectations: what `observe` steps recorded, and `expect`
//! lines evaluated against them and the backend's counters.

use super::state::State;
use super::StepResult;
use crate::lang::{CmpOp, MachineSetting, Operand};
use crate::observation::Observation;
use foliomm::mapcount::{Design, RmapIdStage};

impl State<'_> {
    /// Evaluates `expect LHS OP RHS`, skipped where the run's mapcount design
    /// is not among `designs` (when any are given) or the backend cannot see
    /// an operand.
    pub(super) fn expect(&self, lhs: &Operand, op: CmpOp, rhs: &Operand, designs: &[Design]) -> StepResult {
        let design = self.design();
        if !designs.is_empty() && !designs.contains(&design) {
            let names: Vec<&str> = designs.iter().map(|d| d.name()).collect();
            return Ok(format!("skipped: only for {} (this run: {design})", names.join(", ")));
        }
        let inexact = |o: &Operand| matches!(o, Operand::Field { obj, field } if obj == "stat" && !self.backend.exact_counter(field));
        if inexact(lhs) || inexact(rhs) {
            return Ok(format!("skipped: counters on the {} backend are system-wide", self.backend.name()));
        }
        let hidden = |o: &Operand| match o {
            Operand::Field { obj, field } if obj != "stat" && Observation::field_names().any(|f| f == field) => {
                let via_gup = self.obs.iter().any(|(n, ob)| n == obj && ob.via_gup);
                !if via_gup { self.backend.observes_through_gup(field) } else { self.backend.observes(field) }
            }
            _ => false,
        };
        if hidden(lhs) || hidden(rhs) {
            return Ok(format!("skipped: the {} backend cannot observe that field", self.backend.name()));
        }
        let (a, an) = self.operand(lhs)?;
        let (b, bn) = self.operand(rhs)?;
        if op.holds(a, b) {
            Ok(format!("{an} {} {bn}", op.symbol()))
        } else {
            Err(format!("expectation failed: {an} {} {bn}", op.symbol()).into())
        }
    }

    /// The mapcount design whose answers this run expects: the last `set
    /// mapcount`, or the backend's own (the model's default and Linux 6.15+
    /// are mm-id, the guest's 6.1 is subpage), as the last `set
    /// rmap_id_stage` makes it answer.
    fn design(&self) -> Design {
        let (mut design, mut stage) = (self.backend.design(), RmapIdStage::default());
        for (_, s) in &self.settings {
            match s {
                MachineSetting::Mapcount(d) => design = *d,
                MachineSetting::RmapIdStage(st) => stage = *st,
                _ => {}
            }
        }
        stage.answers_as(design)
    }

    /// Keeps an observation under `name`; returns a one-line summary.
    pub(super) fn record(&mut self, name: &str, o: Observation) -> String {
        let pg = &o.page;
        let summary = format!(
            "{name}: frame {:#x} order {} {} {}{}rss {}K thp {}K",
            pg.pfn,
            pg.folio_order,
            if pg.present { "present" } else { "absent" },
            if pg.exclusive { "exclusive " } else { "" },
            if pg.pmd_mapped { "pmd " } else { "" },
            o.range.rss_kb,
            o.range.anon_huge_kb
        );
        self.obs.retain(|(n, _)| n != name);
        self.obs.push((name.to_string(), o));
        summary
    }

    /// The value of an operand and a description of it for messages.
    fn operand(&self, o: &Operand) -> Result<(u64, String), String> {
        match o {
            Operand::Num(n) => Ok((*n, n.to_string())),
            Operand::Bool(b) => Ok((*b as u64, b.to_string())),
            Operand::Field { obj, field } if obj == "stat" => {
                let v = self.backend.counters().into_iter().find(|(n, _)| n == field).map(|(_, v)| v);
                let v = v.ok_or_else(|| format!("no counter '{field}' on the {} backend", self.backend.name()))?;
                Ok((v, format!("stat.{field} (= {v})")))
            }
            Operand::Field { obj, field } => {
                let (_, ob) =
                    self.obs.iter().find(|(n, _)| n == obj).ok_or_else(|| format!("no observation named '{obj}'"))?;
                let v = ob.field(field).ok_or_else(|| {
                    format!(
                        "no field '{field}' (fields: {})",
                        Observation::field_names().collect::<Vec<_>>().join(", ")
                    )
                })?;
                let shown = if field == "frame" { format!("{v:#x}") } else { v.to_string() };
                Ok((v, format!("{obj}.{field} (= {shown})")))
            }
        }
    }
}
