//! The tracepoints x86 has and arm64 lacks: user page faults
//! (`exceptions:page_fault_user`), remote TLB flushes sent
//! (`csd:csd_queue_cpu` of `flush_tlb_func`) and TLB flushes
//! (`tlb:tlb_flush`). An arm64 trace has none of them.

use super::line::{field, num, Line};
use super::Conv;
use crate::trace::EventKind;

impl Conv {
    /// An `exceptions:`, `csd:` or `tlb:` line `p` of task `me` (if kept),
    /// at `t`; other lines are ignored.
    pub(super) fn x86(&mut self, p: &Line<'_>, me: Option<u32>, t: u64) {
        let Some(m) = me else { return };
        match p.event {
            "exceptions:page_fault_user" => {
                let addr = field(p.trace, "address").and_then(num);
                let code = field(p.trace, "error_code").and_then(num).unwrap_or(0);
                if let Some(addr) = addr.filter(|&a| a < crate::trace::MAX_USER_ADDR) {
                    // X86_PF_WRITE is bit 1 of the error code.
                    let write = code & 2 != 0;
                    self.push(t, m, EventKind::Fault { addr, write });
                }
            }
            "csd:csd_queue_cpu" => {
                // A remote x86 TLB flush this task sent (one per target).
                let cpu = field(p.trace, "cpu").and_then(num);
                if let Some(cpu) = cpu.filter(|_| field(p.trace, "func") == Some("flush_tlb_func"))
                {
                    self.push(t, m, EventKind::Shootdown { cpu: cpu as u32 });
                }
            }
            "tlb:tlb_flush" => {
                let pages = p
                    .trace
                    .strip_prefix("pages:")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|v| v.parse::<i64>().ok());
                if let (Some(pages), Some(reason)) = (pages, flush_reason(p.trace)) {
                    let pages = u64::try_from(pages).unwrap_or(u64::MAX);
                    self.push(t, m, EventKind::TlbFlush { reason, pages });
                }
            }
            _ => {}
        }
    }
}

/// Is this `tlb:tlb_flush` the one a context switch makes (reason 0)?
pub(super) fn is_switch_flush(p: &Line<'_>) -> bool {
    p.event == "tlb:tlb_flush" && flush_reason(p.trace) == Some(0)
}

/// `tlb:tlb_flush`'s reason: the number in the parentheses at the end.
fn flush_reason(trace: &str) -> Option<u32> {
    trace
        .rsplit_once('(')
        .and_then(|(_, r)| r.trim_end_matches(')').parse::<u32>().ok())
}
