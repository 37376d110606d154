//! The KVM/arm64 VMID allocator of `arch/arm64/kvm/vmid.c` (Linux 5.16+,
//! Shameer Kolothum's port of the arm64 ASID allocator to VMIDs): a
//! generation in the upper bits of `kvm_vmid->id`, VMIDs active at
//! rollover stay reserved, a lockless fast path on `active_vmids` with
//! cmpxchg — and, unlike the ASID allocator, a rollover that invalidates
//! every guest's TLB entries at once with a broadcast `TLBI ALLE1IS`
//! (`__kvm_flush_vm_context`) instead of a local flush pending per CPU.
//! VMID 0 is never handed out: it is the host's (and, as
//! `VMID_ACTIVE_INVALID`'s index, what a CPU with no vCPU loaded holds).

use crate::engine::track::{Tracked, TrackedCell};
use crate::hw::tlb::{TlbiScope, Vmid};
use crate::hw::{CpuId, CpuVec};
use crate::kernel::{Ctx, LockId, World};

/// `struct kvm_vmid`: one VM's VMID with its generation (`atomic64_t id`;
/// 0 until the first `kvm_arm_vmid_update()`).
#[derive(Debug)]
pub struct KvmVmid {
    /// `id`: generation | VMID.
    pub id: TrackedCell<u64>,
}

impl Default for KvmVmid {
    fn default() -> Self {
        KvmVmid {
            id: TrackedCell::fresh(0),
        }
    }
}

/// The allocator's globals (under `cpu_vmid_lock` unless noted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// `vmid_generation`: a multiple of `1 << bits` (atomic, read
    /// without the lock by the fast path).
    pub generation: u64,
    /// `vmid_map`: VMIDs used in this generation.
    pub map: Vec<bool>,
    /// `cur_idx` (a static in `new_vmid()`): where the next search starts.
    pub cur_idx: usize,
    /// `active_vmids[cpu]` (atomic): the id this CPU's loaded vCPU runs
    /// under, 0 when a rollover took it, `VMID_ACTIVE_INVALID` when no
    /// vCPU is loaded.
    pub active: CpuVec<u64>,
    /// `reserved_vmids[cpu]`.
    pub reserved: CpuVec<u64>,
}

/// The allocator. See the module doc.
#[derive(Debug)]
pub struct VmidAllocator {
    bits: u8,
    st: Tracked<State>,
    lock: LockId,
}

impl VmidAllocator {
    /// `kvm_arm_vmid_alloc_init()` for `bits`-bit VMIDs (at most 8: the
    /// model has no `FEAT_VMID16`) on `w`'s CPUs. Refused, as Linux warns,
    /// unless there is at least one more VMID than CPUs (else allocation
    /// after a rollover could fail).
    pub fn new(w: &World, bits: u8) -> Result<Self, String> {
        if !(1..=8).contains(&bits) {
            return Err(format!("VMID bits must be 1 to 8, not {bits}"));
        }
        let n = w.ncpus();
        if (1usize << bits) - 1 <= n {
            return Err(format!(
                "{bits}-bit VMIDs ({} usable) need more VMIDs than CPUs ({n})",
                (1usize << bits) - 1
            ));
        }
        Ok(Self {
            bits,
            st: Tracked::fresh(State::new(bits, n)),
            lock: w.new_lock("cpu_vmid_lock"),
        })
    }

    /// `VMID_FIRST_VERSION`: one generation.
    fn first_version(&self) -> u64 {
        1 << self.bits
    }

    /// `vmid_gen_match(vmid)`: is `id` of the current generation?
    fn gen_match(&self, st: &State, id: u64) -> bool {
        (id ^ st.generation) >> self.bits == 0
    }

    /// The VMID programmed in `VTTBR_EL2` for `v` (`kvm_get_vttbr()`:
    /// `vmid2idx(id)`).
    pub fn hw_vmid(&self, v: &KvmVmid) -> Vmid {
        (v.id.get() & (self.first_version() - 1)) as Vmid
    }

    /// A copy of the globals (for tests and reports).
    pub fn state(&self) -> State {
        self.st.borrow().clone()
    }

    /// `kvm_arm_vmid_clear_active()`: on vCPU put, so that a rollover
    /// does not keep this CPU's VMID reserved needlessly.
    pub async fn clear_active(&self, ctx: &Ctx) {
        let cpu = ctx.cpu();
        let invalid = self.first_version(); // VMID_ACTIVE_INVALID
        ctx.atomic_set(|| self.st.borrow_mut().active[cpu] = invalid)
            .await;
    }

    /// `kvm_arm_vmid_update(kvm_vmid)` on this CPU (vCPU load, preemption
    /// off): makes `v`'s VMID valid in the current generation and active
    /// here. Returns whether `v` got a new VMID.
    pub async fn update(&self, ctx: &Ctx, v: &KvmVmid) -> bool {
        let _f = ctx.func(crate::label!("kvm_arm_vmid_update"));
        let cpu = ctx.cpu();
        // vmid = atomic64_read(&kvm_vmid->id); old_active_vmid =
        // atomic64_read(this_cpu_ptr(&active_vmids)).
        let (id, old) = ctx
            .atomic_read(|| (v.id.get(), self.st.borrow().active[cpu]))
            .await;
        if old != 0 && self.gen_match(&self.st.borrow(), id) {
            // atomic64_cmpxchg_relaxed(this_cpu_ptr(&active_vmids),
            // old_active_vmid, vmid): 0 means a rollover got there first.
            let swapped = ctx
                .cmpxchg(|| {
                    let mut st = self.st.borrow_mut();
                    let slot = &mut st.active[cpu];
                    let was = *slot;
                    if was == old {
                        *slot = id;
                    }
                    was != 0
                })
                .await;
            if swapped {
                return false;
            }
        }
        ctx.irq_save(); // raw_spin_lock_irqsave()
        ctx.spin_lock(self.lock).await;
        let (updated, rolled) = {
            let mut st = self.st.borrow_mut();
            let mut id = v.id.get();
            let mut out = (false, false);
            if !self.gen_match(&st, id) {
                let (new, rolled) = self.new_vmid(&mut st, id);
                id = new;
                v.id.set(id);
                out = (true, rolled);
            }
            st.active[cpu] = id; // atomic64_set(this_cpu_ptr(&active_vmids), vmid)
            out
        };
        if rolled {
            ctx.w.stats.borrow_mut().vmid_rollovers += 1;
            kvm_flush_vm_context(ctx).await;
        }
        ctx.spin_unlock(self.lock).await;
        ctx.irq_restore();
        updated
    }

    /// `new_vmid()`, lock held: `old`'s number again in the current
    /// generation if it is reserved or free, else the next free one,
    /// rolling over (`flush_context()`) when none is. Returns the new id
    /// and whether it rolled over; the caller then issues the broadcast
    /// invalidation `flush_context()` ends with.
    pub fn new_vmid(&self, st: &mut State, old: u64) -> (u64, bool) {
        let mask = self.first_version() - 1;
        if old != 0 {
            let new = st.generation | (old & mask);
            if check_update_reserved_vmid(st, old, new) {
                return (new, false);
            }
            let idx = (old & mask) as usize;
            if !st.map[idx] {
                st.map[idx] = true;
                return (new, false);
            }
        }
        let mut rolled = false;
        let idx = match (st.cur_idx..st.map.len()).find(|&i| !st.map[i]) {
            Some(i) => i,
            None => {
                st.generation += self.first_version();
                flush_context(st, mask);
                rolled = true;
                // "We have more VMIDs than CPUs, so this will always
                // succeed" (checked by `new`).
                (1..st.map.len())
                    .find(|&i| !st.map[i])
                    .expect("more VMIDs than CPUs: one is free after rollover")
            }
        };
        st.map[idx] = true;
        st.cur_idx = idx;
        (st.generation | idx as u64, rolled)
    }
}

impl State {
    /// The globals after `kvm_arm_vmid_alloc_init()`: generation 1, no
    /// VMID used, no CPU active.
    pub fn new(bits: u8, ncpus: usize) -> Self {
        Self {
            generation: 1 << bits,
            map: vec![false; 1 << bits],
            cur_idx: 1,
            active: CpuVec::filled(ncpus, 0),
            reserved: CpuVec::filled(ncpus, 0),
        }
    }
}

/// `flush_context()`, lock held, generation already bumped: the map is
/// cleared but for the VMID each CPU runs (or reserved at the last
/// rollover, if a rollover took its active one); VMID 0 stays reserved
/// through `VMID_ACTIVE_INVALID`'s index. The broadcast invalidation
/// that follows is the caller's ([`kvm_flush_vm_context`]).
fn flush_context(st: &mut State, mask: u64) {
    st.map.iter_mut().for_each(|b| *b = false);
    for cpu in CpuId::all(st.active.len()) {
        let mut vmid = std::mem::take(&mut st.active[cpu]); // atomic64_xchg_relaxed(.., 0)
        if vmid == 0 {
            vmid = st.reserved[cpu]; // preserve reserved VMID
        }
        st.map[(vmid & mask) as usize] = true;
        st.reserved[cpu] = vmid;
    }
}

/// `check_update_reserved_vmid(vmid, newvmid)`: every CPU that reserved
/// `old` reserves `new` instead; returns whether any had.
fn check_update_reserved_vmid(st: &mut State, old: u64, new: u64) -> bool {
    let mut hit = false;
    for r in st.reserved.iter_mut().filter(|r| **r == old) {
        *r = new;
        hit = true;
    }
    hit
}

/// `__kvm_flush_vm_context()` (arch/arm64/kvm/hyp/vhe/tlb.c), at EL2:
/// every guest's entries on every CPU, then wait for it (`dsb(ishst);
/// __tlbi(alle1is); dsb(ish)`; the I-cache maintenance of VPIPT caches
/// is not modelled).
pub async fn kvm_flush_vm_context(ctx: &Ctx) {
    let _f = ctx.func(crate::label!("__kvm_flush_vm_context"));
    ctx.dsb_ishst().await;
    ctx.tlbi(TlbiScope::AllE1, true).await;
    ctx.dsb_ish().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(bits: u8) -> VmidAllocator {
        VmidAllocator {
            bits,
            st: Tracked::fresh(State::new(bits, 2)),
            lock: 0,
        }
    }

    #[test]
    fn vmid_0_is_never_handed_out_and_a_rollover_keeps_active_vmids() {
        let a = alloc(2); // VMIDs 1..=3
        let mut st = a.state();
        let ids: Vec<u64> = (0..3).map(|_| a.new_vmid(&mut st, 0).0).collect();
        assert_eq!(ids.iter().map(|i| i & 3).collect::<Vec<_>>(), [1, 2, 3]);
        assert!(ids.iter().all(|i| i >> 2 == 1), "first generation");
        // CPU 1 runs the VM with VMID 2; CPU 0 has no vCPU loaded.
        st.active = CpuVec::from_vec(vec![a.first_version(), ids[1]]);
        let (new, rolled) = a.new_vmid(&mut st, 0);
        assert!(rolled, "no VMID left: rollover");
        assert_eq!(new >> 2, 2, "second generation");
        assert_ne!(new & 3, 2, "VMID 2 stays reserved for CPU 1's VM");
        assert_ne!(new & 3, 0, "VMID 0 is the host's");
        assert_eq!(*st.reserved, [a.first_version(), ids[1]]);
        // CPU 1's VM keeps its number in the new generation, without a
        // rollover.
        assert_eq!(a.new_vmid(&mut st, ids[1]), ((2 << 2) | 2, false));
        // The VM that had VMID 1 was not running at the rollover, and the
        // new VM took 1 after it: it gets the next free number.
        assert_eq!(new & 3, 1);
        let (other, rolled) = a.new_vmid(&mut st, ids[0]);
        assert_eq!((other, rolled), ((2 << 2) | 3, false));
    }

    #[test]
    fn a_vmid_not_reserved_is_taken_again_only_when_free() {
        let a = alloc(3); // VMIDs 1..=7
        let mut st = a.state();
        let first = a.new_vmid(&mut st, 0).0;
        // Roll over with nothing active: every number is free again.
        st.generation += a.first_version();
        flush_context(&mut st, 7);
        let again = a.new_vmid(&mut st, first).0;
        assert_eq!(again & 7, first & 7, "its old number, now in generation 2");
        assert_eq!(again >> 3, 2);
    }
}
