//! Experiment configs and machine profiles: plain data, parsed from TOML text.
//!
//! Parsing is done here (no file I/O: callers pass the text and the name to
//! report) so that every error names the file, the line and the field.
//!
//! Rooms: [`location`] (errors that name file, line and field), [`profile`]
//! (machine profiles, built-in and from files), [`experiment`] (the
//! experiment file), [`patch`] (`--set SECTION.KEY=VALUE`), [`limits`] (the
//! largest inputs accepted).

pub mod experiment;
pub mod limits;
pub mod location;
pub mod patch;
pub mod profile;

pub use experiment::{
    Arm64FlushRangeLimit, CheckerConfig, Experiment, ExperimentMeta, FileLargeFolios, Files,
    HugetlbUnshareFlush, KernelConfig, MachineOverrides, MremapMovePmd, PgtableFreeTlbi, Placement,
    Thp, ThpZeroPage, VmConfig, WorkloadConfig, FILE_PARAMS,
};
pub use location::{find_key_line, from_table, parse_toml, ConfigError};
pub use patch::apply_sets;
pub use profile::{
    builtin_profile, is_profile_path, parse_profile, Arch, Arm64Params, FileCosts, KernelCosts,
    NumaParams, Profile, StepCosts, SwapCosts, SyncDomain, TlbParams, Topology,
    WalkCacheAfterTtbrWrite, X86Params, BUILTIN_PROFILES,
};
