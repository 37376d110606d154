//! RCU-deferred freeing of page-table pages (`MMU_GATHER_RCU_TABLE_FREE`:
//! `tlb_remove_table()` → `call_rcu()`), for the kernels that free page
//! tables only after a grace period ([`TlbPolicy::rcu_table_free`]: x86
//! since 6.15, "x86/mm: make MMU_GATHER_RCU_TABLE_FREE unconditional").
//!
//! A grace period ends when every CPU has passed a quiescent state since
//! the free was queued: a finished context switch, an idle-loop step,
//! user code, or a return from an IPI handler to the idle loop. A CPU
//! that was idle (outside any handler, interrupts on) when the free was
//! queued owes none. A CPU inside an IPI handler or with interrupts off
//! (inside `switch_mm_irqs_off()`, say) is not quiescent: the free waits
//! for it.
//!
//! [`TlbPolicy::rcu_table_free`]: super::policy::TlbPolicy::rcu_table_free

use super::World;
use crate::hw::mem::TableId;
use crate::hw::tlb::MmId;
use crate::hw::CpuId;
use crate::observe::Event;

/// A page-table page waiting for a grace period.
#[derive(Debug, Clone)]
pub struct RcuFree {
    /// Per CPU: the quiescent-state count it must pass, or `None` if it
    /// was quiescent when the free was queued.
    owed: Vec<Option<u64>>,
    table: TableId,
    instance: u64,
    mm: MmId,
}

impl World {
    /// `tlb_remove_table()` with RCU: `table` of `mm` (already unlinked
    /// and flushed) is freed once a grace period has passed.
    pub fn rcu_free_table(&self, mm: MmId, table: TableId) {
        let instance = self.hw.borrow().mem.table(table).instance;
        let mut k = self.k.borrow_mut();
        let owed = k
            .cpus
            .iter()
            .map(|c| {
                let quiet = c.current == c.idle && c.in_irq == 0 && c.irqs_off == 0;
                (!quiet).then_some(c.rcu_qs)
            })
            .collect();
        k.rcu_frees.push(RcuFree {
            owed,
            table,
            instance,
            mm,
        });
    }

    /// `cpu` passed a quiescent state: frees every table whose grace
    /// period that ends (reported as freed by `cpu`). Counts only while a
    /// free waits: a grace period compares counts from its own start, so
    /// no count before it matters (and the hot paths that call this pay
    /// one check).
    pub fn rcu_quiescent(&self, cpu: CpuId) {
        if self.k.borrow().rcu_frees.is_empty() {
            return;
        }
        let done: Vec<RcuFree> = {
            let mut k = self.k.borrow_mut();
            k.cpus[cpu].rcu_qs += 1;
            let qs: Vec<u64> = k.cpus.iter().map(|c| c.rcu_qs).collect();
            let (done, wait): (Vec<RcuFree>, Vec<RcuFree>) = std::mem::take(&mut *k.rcu_frees)
                .into_iter()
                .partition(|f| {
                    f.owed
                        .iter()
                        .zip(&qs)
                        .all(|(o, &q)| o.is_none_or(|o| q > o))
                });
            *k.rcu_frees = wait;
            done
        };
        for f in done {
            self.hw.borrow_mut().mem.free_table(f.table);
            self.stats.borrow_mut().tables_freed += 1;
            self.emit(Event::TableFree {
                cpu,
                mm: f.mm,
                table: f.table,
                instance: f.instance,
            });
        }
    }
}
