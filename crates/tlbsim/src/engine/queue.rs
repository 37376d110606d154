//! Event queue ordered by `(time, sequence)`: ties are first-in first-out.
//! Cancellation is lazy: a cancelled event stays queued and is skipped when
//! popped (nexosim's scheme).
//!
//! Fast path: the earliest event is kept out of the heap while it is the
//! earliest, so an event pushed ahead of everything queued (a CPU's next
//! step that ends before any other event) is popped without a heap push
//! and pop. The order is the same as with the heap alone.
//!
//! A heap key is one `u128`: the time in its high 64 bits, then a 32-bit
//! sequence number, then the 32-bit slot that holds the event, so that
//! keys compare as one integer and the heap moves 16 bytes per entry. When
//! the sequence numbers run out (after 2^32 pushes) the queued keys are
//! renumbered in their order, which leaves the order unchanged.

use super::Ns;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A priority queue of events of type `E`.
#[derive(Debug)]
pub struct EventQueue<E> {
    /// Keys (see [`key`]) of the queued events but `front`.
    heap: BinaryHeap<Reverse<u128>>,
    /// The key that orders before every key in `heap`, if kept out of it.
    front: Option<u128>,
    /// Each slot is referred to by exactly one queued key while it holds an
    /// event or a cancelled one; it is freed when that key is popped.
    slots: Vec<Slot<E>>,
    free: Vec<u32>,
    /// The sequence number of the next push.
    seq: u32,
    /// Pushes so far: the generation that tells a fired event's
    /// [`EventId`] from the slot's next occupant.
    pushes: u64,
    /// When `seq` reaches this, the queued keys are renumbered (`u32::MAX`
    /// but in tests).
    renumber_at: u32,
}

#[derive(Debug)]
struct Slot<E> {
    /// The push that filled the slot.
    generation: u64,
    /// The event, `None` once cancelled.
    ev: Option<E>,
}

/// The heap key of an event at `at_ns` with sequence number `seq` in slot
/// `slot`: ordered by time, then sequence (unique among queued keys).
fn key(at_ns: Ns, seq: u32, slot: u32) -> u128 {
    (u128::from(at_ns) << 64) | (u128::from(seq) << 32) | u128::from(slot)
}

/// The time of a key.
fn key_time(k: u128) -> Ns {
    (k >> 64) as Ns
}

/// The slot of a key.
fn key_slot(k: u128) -> usize {
    (k as u32) as usize
}

/// Handle of a scheduled event, used to cancel it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventId(u32, u64);

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            heap: BinaryHeap::new(),
            front: None,
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
            pushes: 0,
            renumber_at: u32::MAX,
        }
    }
}

impl<E> EventQueue<E> {
    /// Schedules `ev` at absolute time `at_ns`.
    #[inline]
    pub fn push(&mut self, at_ns: Ns, ev: E) -> EventId {
        if self.seq >= self.renumber_at {
            self.renumber();
        }
        self.pushes += 1;
        let item = Slot {
            generation: self.pushes,
            ev: Some(ev),
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = item;
                s
            }
            None => {
                // A slot is at least 16 bytes: 2^32 of them would not fit
                // in memory long before this could fail.
                let s = u32::try_from(self.slots.len()).expect("fewer than 2^32 queued events");
                self.slots.push(item);
                s
            }
        };
        let k = key(at_ns, self.seq, slot);
        self.seq += 1;
        match self.front {
            Some(f) if k < f => {
                self.heap.push(Reverse(f));
                self.front = Some(k);
            }
            Some(_) => self.heap.push(Reverse(k)),
            None if self.heap.peek().is_none_or(|Reverse(h)| k < *h) => {
                self.front = Some(k);
            }
            None => self.heap.push(Reverse(k)),
        }
        EventId(slot, self.pushes)
    }

    /// Gives the queued keys sequence numbers `0..n` in their order (which
    /// stays the same) and continues from `n`.
    fn renumber(&mut self) {
        let mut keys: Vec<u128> = self.heap.drain().map(|r| r.0).collect();
        keys.extend(self.front.take());
        keys.sort_unstable();
        let mut seq = 0;
        for k in &mut keys {
            *k = key(key_time(*k), seq, key_slot(*k) as u32);
            seq += 1;
        }
        self.front = (!keys.is_empty()).then(|| keys.remove(0));
        self.heap = keys.into_iter().map(Reverse).collect();
        self.seq = seq;
    }

    /// Cancels a scheduled event; a no-op if it already fired.
    pub fn cancel(&mut self, id: EventId) {
        if let Some(s) = self.slots.get_mut(id.0 as usize) {
            if s.generation == id.1 {
                s.ev = None;
            }
        }
    }

    /// Pops the earliest live event, with its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(Ns, E)> {
        while let Some(k) = self.front.take().or_else(|| self.heap.pop().map(|r| r.0)) {
            let slot = key_slot(k);
            self.free.push(slot as u32);
            if let Some(ev) = self.slots[slot].ev.take() {
                return Some((key_time(k), ev));
            }
        }
        None
    }

    /// Number of queued entries, including lazily cancelled ones.
    pub fn len(&self) -> usize {
        self.heap.len() + usize::from(self.front.is_some())
    }

    /// True when nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_are_fifo_and_time_ordered() {
        let mut q = EventQueue::default();
        q.push(10, "b");
        q.push(5, "a");
        q.push(10, "c");
        q.push(7, "x");
        let x = q.push(8, "cancelled");
        q.cancel(x);
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(5, "a"), (7, "x"), (10, "b"), (10, "c")]);
    }

    #[test]
    fn pops_in_time_then_push_order_whatever_the_mix_of_pushes_pops_and_cancels() {
        random_mix(EventQueue::default());
    }

    #[test]
    fn renumbering_the_sequence_keeps_the_order() {
        // Renumber every 7 pushes instead of every 2^32.
        random_mix(EventQueue {
            renumber_at: 7,
            ..EventQueue::default()
        });
    }

    /// Random pushes, pops, cancels of queued events and cancels of fired
    /// ones, checked against sorting every live event by (time, push).
    fn random_mix(mut q: EventQueue<u64>) {
        let mut live: Vec<(Ns, u64, EventId)> = Vec::new();
        let mut fired: Vec<EventId> = Vec::new();
        let mut rng = crate::engine::rng::Streams::new(1).stream("queue-test");
        let mut next = |n: u64| rand::Rng::gen_range(&mut rng, 0..n);
        let (mut now, mut seq) = (0, 0);
        for _ in 0..20_000 {
            match next(11) {
                0..=4 => {
                    // Often ahead of everything queued (the fast path).
                    let at = now + next(4) * next(50);
                    seq += 1;
                    let id = q.push(at, seq);
                    live.push((at, seq, id));
                }
                5 if !live.is_empty() => {
                    let (_, _, id) = live.swap_remove(next(live.len() as u64) as usize);
                    q.cancel(id);
                }
                6 if !fired.is_empty() => {
                    // A no-op, even when the slot holds a newer event.
                    q.cancel(fired[next(fired.len() as u64) as usize]);
                }
                _ => {
                    live.sort_by_key(|&(t, s, _)| (t, s));
                    let want = (!live.is_empty()).then(|| live.remove(0));
                    let got = q.pop();
                    assert_eq!(got, want.map(|(t, s, _)| (t, s)));
                    if let (Some((t, _)), Some((_, _, id))) = (got, want) {
                        now = t;
                        fired.push(id);
                    }
                }
            }
        }
    }
}
