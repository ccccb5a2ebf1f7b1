//! Declared flags: llama.cpp flags that this program accepts without acting on them, or refuses
//! because the feature they ask for is not built, written as tables (one per concern, in the
//! sibling modules) rather than as struct fields no code would read. This module turns a table
//! entry into clap arguments (names, llama.cpp's single-dash forms, environment variable, value
//! check, help line) and, after parsing, refuses the entries that must be refused, in one line
//! naming the missing feature. Flags the program acts on are typed fields of [`super::Cli`].

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};

/// One llama.cpp flag handled by a table.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// Long names without the dashes; the first is the flag's id.
    pub long: &'static [&'static str],
    /// llama.cpp's single-dash forms, dash included (`-nkvo`, `-C`).
    pub short: &'static [&'static str],
    pub takes: Takes,
    /// The `LLAMA_ARG_*` variable that sets it when the command line does not.
    pub env: Option<&'static str>,
    pub effect: Effect,
}

/// A switch entry.
pub const fn switch(
    long: &'static [&'static str],
    short: &'static [&'static str],
    env: Option<&'static str>,
    effect: Effect,
) -> Flag {
    Flag {
        long,
        short,
        takes: Takes::Nothing,
        env,
        effect,
    }
}

/// An entry taking one value named `name`.
pub const fn valued(
    long: &'static [&'static str],
    short: &'static [&'static str],
    name: &'static str,
    check: Check,
    env: Option<&'static str>,
    effect: Effect,
) -> Flag {
    Flag {
        long,
        short,
        takes: Takes::Value(name, check),
        env,
        effect,
    }
}

/// What follows a flag on the command line.
#[derive(Clone, Copy, Debug)]
pub enum Takes {
    /// Nothing: a switch.
    Nothing,
    /// One value, checked as llama.cpp checks it.
    Value(&'static str, Check),
    /// An optional value (`-fit [on|off]`): `default` when none is given.
    Optional(&'static str, Check, &'static str),
    /// Several values (`--control-vector-layer-range START END`).
    Values(&'static str, usize),
}

/// How a value is checked (the checks llama.cpp makes when it parses the flag).
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// Any text.
    Text,
    /// An integer.
    Int,
    /// A number.
    Float,
    /// One of these words.
    OneOf(&'static [&'static str]),
    /// A CPU mask: hexadecimal digits, with an optional 0x.
    Mask,
    /// A CPU range `lo-hi` (either end may be left out).
    Range,
    /// A comma-separated list of numbers.
    Floats,
}

impl Check {
    fn validate(self, v: &str) -> Result<String, String> {
        let ok = match self {
            Check::Text => true,
            Check::Int => v.trim().parse::<i64>().is_ok(),
            Check::Float => v.trim().parse::<f64>().is_ok_and(f64::is_finite),
            Check::OneOf(words) => words.contains(&v),
            Check::Mask => {
                let h = v.strip_prefix("0x").unwrap_or(v);
                h.chars().all(|c| c.is_ascii_hexdigit())
            }
            Check::Range => v.split_once('-').is_some_and(|(lo, hi)| {
                [lo, hi]
                    .iter()
                    .all(|s| s.is_empty() || s.parse::<u32>().is_ok())
            }),
            Check::Floats => v
                .split(',')
                .all(|s| s.trim().parse::<f64>().is_ok_and(f64::is_finite)),
        };
        if ok {
            Ok(v.to_string())
        } else {
            Err(match self {
                Check::Int => "expected an integer".to_string(),
                Check::Float => "expected a number".to_string(),
                Check::OneOf(words) => format!("expected one of {}", words.join(", ")),
                Check::Mask => "expected a hexadecimal CPU mask".to_string(),
                Check::Range => "expected a CPU range lo-hi".to_string(),
                Check::Floats => "expected comma-separated numbers".to_string(),
                Check::Text => unreachable!("text is always valid"),
            })
        }
    }
}

/// What giving the flag does here.
#[derive(Clone, Copy, Debug)]
pub enum Effect {
    /// Accepted and changes nothing here, for the reason given.
    NoOp(&'static str),
    /// Refused: the feature named is not built.
    Refused(&'static str),
    /// Accepted when the value asks for what this program does anyway (`accept` says which
    /// values: the reason is the first text), refused otherwise (the feature is the second).
    NoOpIf(fn(&str) -> bool, &'static str, &'static str),
}

impl Flag {
    fn id(&self) -> &'static str {
        self.long[0]
    }

    fn help(&self) -> String {
        match self.effect {
            Effect::NoOp(why) => format!("llama.cpp flag, accepted; no effect here: {why}"),
            Effect::Refused(feature) => {
                format!("llama.cpp flag, refused: this build does not support {feature}")
            }
            Effect::NoOpIf(_, why, feature) => format!(
                "llama.cpp flag; no effect for {why}; other values are refused (this build does not support {feature})"
            ),
        }
    }

    /// The clap argument.
    pub fn arg(&self) -> Arg {
        let mut a = Arg::new(self.id())
            .long(self.id())
            .help(self.help())
            .help_heading("llama.cpp flags accepted or refused");
        for alias in &self.long[1..] {
            a = a.visible_alias(*alias);
        }
        if let Some(c) = self.letter() {
            a = a.short(c);
        }
        a = match self.takes {
            Takes::Nothing => a.action(ArgAction::SetTrue),
            Takes::Value(name, check) => a
                .value_name(name)
                .allow_negative_numbers(true)
                .value_parser(move |v: &str| check.validate(v)),
            Takes::Optional(name, check, default) => a
                .value_name(name)
                .num_args(0..=1)
                .default_missing_value(default)
                .value_parser(move |v: &str| check.validate(v)),
            Takes::Values(name, n) => a.value_name(name).num_args(n).allow_negative_numbers(true),
        };
        // A switch's variable is read by `check` with llama.cpp's truthy/falsey words.
        if let (Some(env), false) = (self.env, matches!(self.takes, Takes::Nothing)) {
            a = a.env(env);
        }
        a
    }

    /// A single-letter short form (`-C`), which clap parses itself.
    fn letter(&self) -> Option<char> {
        self.short.iter().find_map(|s| {
            let mut c = s.strip_prefix('-')?.chars();
            match (c.next(), c.next()) {
                (Some(l), None) => Some(l),
                _ => None,
            }
        })
    }

    /// The multi-letter single-dash forms and the long flag each stands for.
    pub fn multi_letter(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        self.short
            .iter()
            .filter(|s| s.len() > 2)
            .map(|s| (*s, self.id()))
    }

    /// Whether the flag was given: on the command line, or by its variable.
    fn given(&self, m: &ArgMatches) -> Result<Option<String>, String> {
        match self.takes {
            Takes::Nothing => {
                if m.value_source(self.id()) == Some(ValueSource::CommandLine) {
                    return Ok(Some(String::new()));
                }
                // The negative form on the command line wins over the variable.
                let negative = format!("no-{}", self.id());
                if m.value_source(&negative) == Some(ValueSource::CommandLine) {
                    return Ok(None);
                }
                match self.env.map(env_switch).transpose()? {
                    Some(Some(true)) => Ok(Some(String::new())),
                    _ => Ok(None),
                }
            }
            Takes::Values(..) => Ok(m
                .get_many::<String>(self.id())
                .map(|v| v.cloned().collect::<Vec<_>>().join(" "))),
            _ => Ok(m.get_one::<String>(self.id()).cloned()),
        }
    }

    /// The flag as the user gave it: `--name`, and the variable when that is where it came from.
    fn display(&self, m: &ArgMatches, value: &str) -> String {
        let from_env = match self.takes {
            Takes::Nothing => m.value_source(self.id()) != Some(ValueSource::CommandLine),
            _ => m.value_source(self.id()) == Some(ValueSource::EnvVariable),
        };
        let flag = match value {
            "" => format!("--{}", self.id()),
            v => format!("--{} {v}", self.id()),
        };
        match (from_env, self.env) {
            (true, Some(env)) => format!("{flag} (from {env})"),
            _ => flag,
        }
    }

    /// Refuses the flag when it was given and its feature is not built.
    fn check(&self, m: &ArgMatches) -> Result<(), String> {
        let Some(value) = self.given(m)? else {
            return Ok(());
        };
        match self.effect {
            Effect::NoOp(_) => Ok(()),
            Effect::Refused(feature) => Err(format!(
                "{}: this build does not support {feature}",
                self.display(m, "")
            )),
            Effect::NoOpIf(accept, _, feature) => {
                if accept(&value) {
                    Ok(())
                } else {
                    Err(format!(
                        "{}: this build does not support {feature}",
                        self.display(m, &value)
                    ))
                }
            }
        }
    }
}

/// Reads a switch's environment variable as llama.cpp does: `1`, `true`, `on`, `enabled` turn
/// it on, `0`, `false`, `off`, `disabled` off; anything else is an error naming the variable.
pub fn env_switch(name: &str) -> Result<Option<bool>, String> {
    let Some(v) = std::env::var_os(name) else {
        return Ok(None);
    };
    let v = v.to_string_lossy().to_ascii_lowercase();
    match v.as_str() {
        "1" | "true" | "on" | "enabled" | "yes" => Ok(Some(true)),
        "0" | "false" | "off" | "disabled" | "no" => Ok(Some(false)),
        other => Err(format!(
            "{name}={other}: expected 1, true, on or enabled, or 0, false, off or disabled"
        )),
    }
}

/// A switch pair's final state: the later of `on`/`off` on the command line (clap keeps only
/// the later), else the variable `env`, else `default`.
pub fn pair(m: &ArgMatches, on: &str, off: &str, env: &str, default: bool) -> Result<bool, String> {
    let given = |id: &str| m.value_source(id) == Some(ValueSource::CommandLine) && m.get_flag(id);
    if given(on) {
        return Ok(true);
    }
    if given(off) {
        return Ok(false);
    }
    Ok(env_switch(env)?.unwrap_or(default))
}

/// Adds the arguments of `tables` to `cmd`.
pub fn add_args(mut cmd: Command, tables: &[&[Flag]]) -> Command {
    for f in tables.iter().flat_map(|t| t.iter()) {
        cmd = cmd.arg(f.arg());
    }
    cmd
}

/// Refuses the first flag of `tables` that asks for a feature not built.
pub fn check(m: &ArgMatches, tables: &[&[Flag]]) -> Result<(), String> {
    for f in tables.iter().flat_map(|t| t.iter()) {
        f.check(m)?;
    }
    Ok(())
}

/// Accepts a value that parses as a number equal to `x`.
pub fn equals(v: &str, x: f64) -> bool {
    v.trim().parse::<f64>().is_ok_and(|y| y == x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks() {
        assert!(Check::Mask.validate("0xff").is_ok());
        assert!(Check::Mask.validate("fg").is_err());
        assert!(Check::Range.validate("0-3").is_ok());
        assert!(Check::Range.validate("3").is_err());
        assert!(Check::Floats.validate("3,1").is_ok());
        assert!(Check::Floats.validate("3,x").is_err());
        assert!(Check::Int.validate("-1").is_ok());
        assert!(Check::Int.validate("1.5").is_err());
        assert!(Check::OneOf(&["on", "off"]).validate("auto").is_err());
    }
}
