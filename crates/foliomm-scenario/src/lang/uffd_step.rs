//! A userfaultfd step as the parser makes it ([`super::uffd_cmd`] parses
//! it).

use foliomm::internals::mm_types::UffdReason;

use super::place::Place;
use crate::op::UffdAction;

/// One userfaultfd step: the file by its name, and what is asked of it.
#[derive(Debug, Clone, PartialEq)]
pub struct UffdStep {
    pub uffd: String,
    pub call: UffdStepCall,
}

/// What a userfaultfd step asks, with places still by name.
#[derive(Debug, Clone, PartialEq)]
pub enum UffdStepCall {
    /// `uffd_register NAME PLACE MODE...` (`missing`, `wp`, `minor`).
    Register { place: Place, modes: u32 },
    /// `uffd_unregister NAME PLACE`.
    Unregister(Place),
    /// `uffd_copy NAME PLACE = BYTE [wp]`, or (`val` `None`)
    /// `uffd_zeropage NAME PLACE`.
    Fill { place: Place, val: Option<u8>, wp: bool },
    /// `uffd_continue NAME PLACE [wp]`.
    Continue { place: Place, wp: bool },
    /// `uffd_wp NAME PLACE on|off`.
    WriteProtect { place: Place, protect: bool },
    /// `uffd_move NAME SRC to DST [holes]`.
    Move { src: Place, dst: Place, holes: bool },
    /// `on NAME missing copy BYTE | missing zeropage | wp unprotect |
    /// minor continue`.
    On { reason: UffdReason, action: UffdAction },
}
