//! Names of code regions (the kernel functions the model names), for
//! profiles of where simulated time goes. A [`Label`] is a `static`, so a
//! context's current label is a thin pointer, and each label has a small
//! id, handed out on first use, to index per-run sums with.
//!
//! Ids are process-wide and their order depends on which run used a label
//! first (runs may share a process and run in parallel): a profile must
//! never expose them, only the names ([`Label::name`]).

use std::sync::atomic::{AtomicU32, Ordering};

/// A named code region; declare one with [`label!`](crate::label).
#[derive(Debug)]
pub struct Label {
    name: &'static str,
    /// `id + 1`, or 0 before first use.
    id: AtomicU32,
}

/// Ids handed out so far.
static NEXT_ID: AtomicU32 = AtomicU32::new(0);

impl Label {
    /// A label named `name` (for a `static`).
    pub const fn new(name: &'static str) -> Self {
        Self {
            name,
            id: AtomicU32::new(0),
        }
    }

    /// Its name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Its id: small, dense, the same for the life of the process.
    pub fn id(&self) -> usize {
        let id = self.id.load(Ordering::Relaxed);
        if id != 0 {
            return id as usize - 1;
        }
        let fresh = NEXT_ID.fetch_add(1, Ordering::Relaxed) + 1;
        // Another thread may have given it one meanwhile: keep the first.
        match self
            .id
            .compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => fresh as usize - 1,
            Err(first) => first as usize - 1,
        }
    }
}

/// A `&'static Label` named by a string literal, declared where it is
/// used: `label!("flush_tlb_range")`.
#[macro_export]
macro_rules! label {
    ($name:literal) => {{
        static L: $crate::engine::label::Label = $crate::engine::label::Label::new($name);
        &L
    }};
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_label_keeps_its_id_and_two_labels_differ() {
        let a = crate::label!("a");
        let b = crate::label!("b");
        assert_eq!(a.id(), a.id());
        assert_ne!(a.id(), b.id());
        assert_eq!((a.name(), b.name()), ("a", "b"));
    }
}
