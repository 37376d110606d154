//! Per-CPU variables (`include/linux/percpu-defs.h`). A policy's
//! `DEFINE_PER_CPU(T, name)` is a field `name: State<PerCpu<T>>`, filled at
//! boot ([`Table::fill`](crate::engine::state::Table::fill)); code reads
//! and writes the running CPU's copy with [`this_cpu`] and
//! [`this_cpu_mut`] (Linux's `this_cpu_read()`, `this_cpu_write()`,
//! `this_cpu_ptr()`), and another CPU's with [`per_cpu`] and
//! [`per_cpu_mut`] (`per_cpu(var, cpu)`, `per_cpu_ptr()`). Each records
//! the one element it touches, so the explorer sees two CPUs' accesses to
//! their own copies as independent.

use super::Ctx;
use crate::engine::state::{PerCpu, State};
use crate::hw::CpuId;
use std::cell::{Ref, RefMut};

/// `this_cpu_ptr(&var)`, to read: the running CPU's copy.
#[inline]
pub fn this_cpu<'a, T>(ctx: &Ctx, var: &'a State<PerCpu<T>>) -> Ref<'a, T> {
    per_cpu(var, ctx.cpu())
}

/// `this_cpu_ptr(&var)`, to write: the running CPU's copy.
#[inline]
pub fn this_cpu_mut<'a, T>(ctx: &Ctx, var: &'a State<PerCpu<T>>) -> RefMut<'a, T> {
    per_cpu_mut(var, ctx.cpu())
}

/// `per_cpu(var, cpu)`, to read.
#[inline]
pub fn per_cpu<T>(var: &State<PerCpu<T>>, cpu: CpuId) -> Ref<'_, T> {
    Ref::map(var.borrow(), |t| &t[cpu])
}

/// `per_cpu(var, cpu)`, to write.
#[inline]
pub fn per_cpu_mut<T>(var: &State<PerCpu<T>>, cpu: CpuId) -> RefMut<'_, T> {
    RefMut::map(var.borrow_mut(), |t| &mut t[cpu])
}
