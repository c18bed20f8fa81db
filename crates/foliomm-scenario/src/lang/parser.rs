//! The parser: each line's tokens into a [`Step`].

use foliomm::Errno;

use super::ast::{Cmd, CmpOp, Only, ParseError, Step};
use super::daemon::Daemon;
use super::lexer::{is_ident, tokenize, Line};
use super::proc_cmd::parse_proc_cmd;
use super::set_cmd::parse_set;

/// The most steps `repeat` blocks may unroll to.
const MAX_STEPS: usize = 1 << 20;

/// A block open at some line: `measure` (kept as steps for the
/// interpreter), `repeat` (unrolled here at its `end`) or `parallel` (its
/// steps gathered into one step at its `end`).
enum Open {
    Measure,
    Repeat { times: u64, first: usize, line: usize },
    Parallel { first: usize, line: usize },
}

/// Parses a whole scenario file, unrolling `repeat N` ... `end` blocks and
/// gathering each `parallel` ... `end` block into one step.
pub fn parse(src: &str) -> Result<Vec<Step>, ParseError> {
    let mut steps = Vec::new();
    let mut open = Vec::new();
    for (i, raw) in src.lines().enumerate() {
        let text = raw.split('#').next().unwrap_or("");
        let toks = tokenize(text);
        if toks.is_empty() {
            continue;
        }
        let mut l = Line { line: i + 1, toks, pos: 0, end_col: text.trim_end().len() + 1 };
        let step = parse_line(&mut l, text.trim())?;
        let in_parallel = open.iter().any(|o| matches!(o, Open::Parallel { .. }));
        if in_parallel && step.proc.is_none() && !matches!(step.cmd, Cmd::End | Cmd::Repeat(_)) {
            return l.err(1, "a parallel block holds only process lines (P: or P.t:), repeat and end");
        }
        match (&step.cmd, open.last()) {
            (Cmd::Repeat(times), _) => open.push(Open::Repeat { times: *times, first: steps.len(), line: l.line }),
            (Cmd::Parallel(_), _) => open.push(Open::Parallel { first: steps.len(), line: l.line }),
            (Cmd::End, Some(Open::Parallel { first, line })) => {
                let body: Vec<Step> = steps.drain(*first..).collect();
                if body.is_empty() {
                    return l.err(1, "an empty parallel block");
                }
                let line = *line;
                steps.push(Step {
                    line,
                    text: "parallel".into(),
                    proc: None,
                    thread: None,
                    cmd: Cmd::Parallel(body),
                    fails: None,
                    fails_only: Only::default(),
                });
                open.pop();
            }
            (Cmd::End, Some(Open::Repeat { times, first, .. })) => {
                let body = steps[*first..].to_vec();
                if body.len().saturating_mul(*times as usize) > MAX_STEPS {
                    return l.err(1, format!("repeat blocks unroll to more than {MAX_STEPS} steps"));
                }
                for _ in 1..*times {
                    steps.extend(body.iter().cloned());
                }
                open.pop();
            }
            (cmd, _) => {
                match cmd {
                    Cmd::Measure(_) => open.push(Open::Measure),
                    Cmd::End => drop(open.pop()),
                    _ => {}
                }
                steps.push(step);
            }
        }
    }
    let unclosed = open.into_iter().find_map(|o| match o {
        Open::Repeat { line, .. } => Some((line, "repeat")),
        Open::Parallel { line, .. } => Some((line, "parallel block")),
        Open::Measure => None,
    });
    match unclosed {
        Some((line, what)) => Err(ParseError { line, col: 1, msg: format!("expected an 'end' closing this {what}") }),
        None => Ok(steps),
    }
}

fn parse_line(l: &mut Line, text: &str) -> Result<Step, ParseError> {
    let first = l.peek().unwrap();
    let (proc, thread) = match first.strip_suffix(':').map(|p| (p, p.split_once('.'))) {
        Some((p, None)) if is_ident(p) => (Some(p.to_string()), None),
        Some((_, Some((p, t)))) if is_ident(p) && is_ident(t) => (Some(p.to_string()), Some(t.to_string())),
        Some(_) => return l.err(1, format!("expected a process name or PROCESS.THREAD before ':', found '{first}'")),
        None => (None, None),
    };
    if proc.is_some() {
        l.pos += 1;
    }
    // A trailing "fails [ONLY] ERRNO".
    let (mut fails, mut fails_only) = (None, Only::default());
    let n = l.toks.len();
    let bracket = n >= 3 && l.toks[n - 3].text == "fails" && l.toks[n - 2].text.starts_with('[');
    if bracket {
        let t = &l.toks[n - 2];
        let text = t.text.strip_prefix('[').filter(|r| r.ends_with(']'));
        let only =
            text.ok_or_else(|| "expected a list without spaces, like [<6.7]".to_string()).and_then(Only::parse_list);
        fails_only = only.map_err(|msg| ParseError { line: l.line, col: t.col, msg })?;
    }
    if bracket || (n >= 2 && l.toks[n - 2].text == "fails") {
        let t = &l.toks[n - 1];
        fails = Some(Errno::from_name(t.text).ok_or_else(|| ParseError {
            line: l.line,
            col: t.col,
            msg: format!(
                "expected an error name (ENOMEM, EINVAL, EFAULT, EACCES, EBUSY, EEXIST, EPERM, ...), found '{}'",
                t.text
            ),
        })?);
        l.toks.truncate(if bracket { n - 3 } else { n - 2 });
    }
    let cmd = match proc {
        None => parse_global(l)?,
        Some(_) => parse_proc_cmd(l)?,
    };
    l.done()?;
    Ok(Step { line: l.line, text: text.to_string(), proc, thread, cmd, fails, fails_only })
}

fn parse_global(l: &mut Line) -> Result<Cmd, ParseError> {
    let col = l.col();
    match l.next("a command")? {
        "set" => parse_set(l),
        "measure" => Ok(Cmd::Measure(l.ident("a name for the measurement")?)),
        "end" => Ok(Cmd::End),
        name @ ("khugepaged" | "ksmd") => {
            let daemon = Daemon::parse(name).expect("a daemon's name");
            let col = l.col();
            match l.peek().map(|_| l.size("a number of full scans")).transpose()? {
                None => Ok(Cmd::Scan(daemon, 1)),
                Some(n @ 1..=100) => Ok(Cmd::Scan(daemon, n as u32)),
                Some(n) => l.err(col, format!("expected 1 to 100 full scans, found {n}")),
            }
        }
        "parallel" => Ok(Cmd::Parallel(Vec::new())),
        "repeat" => {
            let col = l.col();
            match l.size("a repeat count")? {
                0 => l.err(col, "expected a repeat count of 1 or more, found 0".to_string()),
                n => Ok(Cmd::Repeat(n)),
            }
        }
        "expect" => {
            let mut only = Only::default();
            if let Some(list) = l.peek().and_then(|t| t.strip_prefix('[')) {
                let col = l.col();
                // `[a,b]` may be one token or several (`[a, b]`).
                let mut text = list.to_string();
                l.pos += 1;
                while !text.ends_with(']') {
                    text.push_str(l.next("a ']' closing the list of designs and releases")?);
                }
                only = match Only::parse_list(&text) {
                    Ok(o) => o,
                    Err(why) => return l.err(col, why),
                };
            }
            let lhs = l.expression()?;
            let col = l.col();
            let op = match l.next("a comparison (==, !=, <, <=, >, >=)")? {
                "==" => CmpOp::Eq,
                "!=" => CmpOp::Ne,
                "<" => CmpOp::Lt,
                "<=" => CmpOp::Le,
                ">" => CmpOp::Gt,
                ">=" => CmpOp::Ge,
                t => return l.err(col, format!("expected a comparison (==, !=, <, <=, >, >=), found '{t}'")),
            };
            Ok(Cmd::Expect { lhs, op, rhs: l.expression()?, only })
        }
        t => {
            let process = super::proc_cmd::is_command(t)
                .then(|| format!(": '{t}' is a process's command, write 'PROCESS: {t} ...'"));
            let hint =
                process.unwrap_or_else(|| super::suggest::did_you_mean(t, super::proc_cmd::GLOBAL.iter().copied()));
            l.err(
                col,
                format!("expected 'set', 'expect', 'khugepaged', 'measure', 'parallel', 'repeat', 'end' or 'NAME:' (a process), found '{t}'{hint}"),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::{Place, Tunable};
    use foliomm::internals::folio::thp::ThpMode;
    use foliomm::internals::mm_types::Prot;

    #[test]
    fn parses_the_design_example() {
        let src = "set thp 2048K=inherit enabled=madvise\nP: a = mmap 4M anon rw\nP: madvise a hugepage\nP: mprotect a[0..4K] r\nP: fork C\nC: exit\nP: observe a[20K] as before\nexpect after.frame == before.frame\n";
        let steps = parse(src).unwrap();
        assert_eq!(steps.len(), 8);
        let thp = Tunable::Thp { enabled: Some(ThpMode::Madvise), sizes: vec![(9, ThpMode::Inherit)] };
        assert_eq!(steps[0].cmd, Cmd::Tune(thp));
        assert_eq!(steps[3].cmd, Cmd::Mprotect(Place { map: "a".into(), range: Some((0, 4096)) }, Prot(1)));
        assert_eq!(
            steps[6].cmd,
            Cmd::Observe {
                place: Place { map: "a".into(), range: Some((20480, 20481)) },
                name: "before".into(),
                except: vec![]
            }
        );
        let steps = parse("P: observe a as x except frame kpagecount\n").unwrap();
        assert!(matches!(&steps[0].cmd, Cmd::Observe { except, .. } if except == &["frame", "kpagecount"]));
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = parse("# ok\nP: a = mmap 4Q rw\n").unwrap_err();
        assert_eq!((e.line, e.col), (2, 13));
        assert!(e.msg.contains("expected a length"), "{}", e.msg);
        let e = parse("P: madvise a sideways\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 14));
        let e = parse("P: write a fails ENOPE\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 18));
        let e = parse("expect a.rss_kb == b.rss_kb + \n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 30), "{e}");
        let e = parse("expect a.rss_kb + + 4 == 8\n").unwrap_err();
        assert_eq!(e.col, 19, "{e}");
        let e = parse("P: munmap a[8K..4K]\n").unwrap_err();
        assert!(e.msg.contains("empty range"));
        let e = parse("P: observe a\n").unwrap_err();
        assert_eq!(e.col, 13, "{e}");
        let e = parse("P: observe a as x except frame franme\n").unwrap_err();
        assert_eq!(e.col, 32, "{e}");
        assert!(e.msg.contains("expected an observation field"), "{e}");
        let e = parse("P: observe a as x except\n").unwrap_err();
        assert!(e.msg.contains("after 'except'"), "{e}");
        let e = parse("khugepaged 0\n").unwrap_err();
        assert_eq!(e.col, 12, "{e}");
        let e = parse("set khugepaged max_ptes_none=512\n").unwrap_err();
        assert_eq!(e.col, 30, "{e}");
        assert!(e.msg.contains("from 0 to 511"), "{e}");
        let e = parse("set khugepaged max_pte_none=5\n").unwrap_err();
        assert!(e.msg.contains("max_ptes_none"), "{e}");
        let e = parse("P: madvise a collapsed\n").unwrap_err();
        assert!(e.msg.contains("collapse"), "{e}");
        for bad in ["set memory 2M\n", "set memory 2T\n", "set memory at least 0\n"] {
            let e = parse(bad).unwrap_err();
            assert!(e.msg.contains("from 4M to 1T"), "{bad}: {e}");
            assert_eq!(e.col, bad.rfind(' ').unwrap() + 2, "{bad}: {e}");
        }
        assert!(parse("set memory 1T\n").is_ok());
    }

    #[test]
    fn a_setting_prints_as_its_line() {
        for line in ["set memory 64M", "set memory at least 3G", "set max_map_count 6", "set memory 4194305"] {
            let step = &parse(line).unwrap()[0];
            let Cmd::SetMachine(s) = &step.cmd else { panic!("{line}") };
            assert_eq!(s.to_string(), line);
        }
    }

    #[test]
    fn a_thread_line_names_process_and_thread() {
        let s = &parse("P.t1: write a\n").unwrap()[0];
        assert_eq!((s.proc.as_deref(), s.thread.as_deref()), (Some("P"), Some("t1")));
        let s = &parse("P: write a\n").unwrap()[0];
        assert_eq!((s.proc.as_deref(), s.thread.as_deref()), (Some("P"), None));
        for bad in ["P.: write a\n", "P.t1.x: write a\n", ".t1: write a\n"] {
            let e = parse(bad).unwrap_err();
            assert_eq!((e.line, e.col), (1, 1), "{bad}");
            assert!(e.msg.contains("PROCESS.THREAD"), "{}", e.msg);
        }
    }

    #[test]
    fn repeat_unrolls_its_block_and_nests() {
        let src = "repeat 3\nP: write a\nrepeat 2\nP: read a\nend\nend\nmeasure m\nP: read a\nend\n";
        let steps = parse(src).unwrap();
        let lines: Vec<usize> = steps.iter().map(|s| s.line).collect();
        assert_eq!(lines, [2, 4, 4, 2, 4, 4, 2, 4, 4, 7, 8, 9]);
        let e = parse("P: write a\nrepeat 2\nP: read a\n").unwrap_err();
        assert_eq!((e.line, e.col), (2, 1), "{e}");
        let e = parse("repeat 0\nend\n").unwrap_err();
        assert_eq!((e.line, e.col), (1, 8), "{e}");
        let e = parse("repeat 1000000\nrepeat 1000000\nP: read a\nend\nend\n").unwrap_err();
        assert!(e.msg.contains("unroll"), "{e}");
    }

    #[test]
    fn trailing_fails_is_an_expected_error() {
        let s = &parse("P: write a fails ENOMEM\n").unwrap()[0];
        assert_eq!(s.fails, Some(Errno::ENOMEM));
    }
}
