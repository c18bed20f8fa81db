//! Observations and expectations: what `observe` steps recorded, and `expect`
//! lines evaluated against them and the backend's counters.

use super::state::State;
use super::StepResult;
use crate::lang::suggest::did_you_mean;
use crate::lang::{CmpOp, MachineSetting, Only, Operand, Run};
use crate::observation::Observation;
use foliomm::internals::mapcount::{Design, RmapIdStage};

impl State<'_> {
    /// Evaluates `expect LHS OP RHS`, skipped where the run's mapcount design
    /// or release does not match `only` or the backend cannot see an operand.
    pub(super) fn expect(&mut self, line: usize, lhs: &Operand, op: CmpOp, rhs: &Operand, only: &Only) -> StepResult {
        let run = self.run_kind();
        if !only.matches(run) {
            return Ok(format!("skipped: only for {only} (this run: {run})"));
        }
        let inexact =
            |o: &Operand| o.fields().into_iter().any(|(obj, f)| obj == "stat" && !self.backend.exact_counter(f));
        if inexact(lhs) || inexact(rhs) {
            return Ok(format!("skipped: counters on the {} backend are system-wide", self.backend.name()));
        }
        let hidden = |o: &Operand| {
            o.fields().into_iter().any(|(obj, field)| {
                if obj == "stat" || !Observation::field_names().any(|f| f == field) {
                    return false;
                }
                // Hidden by the backend: skipped (a field named after
                // `except` is an error, from `operand`).
                if self.obs.iter().any(|(n, ob)| n == obj && ob.recorded(field) && !ob.knows(field)) {
                    return true;
                }
                let via_gup = self.obs.iter().any(|(n, ob)| n == obj && ob.via_gup);
                !if via_gup { self.backend.observes_through_gup(field) } else { self.backend.observes(field) }
            })
        };
        if hidden(lhs) || hidden(rhs) {
            return Ok(format!("skipped: the {} backend cannot observe that field", self.backend.name()));
        }
        let (a, an) = self.operand(lhs)?;
        let (b, bn) = self.operand(rhs)?;
        let counters = self.backend.counters();
        for (obj, field) in lhs.fields().into_iter().chain(rhs.fields()) {
            let value = counters.iter().find(|(n, _)| obj == "stat" && n == field).map(|&(_, v)| v);
            if let Some(why) = value.and_then(|v| below_zero(field, v)) {
                self.notes.push(format!("line {line}: {field} {why}"));
            }
        }
        if op.holds(a, b) {
            Ok(format!("{an} {} {bn}", op.symbol()))
        } else {
            Err(format!("expectation failed: {an} {} {bn}", op.symbol()).into())
        }
    }

    /// The mapcount design whose answers this run expects and the release
    /// whose behaviour it follows. The design: the last `set mapcount`, else
    /// the design of the last `set kernel`'s era, else the backend's own
    /// (the model's default and Linux 6.15+ are mm-id, the guest's 6.1 is
    /// subpage), as the last `set rmap_id_stage` makes it answer. The
    /// release: the last `set kernel`, else the design's if one was set,
    /// else the backend's.
    pub(super) fn run_kind(&self) -> Run {
        let (mut design, mut kernel, mut stage) = (None, None, RmapIdStage::default());
        for (_, s) in &self.settings {
            match s {
                MachineSetting::Mapcount(d) => design = Some(*d),
                MachineSetting::Kernel(v) => kernel = Some(*v),
                MachineSetting::RmapIdStage(st) => stage = *st,
                _ => {}
            }
        }
        let release = kernel.or(design.map(Design::release)).unwrap_or_else(|| self.backend.release());
        let design = design.or(kernel.map(Design::of_release)).unwrap_or_else(|| Design::of_release(release));
        Run { design: stage.answers_as(design), release, stage }
    }

    /// Keeps an observation under `name`; returns a one-line summary.
    pub(super) fn record(&mut self, name: &str, o: Observation) -> String {
        let summary = format!("{name}: {}", o.summary());
        self.obs.retain(|(n, _)| n != name);
        self.obs.push((name.to_string(), o));
        summary
    }

    /// The value of an operand and a description of it for messages.
    fn operand(&self, o: &Operand) -> Result<(u64, String), String> {
        match o {
            Operand::Sum { lhs, minus, rhs } => {
                let ((a, an), (b, bn)) = (self.operand(lhs)?, self.operand(rhs)?);
                let v = if *minus { a.checked_sub(b) } else { a.checked_add(b) };
                let sign = if *minus { '-' } else { '+' };
                let v = v.ok_or_else(|| format!("{an} {sign} {bn} is out of range"))?;
                Ok((v, format!("{an} {sign} {bn}")))
            }
            Operand::Num(n) => Ok((*n, n.to_string())),
            Operand::Bool(b) => Ok((*b as u64, b.to_string())),
            Operand::Field { obj, field } if obj == "stat" => {
                let counters = self.backend.counters();
                let v = counters.iter().find(|(n, _)| n == field).map(|(_, v)| *v).ok_or_else(|| {
                    let hint = did_you_mean(field, counters.iter().map(|(n, _)| n.as_str()));
                    format!("no counter '{field}' on the {} backend{hint}", self.backend.name())
                })?;
                let anomaly = below_zero(field, v).map_or(String::new(), |n| format!(", {n}"));
                Ok((v, format!("stat.{field} (= {v}{anomaly})")))
            }
            Operand::Field { obj, field } => {
                let (_, ob) = self.obs.iter().find(|(n, _)| n == obj).ok_or_else(|| {
                    let made: Vec<&str> = self.obs.iter().map(|(n, _)| n.as_str()).collect();
                    let hint = did_you_mean(obj, made.iter().copied());
                    let made = if made.is_empty() { "none yet".to_string() } else { made.join(", ") };
                    format!("no observation named '{obj}'{hint} (made so far: {made}; 'stat.NAME' reads a counter)")
                })?;
                let v = ob.field(field).ok_or_else(|| {
                    let hint = did_you_mean(field, Observation::field_names());
                    format!(
                        "no field '{field}'{hint} (fields: {})",
                        Observation::field_names().collect::<Vec<_>>().join(", ")
                    )
                })?;
                if !ob.recorded(field) {
                    return Err(format!("'{obj}' does not record '{field}' (it is named after 'except')"));
                }
                let shown = if field == "frame" { format!("{v:#x}") } else { v.to_string() };
                Ok((v, format!("{obj}.{field} (= {shown})")))
            }
        }
    }
}

/// What a reader should know when the counter `field` reads `v`: a
/// reservation count below zero is Linux's own accounting (the restore of
/// a reservation whose page a child still maps is counted only when the
/// page is freed; see `foliomm::internals::memory::hugetlb_resv`), which
/// the model reproduces, not a model bug.
pub(super) fn below_zero(field: &str, v: u64) -> Option<String> {
    (field.ends_with("_rsvd") && v >= 1 << 63).then(|| {
        format!("{} below zero: a Linux accounting anomaly the model reproduces, not a model bug", v.wrapping_neg())
    })
}
