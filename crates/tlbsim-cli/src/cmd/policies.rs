//! `tlbsim policies`: the registered policies, allocators and workloads.

use std::process::ExitCode;
use tlbsim::kernel::registry::{asid_allocators, tlb_policies, Allocators, Breaks};

#[derive(clap::Args, Debug)]
pub struct Args {}

/// Every registered policy, allocator and workload with its description;
/// policies and allocators also with their architecture, the hardware
/// features they require and, for a mutant or a historical bug, the
/// invariant it breaks.
pub fn run(_: Args) -> ExitCode {
    outln!("tlb_policy:");
    for e in tlb_policies() {
        let req: Vec<_> = e.requires.iter().map(|f| f.name()).collect();
        let req = if req.is_empty() {
            String::new()
        } else {
            format!("; requires: {}", req.join(", "))
        };
        let alloc = match e.allocators {
            Allocators::OfArch => "",
            Allocators::PicksOwnTags => "; asid_allocator: none",
        };
        outln!("  {:<34} {}", e.name, e.description);
        outln!("  {:<34} [{}{req}{alloc}{}]", "", e.arch, breaks(&e.breaks));
    }
    outln!("asid_allocator:");
    for e in asid_allocators() {
        let arch = e.arch.map_or("any".to_string(), |a| a.to_string());
        outln!("  {:<34} {}", e.name, e.description);
        outln!("  {:<34} [{arch}{}]", "", breaks(&e.breaks));
    }
    outln!("kvm_policy ([vm]):");
    for e in tlbsim::kernel::arm64::kvm::POLICIES {
        let req: Vec<_> = e.requires.iter().map(|f| f.name()).collect();
        let req = if req.is_empty() {
            String::new()
        } else {
            format!("; requires: {}", req.join(", "))
        };
        let breaks = e
            .breaks
            .map(|(i, exp)| format!("; breaks: {i} ({exp})"))
            .unwrap_or_default();
        outln!("  {:<34} {}", e.name, e.description);
        outln!("  {:<34} [arm64{req}{breaks}]", "");
    }
    outln!("workload:");
    for e in tlbsim::workload::WORKLOADS {
        outln!("  {:<34} {}", e.name, e.description);
    }
    ExitCode::SUCCESS
}

/// `; breaks: INVARIANT` for a mutant or historical bug, else nothing.
fn breaks(b: &Option<Breaks>) -> String {
    b.map(|b| format!("; breaks: {}", b.invariant))
        .unwrap_or_default()
}
