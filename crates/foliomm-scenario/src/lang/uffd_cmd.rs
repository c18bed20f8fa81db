//! The userfaultfd commands a process runs: `NAME = userfaultfd [sigbus]`,
//! the ioctls (`uffd_register`, `uffd_unregister`, `uffd_copy`,
//! `uffd_zeropage`, `uffd_wp`) and the handler's rules (`on NAME ...`).

use foliomm::internals::mm_types::{vm, UffdReason};

use super::ast::{Cmd, ParseError};
use super::lexer::Line;
use super::uffd_step::{UffdStep, UffdStepCall};
use crate::op::UffdAction;

/// The registration modes by name, with their `VM_UFFD_*` flags.
pub const MODES: [(&str, u32); 3] = [("missing", vm::UFFD_MISSING), ("wp", vm::UFFD_WP), ("minor", vm::UFFD_MINOR)];

/// The verbs of the ioctls, after which the file's name comes.
pub(super) const VERBS: [&str; 8] =
    ["uffd_register", "uffd_unregister", "uffd_copy", "uffd_zeropage", "uffd_continue", "uffd_wp", "uffd_move", "on"];

/// `NAME = userfaultfd [sigbus]`, after `userfaultfd`.
pub(super) fn parse_userfaultfd(l: &mut Line, name: String) -> Result<Cmd, ParseError> {
    Ok(Cmd::Userfaultfd { name, sigbus: l.eat("sigbus") })
}

/// A userfaultfd step, after its verb (one of [`VERBS`]).
pub(super) fn parse_uffd(l: &mut Line, verb: &str) -> Result<Cmd, ParseError> {
    let uffd = l.ident("a userfaultfd (made by 'NAME = userfaultfd')")?;
    let call = match verb {
        "uffd_register" => {
            let place = l.place()?;
            let mut modes = 0;
            while let Some(t) = l.peek() {
                match MODES.iter().find(|(n, _)| *n == t) {
                    Some(&(_, m)) => modes |= m,
                    None => return l.err(l.col(), format!("expected a mode (missing, wp or minor), found '{t}'")),
                }
                l.pos += 1;
            }
            if modes == 0 {
                return l.err(l.col(), "expected at least one mode after the place: missing, wp or minor");
            }
            UffdStepCall::Register { place, modes }
        }
        "uffd_unregister" => UffdStepCall::Unregister(l.place()?),
        "uffd_copy" => {
            let place = l.place()?;
            let col = l.col();
            let Some(val) = l.value()? else {
                return l.err(col, "expected '= BYTE' after the place: the bytes the copied pages hold");
            };
            UffdStepCall::Fill { place, val: Some(val), wp: l.eat("wp") }
        }
        "uffd_zeropage" => UffdStepCall::Fill { place: l.place()?, val: None, wp: false },
        "uffd_continue" => UffdStepCall::Continue { place: l.place()?, wp: l.eat("wp") },
        "uffd_move" => {
            let src = l.place()?;
            let col = l.col();
            if !l.eat("to") {
                return l.err(col, "expected 'to DESTINATION' after the source (uffd_move NAME SRC to DST)");
            }
            UffdStepCall::Move { src, dst: l.place()?, holes: l.eat("holes") }
        }
        "uffd_wp" => {
            let place = l.place()?;
            let col = l.col();
            let protect = match l.next("on or off")? {
                "on" => true,
                "off" => false,
                t => return l.err(col, format!("expected on or off, found '{t}'")),
            };
            UffdStepCall::WriteProtect { place, protect }
        }
        _ => parse_rule(l)?,
    };
    Ok(Cmd::Uffd(UffdStep { uffd, call }))
}

/// `missing copy BYTE`, `missing zeropage`, `wp unprotect` or `minor
/// continue`, after `on NAME`.
fn parse_rule(l: &mut Line) -> Result<UffdStepCall, ParseError> {
    const RULES: &str = "missing copy BYTE, missing zeropage, wp unprotect or minor continue";
    let col = l.col();
    let (reason, action) = match (l.next(RULES)?, l.next(RULES)?) {
        ("missing", "copy") => {
            let col = l.col();
            let t = l.next("a byte value")?;
            match super::lexer::parse_size(t).filter(|&v| v <= 255) {
                Some(v) => (UffdReason::Missing, UffdAction::Copy(v as u8)),
                None => return l.err(col, format!("expected a byte value 0..=255, found '{t}'")),
            }
        }
        ("missing", "zeropage") => (UffdReason::Missing, UffdAction::ZeroPage),
        ("wp", "unprotect") => (UffdReason::WriteProtect, UffdAction::Unprotect),
        ("minor", "continue") => (UffdReason::Minor, UffdAction::Continue),
        (a, b) => return l.err(col, format!("expected {RULES}, found '{a} {b}'")),
    };
    Ok(UffdStepCall::On { reason, action })
}
