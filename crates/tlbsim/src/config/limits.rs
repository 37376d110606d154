//! The largest inputs tlbsim accepts, checked before a run starts (and,
//! for what only a running workload decides, while it runs), so that a
//! typo such as `pages = 1000000000000` gets an error naming the field and
//! the limit instead of an abort, a hang or a wrapped number.
//!
//! Each limit is far above what a modelled machine or experiment needs
//! (the largest built-in profile has 96 CPUs and 2,048 TLB entries) and
//! low enough that the simulator's memory stays within a few GiB and its
//! cost arithmetic (a cost times at most [`MAX_CPUS`] targets, summed over
//! a run) cannot overflow 64 bits.

/// CPUs of a machine (`topology.cpus`, `[machine] cpus`, `--cpus`): as
/// many as a [`CpuId`](crate::hw::CpuId) can number.
pub const MAX_CPUS: u32 = crate::hw::CpuId::LIMIT as u32;

/// Entries of one CPU's TLB, walk cache or stage-2 cache.
pub const MAX_CACHE_ENTRIES: u32 = 1 << 16;

/// Cached-translation slots of the whole machine: CPUs times (TLB + walk
/// cache + stage-2 cache entries). At 48 bytes a slot, 3 GiB.
pub const MAX_MACHINE_SLOTS: u64 = 1 << 26;

/// Any cost or duration of a profile (a `..._ns` field): 1 s. The
/// slowest modelled path (a 2 MiB huge-page fault) costs about 1 ms.
pub const MAX_COST_NS: u64 = 1_000_000_000;

/// A duration a workload parameter gives (a `..._ns` parameter): one
/// simulated day.
pub const MAX_WORKLOAD_NS: u64 = 86_400 * 1_000_000_000;

/// Pages one workload parameter may ask for (a `...pages`, `..._bytes`,
/// `..._kib` or `..._mib` parameter, converted to 4 KiB pages): 64 GiB.
pub const MAX_PARAM_PAGES: u64 = 1 << 24;

/// Tasks (processes, threads) one workload parameter may ask for, and
/// tasks alive at once in a kernel while it runs.
pub const MAX_TASKS: u64 = 1 << 16;

/// vCPUs of all virtual machines together (`[vm] count` x `vcpus`): each
/// is a host thread and a guest CPU with its own run queue and idle task.
pub const MAX_VCPUS: u64 = 1 << 14;

/// Data frames and page-table pages a run may have allocated at once
/// (32 GiB of simulated memory).
pub const MAX_LIVE_PAGES: usize = 1 << 23;

/// Events of history the checker keeps for a violation report
/// (`[checker] history`).
pub const MAX_HISTORY: usize = 1 << 20;

/// Actions of one explored schedule (`check --max-actions`, and the length
/// of a `--replay` schedule).
pub const MAX_ACTIONS: usize = 10_000_000;

/// Timer ticks per second (`kernel.hz`): Linux offers 100 to 1,000
/// (`kernel/Kconfig.hz`), some ports a little more; far above that a
/// tick is shorter than its own handler.
pub const MAX_HZ: u32 = 10_000;

/// The read-around window of a file fault (`[kernel] read_ahead_kb`):
/// 64 MiB (Linux bounds it only by the device; distributions set at most
/// a few MiB).
pub const MAX_READ_AHEAD_KB: u64 = 1 << 16;

/// PCT's bug depth (`check --depth`).
pub const MAX_PCT_DEPTH: u32 = 1000;

/// Bytes of a configuration file: an experiment, a machine profile (a
/// few KiB each). Far larger is not a configuration (`/dev/zero`, a
/// binary file named by mistake) and is refused before it is read whole.
pub const MAX_CONFIG_FILE_BYTES: u64 = 4 << 20;

/// Bytes of a result file `tlbsim rerun` reads (`run --json`: about 300
/// KiB for 24 VMs, a few MiB for 4,096 CPUs' rows).
pub const MAX_RESULT_FILE_BYTES: u64 = 256 << 20;

/// Bytes of a trace file (`tlbsim record`): [`crate::trace::MAX_TRACE_EVENTS`]
/// events at about 60 bytes a line, with room to spare.
pub const MAX_TRACE_FILE_BYTES: u64 = 2 << 30;

/// `value` (of the thing `what`, e.g. "topology.cpus") is at most `max`;
/// the error names both.
pub fn at_most<T: PartialOrd + std::fmt::Display>(
    what: &str,
    value: T,
    max: T,
) -> Result<(), String> {
    if value > max {
        return Err(format!("{what} = {value} exceeds tlbsim's limit of {max}"));
    }
    Ok(())
}
