//! KVM/arm64 (`arch/arm64/kvm`): the host side of virtual machines.
//!
//! A VM is a guest kernel (a [`World`] on the host's machine, running
//! the same policies and workloads as the host would) whose vCPUs are
//! host kernel threads ([`kvm_vcpu_thread`]): each loads its vCPU
//! ([`kvm_arch_vcpu_load`]: the VMID, the local flush when another vCPU
//! of the VM last ran on this CPU, `VTTBR_EL2` and `HCR_EL2`), enters the
//! guest and runs it until the guest exits; on a `WFI` exit it puts the
//! vCPU and sleeps until an interrupt is pending for it
//! ([`kvm_vcpu_block`]), woken by the vCPU's doorbell (GICv4.1: an
//! interrupt for a vCPU that does not run rings a doorbell on the CPU it
//! last ran on; [`kvm_vgic_v4_doorbell`]).

pub mod vmid;

crate::kernel::registry::entries! {
    /// The KVM policies: what the host does about guests' broadcast
    /// TLBIs (`[vm] kvm_policy`).
    pub POLICIES: KvmPolicyEntry = [stock, stock_6_13, dvmbm, nofb, nofb_no_move_flush];
}

use crate::engine::exec::KFuture;
use crate::engine::track::{Tracked, TrackedCell};
use crate::hw::{CpuId, CpuVec};
use crate::kernel::{sched, Ctx, GuestExit, TaskId, World};
use std::rc::Rc;
use vmid::{KvmVmid, VmidAllocator};

/// What a KVM policy changes in KVM/arm64: `HCR_EL2.FB` for guests and
/// hooks at the end of `kvm_arch_vcpu_load()`, in `kvm_arch_vcpu_put()`
/// and in `check_vcpu_requests()` before each guest entry. One file per
/// policy, each declaring its [`KvmPolicyEntry`].
pub trait KvmPolicy: std::fmt::Debug {
    /// `HCR_EL2.FB` in the guests' `HCR_EL2`.
    fn fb(&self) -> bool;

    /// Sets up the policy's state for `vms` VMs of `vcpus` vCPUs on
    /// `host` (`kvm_arch_init_vm`).
    fn init(&self, host: &World, vms: usize, vcpus: usize) {
        let _ = (host, vms, vcpus);
    }

    /// Must `kvm_arch_vcpu_load()` flush the VM's entries on this CPU
    /// although no other vCPU of the VM ran here last? Asked at every
    /// load.
    fn flush_on_load(&self, kvm: &Kvm, vcpu: CpuId, cpu: CpuId) -> bool {
        let _ = (kvm, vcpu, cpu);
        false
    }

    /// Does `kvm_arch_vcpu_load()` program `VTTBR_EL2` before the VM's
    /// VMID is made current? From 934bf871f011 ("KVM: arm64: Load the
    /// stage-2 MMU context in kvm_vcpu_load_vhe()", 6.7) the load wrote
    /// `VTTBR_EL2` with the VMID as it stood, and `kvm_arm_vmid_update()`
    /// in the run loop reloaded it only when that call had allocated a new
    /// VMID; fa808ed4e199 (6.14) updates the VMID first.
    fn vttbr_before_vmid_update(&self) -> bool {
        false
    }

    /// The end of `kvm_arch_vcpu_load()` on this CPU.
    fn vcpu_load<'a>(&'a self, ctx: &'a Ctx, kvm: &'a Kvm, vcpu: CpuId) -> KFuture<'a, ()> {
        let _ = (ctx, kvm, vcpu);
        Box::pin(async {})
    }

    /// In `kvm_arch_vcpu_put()`.
    fn vcpu_put<'a>(&'a self, ctx: &'a Ctx, kvm: &'a Kvm, vcpu: CpuId) -> KFuture<'a, ()> {
        let _ = (ctx, kvm, vcpu);
        Box::pin(async {})
    }

    /// `check_vcpu_requests()` before each guest entry.
    fn check_requests<'a>(&'a self, ctx: &'a Ctx, kvm: &'a Kvm, vcpu: CpuId) -> KFuture<'a, ()> {
        let _ = (ctx, kvm, vcpu);
        Box::pin(async {})
    }
}

/// A registered KVM policy, declared in its own file.
#[derive(Debug, Clone, Copy)]
pub struct KvmPolicyEntry {
    /// `[vm] kvm_policy = "<name>"`.
    pub name: &'static str,
    /// One line: what it is and where it comes from.
    pub description: &'static str,
    /// Hardware it needs.
    pub requires: &'static [crate::kernel::registry::Feature],
    /// For a mutant: the invariant it breaks, and the experiment whose
    /// `tlbsim check` shows it.
    pub breaks: Option<(crate::observe::Invariant, &'static str)>,
    /// Builds it.
    pub new: fn() -> Box<dyn KvmPolicy>,
}

/// The KVM policy called `name`; the error lists the known ones.
pub fn find_kvm_policy(name: &str) -> Result<&'static KvmPolicyEntry, String> {
    POLICIES
        .iter()
        .copied()
        .find(|e| e.name == name)
        .ok_or_else(|| {
            let names: Vec<_> = POLICIES.iter().map(|e| e.name).collect();
            format!(
                "unknown KVM policy \"{name}\" (known: {})",
                names.join(", ")
            )
        })
}

/// `struct kvm` with its one stage-2 MMU (`kvm->arch.mmu`): what the
/// host keeps of one VM.
pub struct Kvm {
    /// The guest kernel.
    pub guest: Rc<World>,
    /// `mmu->vmid`.
    pub vmid: KvmVmid,
    /// `mmu->last_vcpu_ran`: per physical CPU, the vCPU of this VM that
    /// ran there last (`None`: none, Linux's -1).
    pub last_vcpu_ran: CpuVec<TrackedCell<Option<CpuId>>>,
    /// The step-layer context of vCPU 0 ([`crate::step::Cx`]); vCPU `i`'s
    /// is this plus `i`.
    pub cx_base: usize,
    /// The host's KVM policy.
    pub policy: Rc<dyn KvmPolicy>,
    /// Per vCPU: a `KVM_REQ_*` request waits for it (the policy's; one
    /// kind is modelled).
    pub requests: CpuVec<TrackedCell<bool>>,
    /// The host's VMID allocator.
    pub vmids: Rc<VmidAllocator>,
    /// The vCPU threads, by vCPU (host tasks).
    pub vcpu_threads: Tracked<CpuVec<TaskId>>,
    /// The guest's workload has finished: vCPU threads leave their loop.
    pub done: TrackedCell<bool>,
}

impl Kvm {
    /// The step-layer context of vCPU `vcpu` ([`Kvm::cx_base`] plus its
    /// number).
    pub fn vcpu_cx(&self, vcpu: CpuId) -> usize {
        self.cx_base + vcpu.index()
    }
}

impl std::fmt::Debug for Kvm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kvm")
            .field("guest", &self.guest.id)
            .field("vmid", &self.vmid)
            .finish_non_exhaustive()
    }
}

/// `kvm_arch_vcpu_load(vcpu, cpu)` (VHE): the VMID made current
/// (`kvm_arm_vmid_update`), a local flush of the VM's entries if another
/// of its vCPUs ran here last (`__kvm_flush_cpu_context`), then the
/// vCPU's system registers (`kvm_vcpu_load_vhe`: `VTTBR_EL2` and, with
/// the traps, `HCR_EL2`). The rest of the load (timer, vGIC, FP state)
/// is `vcpu_put_load_ns` of work.
pub async fn kvm_arch_vcpu_load(ctx: &Ctx, kvm: &Kvm, vcpu: CpuId) {
    let _f = ctx.func(crate::label!("kvm_arch_vcpu_load"));
    let cpu = ctx.cpu();
    let early = kvm.policy.vttbr_before_vmid_update();
    if !early {
        kvm.vmids.update(ctx, &kvm.vmid).await;
    }
    let vmid = kvm.vmids.hw_vmid(&kvm.vmid);
    ctx.write_vttbr(vmid, kvm.policy.fb()).await;
    ctx.isb().await;
    // 6.7-6.13, kvm_arch_vcpu_ioctl_run(): "if (kvm_arm_vmid_update(&vcpu->
    // arch.hw_mmu->vmid) && has_vhe()) __load_stage2(...)" before the
    // guest is entered (here once per load: the model's VMIDs never roll
    // over).
    if early && kvm.vmids.update(ctx, &kvm.vmid).await {
        let vmid = kvm.vmids.hw_vmid(&kvm.vmid);
        ctx.write_vttbr(vmid, kvm.policy.fb()).await;
        ctx.isb().await;
    }
    let last = &kvm.last_vcpu_ran[cpu];
    // Asked first: the policy may keep a record of each load.
    let policy_flush = kvm.policy.flush_on_load(kvm, vcpu, cpu);
    if last.get() != Some(vcpu) || policy_flush {
        kvm_flush_cpu_context(ctx).await;
        last.set(Some(vcpu));
    }
    ctx.work(ctx.w.profile.virt_costs().vcpu_put_load_ns).await;
    kvm.policy.vcpu_load(ctx, kvm, vcpu).await;
}

/// `kvm_flush_remote_tlbs(kvm)` → `__kvm_tlb_flush_vmid` (VHE): every
/// entry of the VM on every CPU, from EL2 (`dsb(ishst); __tlbi(vmalls12e1is);
/// dsb(ish); isb()` in the VM's VMID context; not limited by TLBI by
/// affinity, which scopes EL1 operations only). `VTTBR_EL2` must hold
/// the VM's VMID (it does after [`kvm_arch_vcpu_load`]).
pub async fn kvm_flush_remote_tlbs(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("kvm_flush_remote_tlbs"));
    ctx.dsb_ishst().await;
    ctx.tlbi(crate::hw::tlb::TlbiScope::VmallS12, true).await;
    ctx.dsb_ish().await;
    ctx.isb().await;
}

/// `kvm_make_all_cpus_request(kvm, req)` without `KVM_REQUEST_WAIT`: the
/// request is set for every vCPU, and every other vCPU that runs in its
/// guest is kicked out (`kvm_vcpu_kick`: a reschedule IPI to its CPU);
/// nobody waits for them to see it.
pub async fn kvm_make_all_cpus_request(ctx: &Ctx, kvm: &Kvm, me: CpuId) {
    let _f = ctx.func(crate::label!("kvm_make_all_cpus_request"));
    for r in &kvm.requests {
        r.set(true);
    }
    let g = kvm.guest.guest.as_ref().expect("a guest");
    let threads = kvm.vcpu_threads.borrow().clone();
    for (i, &t) in threads.iter_cpus() {
        let in_guest = ctx.w.k.borrow().tasks[t].on_cpu;
        if i != me && in_guest {
            // vcpu->mode == IN_GUEST_MODE: kick its CPU.
            ctx.step(crate::kernel::Op::ReschedIpi(g.pcpu[i].get()))
                .await;
        }
    }
}

/// `__kvm_flush_cpu_context(mmu)` (arch/arm64/kvm/hyp/vhe/tlb.c): this
/// CPU's stage-1 entries of the VM whose VMID `VTTBR_EL2` holds:
/// `dsb(nshst)`, `enter_vmid_context()`, `__tlbi(vmalle1)`, `ic iallu`,
/// `dsb(nsh)`, `isb()`, `exit_vmid_context()`. The model's entries
/// combine both stages, and a stage-1 invalidation removes them; it has
/// no instruction cache, so `ic iallu` does nothing here.
pub async fn kvm_flush_cpu_context(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("__kvm_flush_cpu_context"));
    ctx.dsb_nshst().await;
    enter_vmid_context(ctx).await;
    ctx.tlbi(crate::hw::tlb::TlbiScope::All, false).await;
    ctx.dsb_nsh().await;
    ctx.isb().await;
    exit_vmid_context(ctx).await;
}

/// `enter_vmid_context()` (VHE), with `VTTBR_EL2` already the VM's (the
/// vCPU load wrote it): interrupts off, `HCR_EL2.TGE` cleared and an
/// `isb()`, so that EL1 TLB maintenance applies to the guest's regime.
async fn enter_vmid_context(ctx: &Ctx) {
    ctx.irq_save();
    ctx.write_hcr_tge(false).await;
    ctx.isb().await;
}

/// `exit_vmid_context()` (VHE): `HCR_EL2.TGE` set again and an `isb()`
/// (the host's `VTTBR_EL2` is not restored: the vCPU load goes on to run
/// the VM).
async fn exit_vmid_context(ctx: &Ctx) {
    ctx.write_hcr_tge(true).await;
    ctx.isb().await;
    ctx.irq_restore();
}

/// `kvm_arch_vcpu_put(vcpu)`: the VMID stops being active on this CPU
/// (`kvm_arm_vmid_clear_active`).
pub async fn kvm_arch_vcpu_put(ctx: &Ctx, kvm: &Kvm, vcpu: CpuId) {
    let _f = ctx.func(crate::label!("kvm_arch_vcpu_put"));
    kvm.policy.vcpu_put(ctx, kvm, vcpu).await;
    kvm.vmids.clear_active(ctx).await;
}

/// `kvm_vcpu_block(vcpu)`: sleeps until an interrupt is pending for
/// `vcpu` (`kvm_vcpu_check_block()`), checked after the task is marked
/// sleeping so that a doorbell in between is not lost.
pub async fn kvm_vcpu_block(ctx: &Ctx, kvm: &Kvm, vcpu: CpuId) {
    let _f = ctx.func(crate::label!("kvm_vcpu_block"));
    let g = kvm.guest.guest.as_ref().expect("a guest");
    while !g.pending[vcpu].get() && !kvm.done.get() {
        sched::block_until_woken(ctx).await;
    }
}

/// The vCPU thread of `vcpu`: QEMU's `KVM_RUN` loop
/// (`kvm_arch_vcpu_ioctl_run`). Runs until the guest's workload is done.
pub async fn kvm_vcpu_thread(ctx: Ctx, kvm: Rc<Kvm>, vcpu: CpuId) {
    while !kvm.done.get() {
        kvm_arch_vcpu_load(&ctx, &kvm, vcpu).await;
        loop {
            let exit = {
                let _f = ctx.func(crate::label!("kvm_arch_vcpu_ioctl_run"));
                kvm.policy.check_requests(&ctx, &kvm, vcpu).await;
                ctx.enter_guest(kvm.vcpu_cx(vcpu)).await
            };
            match exit {
                GuestExit::Wfi => break,
                GuestExit::Irq => {
                    // The interrupt was taken on the way out; a
                    // reschedule it asked for puts the vCPU around
                    // schedule() (the preempt notifiers).
                    if ctx.w.k.borrow().cpus[ctx.cpu()].need_resched {
                        kvm_arch_vcpu_put(&ctx, &kvm, vcpu).await;
                        sched::maybe_preempt(&ctx).await;
                        kvm_arch_vcpu_load(&ctx, &kvm, vcpu).await;
                    }
                }
            }
        }
        kvm_arch_vcpu_put(&ctx, &kvm, vcpu).await;
        kvm_vcpu_block(&ctx, &kvm, vcpu).await;
    }
}

/// The host IPI handler of a vCPU doorbell: wakes the vCPU thread `arg`
/// (a no-op if it is not asleep: `kvm_vcpu_block` checks again).
pub fn kvm_vgic_v4_doorbell(ctx: Ctx, arg: usize) -> KFuture<'static, ()> {
    Box::pin(async move {
        let _f = ctx.func(crate::label!("vgic_v4_doorbell_handler"));
        sched::wake_up(&ctx, TaskId::from_index(arg)).await;
    })
}

/// Lets `kvm`'s vCPU threads run on every CPU (`[vm] placement =
/// "floating"`): they stay where they were first placed until the host
/// scheduler moves them.
pub fn unpin_vcpus(host: &World, kvm: &Kvm) {
    let mut k = host.k.borrow_mut();
    for &t in kvm.vcpu_threads.borrow().iter() {
        k.tasks[t].affinity = None;
    }
}

/// Creates VM `id` (from 1) on `host`: its guest kernel (with `policy` and
/// `asid`, its vCPU `i` on `pcpus[i]`), and one vCPU thread per vCPU,
/// pinned there ([`unpin_vcpus`] lets them move), run under the host's
/// `kvm_policy`. `cx_base` is the step-layer context its vCPU 0 will get
/// ([`crate::step::Cpus::add_guest`], in creation order after the host's
/// CPUs).
#[allow(clippy::too_many_arguments)]
pub fn create_vm(
    host: &Rc<World>,
    id: u32,
    pcpus: &[CpuId],
    kcfg: crate::config::KernelConfig,
    policy: Box<dyn crate::kernel::policy::TlbPolicy>,
    asid: Box<dyn crate::kernel::policy::AsidAllocator>,
    kvm_policy: &Rc<dyn KvmPolicy>,
    vmids: &Rc<VmidAllocator>,
    cx_base: usize,
) -> Rc<Kvm> {
    let guest = World::new_guest(host, id, pcpus, kcfg, policy, asid);
    let kvm = Rc::new(Kvm {
        guest,
        vmid: KvmVmid::default(),
        last_vcpu_ran: (0..host.ncpus())
            .map(|_| TrackedCell::fresh(None))
            .collect(),
        cx_base,
        policy: Rc::clone(kvm_policy),
        requests: pcpus.iter().map(|_| TrackedCell::fresh(false)).collect(),
        vmids: Rc::clone(vmids),
        vcpu_threads: Tracked::fresh(CpuVec::default()),
        done: TrackedCell::fresh(false),
    });
    for (i, &cpu) in CpuId::all(pcpus.len()).zip(pcpus) {
        let k = Rc::clone(&kvm);
        let t = crate::kernel::fork::spawn_kthread(
            host,
            &format!("vm{id}/vcpu{i}"),
            cpu,
            Box::new(move |ctx: Ctx| Box::pin(kvm_vcpu_thread(ctx, k, i))),
        );
        kvm.vcpu_threads.borrow_mut().push(t);
    }
    kvm
}
