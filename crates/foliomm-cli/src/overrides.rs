//! The command line's overrides of scenario settings: one flag per setting
//! of the language's table (`foliomm_scenario::lang::settings`), named
//! after it (`--vma-lock` for `set vma_lock`), documented by it, its value
//! read by the scenario parser as the `set` line it stands for. Nothing
//! here names a setting.

use clap::{Arg, ArgAction, ArgMatches, Args, Command, FromArgMatches};
use foliomm_scenario::lang::settings::{Setting, SETTINGS};
use foliomm_scenario::lang::{Cmd, MachineSetting, Step};

/// `set` lines given as flags: `--mapcount mm-id` is `set mapcount mm-id`;
/// `--mapcount all` is one axis of a design matrix, a line per design.
#[derive(Clone, Debug, Default)]
pub struct SettingFlags {
    /// The lines, parsed, in the table's order.
    pub lines: Vec<Step>,
    /// The flags given `all`: each its setting's lines, one per value.
    pub axes: Vec<Vec<Step>>,
}

/// One configuration of a design matrix: its name (the axes' values,
/// `subpage vma-rwsem`) and its flags.
pub struct Configuration {
    pub name: String,
    pub flags: SettingFlags,
}

/// The settings that get a flag: all but `check` (`run --check` is the
/// checker's flag).
fn flagged() -> impl Iterator<Item = &'static Setting> {
    SETTINGS.iter().filter(|s| s.name != "check")
}

/// The `set` lines `--NAME VALUE` stands for: the one it names, or with
/// `all` one for each value of a setting that lists them.
fn parse_flag(setting: &Setting, value: &str) -> Result<Vec<Step>, String> {
    match (value, setting.every) {
        ("all", Some(every)) => every().iter().map(|v| parse(setting.name, v)).collect(),
        _ => parse(setting.name, value).map(|step| vec![step]),
    }
}

/// The value of a flag's line (`subpage` of `set mapcount subpage`).
fn value_of(step: &Step) -> &str {
    step.text.split_whitespace().nth(4).unwrap_or(&step.text)
}

/// The `set` line `--NAME VALUE` stands for, parsed; the parser's message
/// if it is not one.
fn parse(name: &str, value: &str) -> Result<Step, String> {
    let line = format!("set {name} {value}");
    match foliomm_scenario::parse(&line) {
        Ok(mut steps) if steps.len() == 1 => {
            let mut step = steps.remove(0);
            (step.line, step.text) = (0, format!("(command line) {line}"));
            Ok(step)
        }
        Ok(_) => Err(format!("'{value}' is not one setting's value")),
        Err(e) => Err(e.msg),
    }
}

impl SettingFlags {
    /// Every configuration of the matrix the flags span (one, unnamed,
    /// when no flag was given `all`), the first axis varying slowest.
    pub fn configurations(&self) -> Vec<Configuration> {
        let mut out = vec![Configuration {
            name: String::new(),
            flags: SettingFlags { lines: self.lines.clone(), axes: Vec::new() },
        }];
        for axis in &self.axes {
            out = out
                .into_iter()
                .flat_map(|c| {
                    axis.iter().map(move |step| {
                        let mut lines = c.flags.lines.clone();
                        lines.push(step.clone());
                        let name = format!("{} {}", c.name, value_of(step)).trim().to_string();
                        Configuration { name, flags: SettingFlags { lines, axes: Vec::new() } }
                    })
                })
                .collect();
        }
        out
    }

    /// The settings the matrix varies (`mapcount`), in its order.
    pub fn axis_names(&self) -> Vec<&str> {
        self.axes.iter().filter_map(|a| a.first()).map(|s| s.text.split_whitespace().nth(3).unwrap_or("?")).collect()
    }

    /// Whether a flag set the kernel release.
    pub fn sets_kernel(&self) -> bool {
        self.lines.iter().any(|s| matches!(s.cmd, Cmd::SetMachine(MachineSetting::Kernel(_))))
    }

    /// The lines with `extra` first (a flag given wins over it).
    pub fn with(&self, extra: Option<Step>) -> SettingFlags {
        SettingFlags { lines: extra.into_iter().chain(self.lines.iter().cloned()).collect(), axes: self.axes.clone() }
    }

    /// Puts the lines into `steps` after the file's leading machine
    /// settings, before the step that builds the machine: they win over
    /// the file's own `set` lines.
    pub fn apply(&self, steps: &mut Vec<Step>) {
        let at = steps.iter().position(|s| !matches!(s.cmd, Cmd::SetMachine(_) | Cmd::SetCheck(_)));
        let at = at.unwrap_or(steps.len());
        steps.splice(at..at, self.lines.iter().cloned());
    }

    /// The line `set kernel V`, as a flag would give it.
    pub fn kernel(v: foliomm::internals::release::KernelVersion) -> Step {
        parse("kernel", &v.to_string()).expect("a modelled release parses")
    }
}

/// `text` with its first letter in upper case, as clap's help lines are.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

impl Args for SettingFlags {
    fn augment_args(cmd: Command) -> Command {
        flagged().fold(cmd, |cmd, s| {
            let (name, setting) = (s.name, *s);
            let all = if s.every.is_some() { "; 'all' runs one configuration per value" } else { "" };
            let value = s.syntax.trim_start_matches("set ").trim_start_matches(name).trim();
            let value = value.split(" |").next().unwrap_or(value).to_string();
            let action = if name == "debug" { ArgAction::Append } else { ArgAction::Set };
            cmd.arg(
                Arg::new(name)
                    .long(name.replace('_', "-"))
                    .value_name(value)
                    .help(format!("{}; overrides the file's `set {name}`{all}", capitalized(&s.describe())))
                    .action(action)
                    .value_parser(move |v: &str| parse_flag(&setting, v)),
            )
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for SettingFlags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let given = flagged().flat_map(|s| m.get_many::<Vec<Step>>(s.name).into_iter().flatten().cloned());
        let (mut lines, mut axes) = (Vec::new(), Vec::new());
        for steps in given {
            match steps.len() {
                1 => lines.extend(steps),
                _ => axes.push(steps),
            }
        }
        Ok(SettingFlags { lines, axes })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}
