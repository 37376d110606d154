//! Actions, the printed form of a schedule (`s0*12 d1 p0:7f00 i1`) and
//! its replay.

use super::{Explorer, Outcome};
use crate::hw::CpuId;
use crate::kernel::World;
use std::fmt;

/// One choice of the explorer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    /// CPU completes its posted step.
    Step(CpuId),
    /// The oldest pending broadcast TLBI reaches this CPU.
    Deliver(CpuId),
    /// Speculative walk and fill of a VA by a CPU.
    Speculate(CpuId, u64),
    /// The CPU takes its oldest pending IPI.
    Interrupt(CpuId),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Step(c) => write!(f, "s{c}"),
            Action::Deliver(t) => write!(f, "d{t}"),
            Action::Speculate(c, va) => write!(f, "p{c}:{va:x}"),
            Action::Interrupt(c) => write!(f, "i{c}"),
        }
    }
}

/// Formats a schedule compactly: repeated actions as `s0*12`.
pub fn format_schedule(s: &[Action]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let mut j = i + 1;
        while j < s.len() && s[j] == s[i] {
            j += 1;
        }
        if j - i > 1 {
            out.push(format!("{}*{}", s[i], j - i));
        } else {
            out.push(s[i].to_string());
        }
        i = j;
    }
    out.join(" ")
}

/// Parses [`format_schedule`]'s output. Errors name the bad token.
pub fn parse_schedule(text: &str) -> Result<Vec<Action>, String> {
    use crate::config::limits::MAX_ACTIONS;
    let mut out = Vec::new();
    if text.split_whitespace().next().is_none() {
        return Err("the schedule is empty (expected actions such as \"s0 s1*3 d2\")".into());
    }
    for tok in text.split_whitespace() {
        let (a, n) = match tok.split_once('*') {
            Some((a, n)) => (
                a,
                n.parse::<usize>()
                    .map_err(|_| format!("bad repeat count in \"{tok}\""))?,
            ),
            None => (tok, 1),
        };
        let bad =
            || format!("bad action \"{tok}\" (expected s<cpu>, d<cpu>, i<cpu> or p<cpu>:<va hex>)");
        // A number no machine has is no CPU.
        let num = |s: &str| match s.parse::<usize>() {
            Ok(c) if c < CpuId::LIMIT => Ok(CpuId::from_index(c)),
            _ => Err(bad()),
        };
        let act = if let Some(c) = a.strip_prefix('s') {
            Action::Step(num(c)?)
        } else if let Some(c) = a.strip_prefix('d') {
            Action::Deliver(num(c)?)
        } else if let Some(c) = a.strip_prefix('i') {
            Action::Interrupt(num(c)?)
        } else if let Some(rest) = a.strip_prefix('p') {
            let (c, va) = rest.split_once(':').ok_or_else(bad)?;
            Action::Speculate(num(c)?, u64::from_str_radix(va, 16).map_err(|_| bad())?)
        } else {
            return Err(bad());
        };
        if n == 0 || n > MAX_ACTIONS - out.len() {
            return Err(format!(
                "\"{tok}\": the schedule would have {} actions, but must have 1..={MAX_ACTIONS} (and a repeat count >= 1)",
                (out.len() as u128) + n as u128
            ));
        }
        out.extend(std::iter::repeat_n(act, n));
    }
    Ok(out)
}

/// Replays `actions` on `e`, then stops. Errors if an action is not
/// enabled at its point (the schedule belongs to another configuration).
pub fn replay(
    e: &mut Explorer,
    actions: &[Action],
    done: impl Fn(&World) -> bool,
) -> Result<Outcome, String> {
    for (i, a) in actions.iter().enumerate() {
        if let Some(r) = e.failure() {
            return Ok(Outcome::Violation(r));
        }
        if done(e.world()) {
            return Ok(Outcome::Done);
        }
        if !e.enabled().contains(a) {
            return Err(format!(
                "schedule diverged at action {i} ({a}): enabled were {}",
                format_schedule(&e.enabled())
            ));
        }
        e.apply(*a);
    }
    if let Some(r) = e.failure() {
        return Ok(Outcome::Violation(r));
    }
    Ok(if done(e.world()) {
        Outcome::Done
    } else {
        Outcome::Bounded
    })
}
