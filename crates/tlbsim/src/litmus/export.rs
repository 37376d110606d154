//! An explorer counterexample written as a herd AArch64 litmus test
//! (issue 19 item 4; docs/model.md "Counterexamples as litmus tests").
//!
//! [`capture`] replays the failing schedule with the checker keeping the
//! whole event stream and reads the stale TLB entry off the machine at the
//! violation. [`plan`] keeps the events that make the violation: the PTE
//! stores that retired the stale translation (from the one that replaced
//! the value the entry was filled from), and the TLBIs covering its page
//! and the `DSB ISH`s that the writing CPU issued after them, in program
//! order, up to its return from the call. [`Plan::test`] writes them as
//! thread P0; the CPU that holds the stale entry becomes P1, which reads a
//! flag P0 sets after its maintenance (standing for "the call returned"),
//! then accesses the page. The condition is the stale use: the access
//! succeeds (`~fault`) where the PTE no longer allows it, or reads the old
//! frame's value where the PTE maps another frame. [`Plan::fixed`] is the
//! same test with Linux's `flush_tlb_page()` sequence added after the
//! stores, whose condition must be unreachable.

use super::ast::{
    Addr, BarrierKind, Code, Cond, FaultAtom, Instr, Loc, Operand, PteVal, Quant, Reg, Sym, Test,
    Thread, TlbiKind, TlbiOp, Val,
};
use crate::config::{Arch, Experiment};
use crate::explore::{parse_schedule, replay, Explorer, Outcome};
use crate::hw::mem::{Pfn, Pte};
use crate::hw::tlb::{LeafEntry, TlbiScope};
use crate::hw::CpuId;
use crate::observe::Event;
use crate::observe::{Invariant, Violation};
use std::collections::BTreeMap;
use std::rc::Rc;

/// Events the checker keeps while [`capture`] replays a schedule: enough
/// for every explorer schedule of the small experiments (a schedule of
/// 50,000 actions emits fewer); a capture that fills it says so.
pub const CAPTURE_HISTORY: usize = 1 << 16;

/// Why a violation has no litmus form (printed as `cannot export: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CannotExport(pub String);

impl std::fmt::Display for CannotExport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot export: {}", self.0)
    }
}

fn no(msg: impl Into<String>) -> CannotExport {
    CannotExport(msg.into())
}

/// A failing schedule replayed with its whole event stream.
#[derive(Debug, Clone)]
pub struct Capture {
    /// The violation, its history the whole run (up to
    /// [`CAPTURE_HISTORY`] events).
    pub violation: Violation,
    /// The stale leaf entry: the one used (`LeafUse`), else the stalest
    /// entry of the violation's mm and page in the first CPU's TLB.
    pub stale: Option<LeafEntry>,
}

/// Replays `schedule` of `exp` (with `cpus` CPUs if given) and returns
/// its violation with the whole event stream.
pub fn capture(
    exp: &Experiment,
    cpus: Option<u32>,
    schedule: &str,
) -> Result<Capture, CannotExport> {
    let mut exp = exp.clone();
    exp.checker.enabled = true;
    exp.checker.history = CAPTURE_HISTORY;
    let actions = parse_schedule(schedule).map_err(|e| no(format!("bad schedule: {e}")))?;
    let ropts = crate::sim::RunOptions { seed: None, cpus };
    let b = crate::sim::build(&exp, &ropts).map_err(|e| no(e.to_string()))?;
    let done = b.done();
    let mut e = Explorer::new(Rc::clone(&b.world), u32::MAX);
    e.add_vms(&b.guests);
    let r = replay(&mut e, &actions, done);
    let out = match r {
        Ok(Outcome::Violation(v)) => {
            let stale = stale_entry(&v, &b.world.hw.borrow());
            Ok(Capture {
                violation: v,
                stale,
            })
        }
        Ok(o) => Err(no(format!(
            "the schedule ends without a checker violation ({})",
            match o {
                Outcome::Done => "the workload finished",
                Outcome::Deadlock(_) => "a deadlock",
                _ => "cut off",
            }
        ))),
        Err(e) => Err(no(format!("the schedule does not replay: {e}"))),
    };
    b.teardown();
    out
}

/// The stale entry of `v`: the one its last event used, else the
/// stalest one of its mm and page in its first CPU's TLB.
fn stale_entry(v: &Violation, hw: &crate::hw::Hw) -> Option<LeafEntry> {
    let cpu = *v.cpus.first()?;
    if let Some((_, Event::LeafUse { cpu: c, entry, .. })) = v.history.last() {
        if *c == cpu {
            return Some(*entry);
        }
    }
    let (mm, va) = (v.mm?, v.va?);
    hw.cpus
        .get(cpu.index())?
        .tlb
        .leaf_entries()
        .filter(|e| e.mm == mm && e.va(v.granule) == va)
        .min_by_key(|e| e.version)
}

/// One step of the writing CPU, as the test's P0 runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A store of this value to the page's PTE (`None`: cleared).
    Store(Option<Pte>),
    /// `DSB ISHST`: added before a TLBI that follows a store (Linux's
    /// flushes start with `dsb(ishst)`; tlbsim's walkers see stores at
    /// once, so the stream has no event for it).
    DsbSt,
    /// A TLBI covering the page.
    Tlbi(TlbiKind, bool),
    /// `DSB ISH` (a `DsbDone` event).
    Dsb,
    /// `DSB NSH`: added after local TLBIs no `DSB ISH` followed (tlbsim
    /// applies a local TLBI at once; Linux completes it with `dsb(nsh)`).
    DsbNsh,
}

/// How the holder's access shows the stale translation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A load that must fault under the new PTE (cleared, or no read):
    /// stale if it does not.
    LoadNoFault,
    /// A load whose new PTE maps another frame: stale if it reads the
    /// old frame's value.
    LoadOldFrame,
    /// A store the new PTE forbids (read-only): stale if it does not
    /// fault.
    StoreNoFault,
}

/// The events of a violation that the litmus test keeps.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The invariant broken.
    pub invariant: Invariant,
    /// The CPU that wrote the PTE and flushed (P0).
    pub writer: CpuId,
    /// The CPU holding the stale entry (P1, or P0 itself if the same).
    pub holder: CpuId,
    /// The virtual address of the page.
    pub va: u64,
    /// The PTE the stale entry was filled from.
    pub old: Pte,
    /// P0's steps, in program order.
    pub steps: Vec<Step>,
    /// The access that shows the stale use.
    pub access: Access,
    /// Every frame the test names, in order of first appearance (the
    /// first is the stale entry's: `PA(x)`).
    pub frames: Vec<Pfn>,
    /// The writer returned from the call that made the retiring store
    /// before the violation (else P0's steps end at the violation).
    pub returned: bool,
}

/// The events of `cap` that make its violation, or why there are none
/// with a litmus form.
pub fn plan(cap: &Capture) -> Result<Plan, CannotExport> {
    let v = &cap.violation;
    has_litmus_form(v)?;
    let (Some(&holder), Some(mm), Some(va)) = (v.cpus.first(), v.mm, v.va) else {
        return Err(no("the violation names no CPU, mm or address"));
    };
    let stale = cap.stale.ok_or_else(|| {
        no(format!(
            "no stale entry of va {va:#x} on cpu{holder} to export"
        ))
    })?;
    let hist = &v.history;
    let retiring = hist.iter().position(|(_, e)| {
        matches!(e, Event::PteWrite { mm: m, va: a, old: Some(o), .. }
            if *m == mm && *a == va && o.version == stale.version)
    });
    let Some(i) = retiring else {
        return Err(no(format!(
            "the PTE write that replaced v{} of va {va:#x} is not in the captured events \
             (a 2 MiB mapping, or more than {CAPTURE_HISTORY} events)",
            stale.version
        )));
    };
    let Event::PteWrite {
        cpu: writer,
        old: Some(old),
        ..
    } = hist[i].1
    else {
        unreachable!("found as a PteWrite above")
    };
    let (steps, new, returned) = writer_steps(&hist[i..], writer, mm, va, stale)?;
    if let Some(cpu) = hist[i..].iter().find_map(|(_, e)| match *e {
        Event::PteWrite {
            cpu, mm: m, va: a, ..
        } if m == mm && a == va && cpu != writer => Some(cpu),
        _ => None,
    }) {
        return Err(no(format!(
            "the PTE of va {va:#x} was written by cpu{cpu} too, after cpu{writer}'s write"
        )));
    }
    let access = access_for(old, new)?;
    let stores = steps.iter().filter(|s| matches!(s, Step::Store(_))).count();
    if stores > MAX_STORES {
        return Err(no(format!(
            "cpu{writer} wrote the PTE {stores} times in the call (at most {MAX_STORES} fit a test's registers)"
        )));
    }
    let frames = frames_of(old, &steps);
    Ok(Plan {
        invariant: v.invariant,
        writer,
        holder,
        va,
        old,
        steps,
        access,
        frames,
        returned,
    })
}

/// Can violation `v` be a herd test at all: an arm64 machine, and a
/// stale translation or a use after free (one address space, one ASID,
/// leaf descriptors)?
fn has_litmus_form(v: &Violation) -> Result<(), CannotExport> {
    if v.arch != Arch::Arm64 {
        return Err(no(
            "the machine is x86; herd's litmus tests here are AArch64 (VMSA)",
        ));
    }
    match v.invariant {
        Invariant::NoStaleUse | Invariant::NoStaleHold | Invariant::NoUseAfterFree => Ok(()),
        i => Err(no(format!(
            "\"{i}\" has no litmus form here: tlbsim's litmus tests run one address space \
             under one ASID with leaf descriptors only (no ASIDs or VMIDs to alias, no \
             table pages to free, no copy-out)"
        ))),
    }
}

/// The frames a test maps: `old`'s first (the stale entry's), then each
/// new one the writer's stores name, in order.
fn frames_of(old: Pte, steps: &[Step]) -> Vec<Pfn> {
    let mut frames = vec![old.pfn];
    for s in steps {
        if let Step::Store(Some(p)) = s {
            if !frames.contains(&p.pfn) {
                frames.push(p.pfn);
            }
        }
    }
    frames
}

/// The access that shows a translation from `old` stale once the PTE
/// is `new`.
fn access_for(old: Pte, new: Option<Pte>) -> Result<Access, CannotExport> {
    Ok(match new {
        Some(p) if p.perms.read() && p.pfn != old.pfn => Access::LoadOldFrame,
        Some(p) if p.perms.read() && old.perms.write() && !p.perms.write() => Access::StoreNoFault,
        Some(p) if p.perms.read() => {
            return Err(no(format!(
                "the stale translation (pfn {} {}) grants nothing the PTE now ({p}) does not \
                 that an access can show",
                old.pfn, old.perms
            )))
        }
        _ => Access::LoadNoFault,
    })
}

/// The writer's steps from its retiring store (`evs[0]`) to its return
/// from the call (or the violation), the PTE it left, and whether it
/// returned.
fn writer_steps(
    evs: &[(crate::engine::Ns, Event)],
    writer: CpuId,
    mm: crate::hw::tlb::MmId,
    va: u64,
    stale: LeafEntry,
) -> Result<(Vec<Step>, Option<Pte>, bool), CannotExport> {
    let mut steps = Vec::new();
    let mut new = None;
    // Stores since the last barrier; TLBIs since the last DSB, and
    // whether any was local.
    let (mut stored, mut tlbis, mut local) = (false, false, false);
    let mut returned = false;
    for (_, e) in evs {
        match *e {
            Event::PteWrite {
                cpu,
                mm: m,
                va: a,
                new: n,
                ..
            } if cpu == writer && m == mm && a == va => {
                steps.push(Step::Store(n));
                new = n;
                stored = true;
            }
            Event::HugePteWrite { cpu, mm: m, .. } if cpu == writer && m == mm => {
                return Err(no(
                    "a 2 MiB mapping was written (litmus tests map 4 KiB pages)",
                ));
            }
            Event::Tlbi {
                cpu,
                scope,
                broadcast,
            } if cpu == writer => {
                if let Some(kind) = covers(scope, stale, va) {
                    if stored {
                        steps.push(Step::DsbSt);
                        stored = false;
                    }
                    steps.push(Step::Tlbi(kind, broadcast));
                    tlbis = true;
                    local |= !broadcast;
                }
            }
            Event::DsbDone { cpu } if cpu == writer && (tlbis || stored) => {
                steps.push(Step::Dsb);
                (stored, tlbis, local) = (false, false, false);
            }
            Event::CallExit { cpu, .. } if cpu == writer => {
                returned = true;
                break;
            }
            _ => {}
        }
    }
    if tlbis && local {
        steps.push(Step::DsbNsh);
    }
    Ok((steps, new, returned))
}

/// The litmus form of `scope` if it removes `stale` (at `va`).
fn covers(scope: TlbiScope, stale: LeafEntry, va: u64) -> Option<TlbiKind> {
    match scope {
        TlbiScope::Va {
            asid,
            va: a,
            last_level,
        } if asid == stale.asid && a == va => Some(if last_level {
            TlbiKind::VaLast
        } else {
            TlbiKind::Va
        }),
        TlbiScope::Range {
            asid,
            va: a,
            pages,
            last_level,
        } if asid == stale.asid
            && a <= va
            && va < a.saturating_add(pages.saturating_mul(crate::hw::mem::PAGE_SIZE_4K)) =>
        {
            Some(if last_level {
                TlbiKind::VaLast
            } else {
                TlbiKind::Va
            })
        }
        TlbiScope::Asid(a) if a == stale.asid => Some(TlbiKind::Asid),
        TlbiScope::All | TlbiScope::VmallS12 => Some(TlbiKind::All),
        _ => None,
    }
}

// Registers of the test. P0: X0.. descriptors stored, X1 = PTE(x),
// X2 = x, X9 = x's page, X4 = z (the flag), X8 = 1. P1: X2 = x, X4 = z,
// X6 = the flag read, X5 = the load's value, X7 = the store's value.
const R_PTE: Reg = 1;
const R_X: Reg = 2;
const R_FLAG: Reg = 4;
const R_LOADED: Reg = 5;
const R_SEEN: Reg = 6;
const R_STORE: Reg = 7;
const R_ONE: Reg = 8;
const R_PAGE: Reg = 9;
/// Descriptor registers start here (X10, X11, ...).
const R_DESC: Reg = 10;
/// PTE stores P0 may make: one descriptor register each, X10 to X30.
const MAX_STORES: usize = 21;

/// Builds a test's symbols, initial state and code.
struct Builder<'p> {
    plan: &'p Plan,
    syms: Vec<String>,
    init: Vec<(Loc, Val)>,
    /// The page (`x`), the flag (`z`), the access's label (`L0`).
    x: Sym,
    z: Sym,
    l0: Sym,
    /// One variable per frame of `plan.frames`: `x`, `y1`, `y2`, ...
    frame_vars: Vec<Sym>,
}

impl<'p> Builder<'p> {
    fn new(plan: &'p Plan) -> Self {
        let mut b = Builder {
            plan,
            syms: Vec::new(),
            init: Vec::new(),
            x: 0,
            z: 0,
            l0: 0,
            frame_vars: Vec::new(),
        };
        b.x = b.sym("x");
        b.z = b.sym("z");
        b.l0 = b.sym("L0");
        b.frame_vars = (0..plan.frames.len())
            .map(|k| if k == 0 { b.x } else { b.sym(&format!("y{k}")) })
            .collect();
        b
    }

    fn sym(&mut self, name: &str) -> Sym {
        match self.syms.iter().position(|s| s == name) {
            Some(i) => i as Sym,
            None => {
                self.syms.push(name.to_string());
                (self.syms.len() - 1) as Sym
            }
        }
    }

    /// The descriptor of a PTE value: its frame's variable, `db:0` when
    /// read-only; `valid:0` when cleared or without read (arm64's
    /// `PROT_NONE` has the valid bit clear).
    fn desc(&self, p: Option<Pte>) -> PteVal {
        match p {
            Some(p) if p.perms.read() => {
                let k = self
                    .plan
                    .frames
                    .iter()
                    .position(|f| *f == p.pfn)
                    .unwrap_or(0);
                let mut d = PteVal::default_for(Some(self.frame_vars[k]));
                d.db = u8::from(p.perms.write());
                d
            }
            _ => {
                let mut d = PteVal::default_for(Some(self.x));
                d.valid = 0;
                d
            }
        }
    }

    /// P0's instructions for `steps` (descriptors in X10, X11, ...).
    fn writer_code(&mut self, steps: &[Step]) -> Vec<Instr> {
        let mut p0 = Vec::new();
        let mut next_desc = R_DESC;
        let mut have_page = false;
        for s in steps {
            match *s {
                Step::Store(p) => {
                    let d = self.desc(p);
                    self.init.push((Loc::Reg(0, next_desc), Val::Pte(d)));
                    p0.push(Instr::Str {
                        rt: next_desc,
                        addr: at(R_PTE),
                        bytes: 8,
                    });
                    next_desc += 1;
                }
                Step::DsbSt => p0.push(Instr::Dsb(BarrierKind::St)),
                Step::Dsb => p0.push(Instr::Dsb(BarrierKind::Full)),
                Step::DsbNsh => p0.push(Instr::Dsb(BarrierKind::Nsh)),
                Step::Tlbi(kind, shareable) => {
                    let rt = match kind {
                        TlbiKind::All => None,
                        TlbiKind::Asid => Some(crate::litmus::ast::ZR),
                        TlbiKind::Va | TlbiKind::VaLast => {
                            if !have_page {
                                p0.push(Instr::Alu {
                                    op: crate::litmus::ast::AluOp::Lsr,
                                    rd: R_PAGE,
                                    rn: R_X,
                                    op2: Operand::Imm(12),
                                });
                                have_page = true;
                            }
                            Some(R_PAGE)
                        }
                    };
                    let op = TlbiOp {
                        scope: kind,
                        shareable,
                    };
                    p0.push(Instr::Tlbi { op, rt });
                }
            }
        }
        p0
    }

    /// Appends the access to `code` (thread `proc`): after reading the
    /// flag and `DSB ISH` on P1, then an `ISB` (on P0: the `ERET` back
    /// to user space); returns the condition that it was stale.
    fn access(&mut self, code: &mut Vec<Instr>, proc: u8) -> (usize, Cond) {
        if proc == 1 {
            self.init.push((Loc::Reg(1, R_X), Val::Va(self.x, 0)));
            self.init.push((Loc::Reg(1, R_FLAG), Val::Va(self.z, 0)));
            code.push(Instr::Ldr {
                rt: R_SEEN,
                addr: at(R_FLAG),
                bytes: 8,
            });
            code.push(Instr::Dsb(BarrierKind::Full));
        }
        code.push(Instr::Isb);
        let label_at = code.len();
        code.push(match self.plan.access {
            Access::StoreNoFault => {
                self.init.push((Loc::Reg(proc, R_STORE), Val::Int(9)));
                Instr::Str {
                    rt: R_STORE,
                    addr: at(R_X),
                    bytes: 8,
                }
            }
            _ => Instr::Ldr {
                rt: R_LOADED,
                addr: at(R_X),
                bytes: 8,
            },
        });
        let stale = match self.plan.access {
            Access::LoadOldFrame => Cond::Eq(Loc::Reg(proc, R_LOADED), Val::Int(1)),
            _ => Cond::Not(Box::new(Cond::Fault(FaultAtom {
                proc,
                label: Some(self.l0),
                var: Some(self.x),
                kind: None,
            }))),
        };
        let cond = if proc == 1 {
            Cond::And(vec![Cond::Eq(Loc::Reg(1, R_SEEN), Val::Int(1)), stale])
        } else {
            stale
        };
        (label_at, cond)
    }
}

fn code(instrs: Vec<Instr>, labels: &[(Sym, usize)]) -> Code {
    Code {
        lines: vec![0; instrs.len()],
        instrs,
        labels: labels.iter().copied().collect::<BTreeMap<_, _>>(),
    }
}

fn at(base: Reg) -> Addr {
    Addr::of(base)
}

impl Plan {
    /// The test, named `name` (herd's name: letters, digits, `+-._`).
    pub fn test(&self, name: &str) -> Test {
        self.build(name, self.steps.clone())
    }

    /// The same test with Linux's `flush_tlb_page()` sequence (`DSB
    /// ISHST; TLBI VALE1IS; DSB ISH`; Linux 6.x
    /// `arch/arm64/include/asm/tlbflush.h`) added after P0's steps and
    /// every local TLBI made shareable: its condition must be
    /// unreachable, or the condition does not capture the violation.
    pub fn fixed(&self, name: &str) -> Test {
        let mut steps = self.steps.clone();
        for s in &mut steps {
            if let Step::Tlbi(_, bcast) = s {
                *bcast = true;
            }
        }
        steps.retain(|s| *s != Step::DsbNsh);
        steps.extend([Step::DsbSt, Step::Tlbi(TlbiKind::VaLast, true), Step::Dsb]);
        self.build(name, steps)
    }

    fn build(&self, name: &str, steps: Vec<Step>) -> Test {
        let mut b = Builder::new(self);
        let (x, z) = (b.x, b.z);
        let first = b.desc(Some(self.old));
        b.init.push((Loc::Pte(x), Val::Pte(first)));
        for (k, v) in b.frame_vars.clone().into_iter().enumerate() {
            b.init.push((Loc::Data(v, 0), Val::Int(k as i64 + 1)));
        }
        b.init.push((Loc::Reg(0, R_PTE), Val::PteAddr(x)));
        b.init.push((Loc::Reg(0, R_X), Val::Va(x, 0)));
        b.init.push((Loc::Reg(0, R_FLAG), Val::Va(z, 0)));
        let mut p0 = b.writer_code(&steps);
        let mut threads = Vec::new();
        let proc = if self.writer == self.holder {
            0
        } else {
            p0.push(Instr::Mov {
                rd: R_ONE,
                src: Operand::Imm(1),
            });
            p0.push(Instr::Str {
                rt: R_ONE,
                addr: at(R_FLAG),
                bytes: 8,
            });
            threads.push(Thread {
                code: code(std::mem::take(&mut p0), &[]),
                handler: None,
            });
            1
        };
        let (label_at, cond) = b.access(&mut p0, proc);
        threads.push(Thread {
            code: code(p0, &[(b.l0, label_at)]),
            handler: None,
        });
        let mut vars = b.frame_vars.clone();
        vars.push(z);
        vars.sort_unstable();
        Test {
            name: name.to_string(),
            header: Vec::new(),
            init: b.init,
            threads,
            quant: Quant::Exists,
            cond,
            syms: b.syms,
            vars,
            arrays: Vec::new(),
        }
    }

    /// The comment block's explanation of the test: which CPU is which
    /// thread, what the condition means, what was added to the stream.
    pub fn legend(&self) -> String {
        let mut s = String::new();
        let same = self.writer == self.holder;
        if same {
            s.push_str(&format!(
                "P0 is cpu{}: it rewrote the PTE of va {:#x} (x) and used the old translation itself.\n",
                self.writer, self.va
            ));
        } else {
            let point = if self.returned {
                "P0's call returned"
            } else {
                "P0 got this far when the violation was exposed (its call had not returned)"
            };
            s.push_str(&format!(
                "P0 is cpu{} (it rewrote the PTE of va {:#x}, x, and flushed); P1 is cpu{}, which held \
                 the old translation.\nz=1 stands for \"{point}\": P1 reads it, then (DSB ISH; \
                 ISB, the strongest ordering, so that only P0's TLB maintenance decides) accesses x.\n",
                self.writer, self.va, self.holder
            ));
        }
        s.push_str(&format!(
            "PTE(x) starts as the PTE the stale entry was filled from (pfn {} {}): PA(x) holds 1",
            self.old.pfn, self.old.perms
        ));
        if self.frames.len() > 1 {
            s.push_str("; the other frames are PA(y1), ... holding 2, ...");
        }
        s.push_str(".\nThe condition is the stale use: ");
        s.push_str(match self.access {
            Access::LoadNoFault => {
                "the load at L0 does not fault although the PTE no longer maps x."
            }
            Access::LoadOldFrame => {
                "the load at L0 reads the old frame's 1, not the new frame's value."
            }
            Access::StoreNoFault => {
                "the store at L0 does not fault although the PTE is now read-only."
            }
        });
        s.push_str(
            "\nFrom the event stream: P0's PTE stores, the TLBIs covering x and the DSB ISHs. Added: \
             DSB ISHST between a store and the next TLBI (Linux's flushes begin with dsb(ishst); \
             tlbsim's walkers see stores at once) and DSB NSH after local TLBIs no DSB ISH completed \
             (tlbsim applies them at once; Linux issues dsb(nsh)).",
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hw::cpu::cpuid;
    use crate::hw::mem::Perms;
    use crate::litmus::{machine::Options, parse::parse, print::print, search::explore};

    fn pte(pfn: Pfn, perms: Perms, version: u64) -> Pte {
        Pte {
            pfn,
            perms,
            version,
        }
    }

    fn reached(t: &Test) -> bool {
        let text = print(t, "c").unwrap();
        let back = parse(&text).unwrap();
        let m = crate::litmus::machine::Machine::new(&back, Options::default());
        let o = explore(&m, 2_000_000).unwrap();
        assert!(!o.incomplete);
        o.some
    }

    fn plan_with(steps: Vec<Step>, access: Access, new_pfn: Pfn) -> Plan {
        Plan {
            invariant: Invariant::NoStaleHold,
            writer: cpuid(0),
            holder: cpuid(1),
            va: 0x7eff_ffff_e000,
            old: pte(1, Perms::RW, 4),
            steps,
            access,
            frames: if new_pfn == 1 {
                vec![1]
            } else {
                vec![1, new_pfn]
            },
            returned: true,
        }
    }

    #[test]
    fn a_local_flush_leaves_the_stale_store_reachable_and_the_fixed_test_does_not() {
        let p = plan_with(
            vec![
                Step::Store(Some(pte(1, Perms::R, 5))),
                Step::DsbSt,
                Step::Tlbi(TlbiKind::VaLast, false),
                Step::DsbNsh,
            ],
            Access::StoreNoFault,
            1,
        );
        assert!(reached(&p.test("t")));
        assert!(!reached(&p.fixed("t")));
    }

    #[test]
    fn a_broadcast_flush_without_its_dsb_leaves_the_old_frame_readable() {
        let p = plan_with(
            vec![
                Step::Store(Some(pte(7, Perms::RW, 5))),
                Step::DsbSt,
                Step::Tlbi(TlbiKind::Va, true),
            ],
            Access::LoadOldFrame,
            7,
        );
        assert!(reached(&p.test("t")));
        assert!(!reached(&p.fixed("t")));
    }

    #[test]
    fn the_access_is_the_one_the_new_pte_forbids() {
        let old = pte(1, Perms::RW, 4);
        assert_eq!(access_for(old, None), Ok(Access::LoadNoFault));
        let none = Some(pte(1, Perms::NONE, 5));
        assert_eq!(access_for(old, none), Ok(Access::LoadNoFault));
        let moved = Some(pte(2, Perms::RW, 5));
        assert_eq!(access_for(old, moved), Ok(Access::LoadOldFrame));
        let ro = Some(pte(1, Perms::R, 5));
        assert_eq!(access_for(old, ro), Ok(Access::StoreNoFault));
        // A read-only entry where the PTE became writable: nothing stale
        // to show.
        let e = access_for(pte(1, Perms::R, 4), Some(pte(1, Perms::RW, 5))).unwrap_err();
        assert!(e.to_string().starts_with("cannot export: "), "{e}");
    }

    #[test]
    fn a_complete_broadcast_flush_is_not_a_counterexample() {
        let p = plan_with(
            vec![
                Step::Store(None),
                Step::DsbSt,
                Step::Tlbi(TlbiKind::VaLast, true),
                Step::Dsb,
            ],
            Access::LoadNoFault,
            1,
        );
        assert!(!reached(&p.test("t")));
    }
}
