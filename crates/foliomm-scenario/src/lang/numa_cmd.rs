//! The NUMA commands a process runs: `move_pages` and `mbind`.

use foliomm::internals::mm::mempolicy::{MPOL_MF_MOVE, MPOL_MF_MOVE_ALL, MPOL_MF_STRICT};

use super::ast::{Cmd, MbindStep, MovePagesStep, Only, ParseError};
use super::lexer::Line;

/// `move_pages PLACE [to NODE] [all] [unmoved N] [status [ONLY] S...]...`,
/// after the verb. A status is a node, an errno name (`EACCES`), or `-`
/// for one left unwritten, each repeated with `*N` (`0*512`); a list
/// marked `[ONLY]` (designs or releases, as `expect [ONLY]`) holds where
/// it matches, the first that does.
pub(super) fn parse_move_pages(l: &mut Line) -> Result<Cmd, ParseError> {
    let place = l.place()?;
    let mut node = None;
    if l.eat("to") {
        let col = l.col();
        let t = l.next("a node")?;
        node = Some(t.parse::<i32>().or_else(|_| l.err(col, format!("expected a node number, found '{t}'")))?);
    }
    let all = l.eat("all");
    let unmoved = if l.eat("unmoved") { l.size("a number of pages")? } else { 0 };
    let mut status = Vec::new();
    while l.eat("status") {
        let mut only = Only::default();
        if let Some(t) = l.peek().filter(|t| t.starts_with('[')) {
            let col = l.col();
            l.pos += 1;
            let text = t.strip_prefix('[').filter(|r| r.ends_with(']'));
            let parsed = text.ok_or_else(|| "expected a list without spaces, like [<6.10]".to_string());
            only = parsed.and_then(Only::parse_list).or_else(|msg| l.err(col, msg))?;
        }
        let mut list = Vec::new();
        while let Some(t) = l.peek().filter(|&t| t != "status") {
            let col = l.col();
            l.pos += 1;
            let (what, times) = match t.split_once('*') {
                Some((w, n)) => match n.parse::<usize>() {
                    Ok(n) if n > 0 => (w, n),
                    _ => return l.err(col, format!("expected a repeat count after '*', found '{n}'")),
                },
                None => (t, 1),
            };
            let one = match what {
                "-" => None,
                w => match (w.parse::<i32>(), foliomm::Errno::from_name(w)) {
                    (Ok(n), _) if n >= 0 => Some(n),
                    (_, Some(e)) => Some(-e.number()),
                    _ => {
                        let want = "a node, an errno name (EACCES, EBUSY, ENOENT, EFAULT) or '-'";
                        return l.err(col, format!("expected {want}, found '{w}'"));
                    }
                },
            };
            list.extend(std::iter::repeat_n(one, times));
        }
        if list.is_empty() {
            return l.err(l.col(), "expected at least one status after 'status'");
        }
        status.push((only, list));
    }
    Ok(Cmd::MovePages(MovePagesStep { place, node, all, unmoved, status }))
}

/// The `MPOL_*` modes by name, with their numbers.
pub const MODES: [(&str, u32); 4] = [("default", 0), ("preferred", 1), ("bind", 2), ("interleave", 3)];

/// `mbind PLACE MODE [NODES] [move | move_all] [strict]`, after the verb:
/// NODES a list of nodes and ranges (`1`, `0,1`, `0-3`).
pub(super) fn parse_mbind(l: &mut Line) -> Result<Cmd, ParseError> {
    let place = l.place()?;
    let col = l.col();
    let m = l.next("a policy mode (default, preferred, bind, interleave)")?;
    let Some(&(_, mode)) = MODES.iter().find(|(n, _)| *n == m) else {
        return l.err(col, format!("expected a policy mode (default, preferred, bind, interleave), found '{m}'"));
    };
    let mut nodes = 0u64;
    if let Some(t) = l.peek().filter(|t| t.starts_with(|c: char| c.is_ascii_digit())) {
        let col = l.col();
        l.pos += 1;
        for part in t.split(',') {
            let (a, b) = part.split_once('-').unwrap_or((part, part));
            match (a.parse::<u32>(), b.parse::<u32>()) {
                (Ok(a), Ok(b)) if a <= b && b < 64 => (a..=b).for_each(|n| nodes |= 1 << n),
                _ => return l.err(col, format!("expected nodes such as 1, 0,1 or 0-3 (below 64), found '{t}'")),
            }
        }
    }
    let mut flags = 0;
    while let Some(t) = l.peek() {
        flags |= match t {
            "move" => MPOL_MF_MOVE,
            "move_all" => MPOL_MF_MOVE_ALL,
            "strict" => MPOL_MF_STRICT,
            _ => return l.err(l.col(), format!("expected move, move_all or strict, found '{t}'")),
        };
        l.pos += 1;
    }
    Ok(Cmd::Mbind(MbindStep { place, mode, nodes, flags }))
}
