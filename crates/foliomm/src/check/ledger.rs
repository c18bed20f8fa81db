//! The checker's ledger: what the page tables cannot tell, kept by hearing
//! the kernel's events ([`crate::kernel::Observer`]). GUP references per
//! folio (Linux keeps no such table: the refcount alone carries them), and,
//! when the precision report is on, its [`Shadow`] of mappings per MM, which
//! judges every sharing decision and answer.

use std::collections::HashMap;

use super::precision::{self, Shadow};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::{Consumer, Kernel, Observer};
use crate::mapcount::MmId;
use crate::sync::Mutex;

/// GUP references per folio and the optional precision shadow.
#[derive(Default)]
pub struct Ledger {
    /// (FOLL_PIN, FOLL_GET) references per folio head.
    gups: Mutex<HashMap<Pfn, (u32, u32)>>,
    /// Mappings per folio and MM, when the precision report is on.
    pub shadow: Option<Shadow>,
}

impl Ledger {
    /// A ledger, with the precision shadow if `precision`.
    pub fn new(precision: bool) -> Ledger {
        Ledger { gups: Mutex::default(), shadow: precision.then(Shadow::default) }
    }

    /// (FOLL_PIN, FOLL_GET) references held on the folio headed by `head`.
    pub fn gups_of(&self, head: Pfn) -> (u32, u32) {
        self.gups.lock().unwrap().get(&head).copied().unwrap_or((0, 0))
    }

    /// The heads of the folios GUP references are held on.
    pub fn gupped(&self) -> Vec<Pfn> {
        self.gups.lock().unwrap().keys().copied().collect()
    }
}

impl Observer for Ledger {
    fn mapped(&self, head: Pfn, mm: MmId, delta: i64) {
        if let Some(shadow) = &self.shadow {
            shadow.note(head, mm, delta);
        }
    }

    fn gup(&self, head: Pfn, foll_pin: bool, delta: i32) {
        let mut gups = self.gups.lock().unwrap();
        let e = gups.entry(head).or_insert((0, 0));
        let n = if foll_pin { &mut e.0 } else { &mut e.1 };
        *n = n.checked_add_signed(delta).expect("released more GUP references than taken");
        if *e == (0, 0) {
            gups.remove(&head);
        }
    }

    fn cow_decided(&self, k: &Kernel, f: Folio, mm: MmId, reused: bool) {
        if let Some(shadow) = &self.shadow {
            precision::judge_cow(k, shadow, f, mm, reused);
        }
    }

    fn shared_decided(&self, k: &Kernel, consumer: Consumer, f: Folio, shared: bool) {
        if let Some(shadow) = &self.shadow {
            precision::judge_decision(k, shadow, consumer, f, shared);
        }
    }

    fn shared_answered(&self, k: &Kernel, f: Folio, maybe_shared: bool, likely_shared: bool) {
        if let Some(shadow) = &self.shadow {
            precision::judge_answer(k, shadow, f, maybe_shared);
            precision::judge_guess(k, shadow, f, likely_shared);
        }
    }
}
