//! The profile a run uses: the experiment's, with `[machine]`, `--cpus`
//! and the `[kernel]` keys that change the machine applied and validated.

use super::{RunOptions, SimError};
use crate::config::{builtin_profile, Experiment, MachineOverrides, Profile};

/// Resolves the profile of `exp` with overrides applied and validated.
pub fn resolve_profile(exp: &Experiment, opts: &RunOptions) -> Result<Profile, SimError> {
    let mut p = match &exp.profile_data {
        Some(p) => p.clone(),
        None if crate::config::is_profile_path(&exp.experiment.profile) => {
            return Err(SimError::Field {
                section: "experiment".into(),
                key: "profile".into(),
                message: format!(
                    "\"{}\" is a profile file, which the caller must load (Experiment::profile_data)",
                    exp.experiment.profile
                ),
            })
        }
        None => builtin_profile(&exp.experiment.profile).map_err(|e| SimError::Field {
            section: "experiment".into(),
            key: "profile".into(),
            message: e.message,
        })?,
    };
    let cpus_ok = |c: u32| {
        let max = crate::config::limits::MAX_CPUS;
        (1..=max)
            .contains(&c)
            .then_some(())
            .ok_or_else(|| format!("{c} CPUs (must be 1..={max})"))
    };
    if let Some(c) = exp.machine.cpus {
        cpus_ok(c).map_err(|message| SimError::Field {
            section: "machine".into(),
            key: "cpus".into(),
            message,
        })?;
    }
    if exp.machine.walk_cache_after_ttbr_write.is_some() && p.arm64.is_none() {
        return Err(SimError::Field {
            section: "machine".into(),
            key: "walk_cache_after_ttbr_write".into(),
            message: format!(
                "profile {} is not arm64: the setting describes arm64's TTBR0 and walk cache",
                p.name
            ),
        });
    }
    p.apply(&exp.machine);
    if let Some(c) = opts.cpus {
        cpus_ok(c).map_err(|message| SimError::Flag {
            flag: format!("--cpus {c}"),
            message,
        })?;
        p.topology.cpus = c;
    }
    if let Some(b) = exp.kernel.asid_bits {
        p.tlb.asid_bits = b;
    }
    if let Some(hz) = exp.kernel.hz {
        p.kernel.hz = Some(hz);
    }
    if p.kernel.hz.is_none() {
        // No tick: its cost is unused and left out of the resolved
        // profile, so that results without a tick read as before it
        // existed (issue 17).
        p.kernel.tick_handler_ns = None;
    }
    let cut = exp.machine.cpus.is_some() || opts.cpus.is_some();
    p.validate_resolved(cut)
        .map_err(|m| blame_topology(m, &p.name, &exp.machine, opts))?;
    Ok(p)
}

/// The error of a resolved profile `name` that failed validation with
/// `message`, blamed on what changed its topology: the `[machine]` key the
/// message names (`topology.sockets` → `[machine] sockets`), else `--cpus`,
/// else `[machine] cpus`; otherwise the profile's own.
fn blame_topology(
    message: String,
    name: &str,
    machine: &MachineOverrides,
    opts: &RunOptions,
) -> SimError {
    let field = message
        .split([' ', ','])
        .next()
        .and_then(|f| f.strip_prefix("topology."))
        .unwrap_or("");
    let set = match field {
        "sockets" => machine.sockets.is_some(),
        "dies_per_socket" => machine.dies_per_socket.is_some(),
        "cpus" => machine.cpus.is_some() && opts.cpus.is_none(),
        _ => false,
    };
    let blamed = set || opts.cpus.is_some() || machine.cpus.is_some();
    if field.is_empty() || !blamed {
        return SimError::Config(format!("profile {name}: {message}"));
    }
    let message = format!("{message} (profile {name})");
    let in_machine = |key: &str| SimError::Field {
        section: "machine".into(),
        key: key.into(),
        message: message.clone(),
    };
    match (set, opts.cpus) {
        (true, _) => in_machine(field),
        (false, Some(c)) => SimError::Flag {
            flag: format!("--cpus {c}"),
            message,
        },
        (false, None) => in_machine("cpus"),
    }
}
