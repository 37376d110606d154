//! The await-point executor.
//!
//! Kernel routines are `async fn`s. Each hardware or shared-memory step is an
//! `.await` on [`Mailbox::step`]: the step is posted to the task's mailbox and
//! the future returns `Pending`. A *driver* (the timing driver, or later the
//! interleaving explorer) takes the posted step, decides when and in which
//! order it completes, stores the result and polls the future again. Code
//! between two await points runs atomically with respect to other CPUs.

use super::label::Label;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A boxed, non-`Send` future: the shape of every kernel routine that can be
/// called through a policy trait object.
pub type KFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// One task's channel to the driver: at most one posted step, at most one
/// result.
pub struct Mailbox<Op, R> {
    posted: Cell<Option<Op>>,
    result: Cell<Option<R>>,
    /// The innermost name the code posting through this mailbox has
    /// entered (a kernel function's, for the CPU-time profile); each
    /// entry saves the one it hides and restores it on leaving.
    label: Cell<Option<&'static Label>>,
}

impl<Op, R> std::fmt::Debug for Mailbox<Op, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Mailbox")
    }
}

impl<Op, R> Default for Mailbox<Op, R> {
    fn default() -> Self {
        Self {
            posted: Cell::new(None),
            result: Cell::new(None),
            label: Cell::new(None),
        }
    }
}

impl<Op, R> Mailbox<Op, R> {
    /// Posts `op` and waits until a driver completes it with [`Mailbox::complete`].
    pub fn step(&self, op: Op) -> Step<'_, Op, R> {
        Step {
            mb: self,
            op: Some(op),
        }
    }

    /// Takes the step posted by the last poll, if any (driver side).
    pub fn take_posted(&self) -> Option<Op> {
        self.posted.take()
    }

    /// Completes the outstanding step with `r` (driver side).
    pub fn complete(&self, r: R) {
        self.result.set(Some(r));
    }

    /// The code posting here entered `label`; returns the label it
    /// hides, to give back to [`Mailbox::leave_label`] on leaving.
    pub fn enter_label(&self, label: &'static Label) -> Option<&'static Label> {
        self.label.replace(Some(label))
    }

    /// The code posting here left its innermost label, which hid `outer`.
    pub fn leave_label(&self, outer: Option<&'static Label>) {
        self.label.set(outer);
    }

    /// The innermost label entered, if any.
    pub fn label(&self) -> Option<&'static Label> {
        self.label.get()
    }
}

/// Future of one posted step.
pub struct Step<'a, Op, R> {
    mb: &'a Mailbox<Op, R>,
    op: Option<Op>,
}

impl<Op: Unpin, R> Future for Step<'_, Op, R> {
    type Output = R;
    fn poll(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<R> {
        if let Some(op) = self.op.take() {
            self.mb.posted.set(Some(op));
            return Poll::Pending;
        }
        match self.mb.result.take() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

/// Polls `fut` once with a no-op waker: drivers know from the mailbox, not
/// from wake-ups, when a task can make progress.
pub fn poll_once<T>(fut: Pin<&mut (dyn Future<Output = T> + '_)>) -> Poll<T> {
    let mut cx = Context::from_waker(Waker::noop());
    fut.poll(&mut cx)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    #[test]
    fn a_driver_completes_steps_in_its_own_order() {
        let mb: Rc<Mailbox<u32, u32>> = Rc::default();
        let m2 = Rc::clone(&mb);
        let mut fut: KFuture<'static, u32> = Box::pin(async move {
            let a = m2.step(1).await;
            let b = m2.step(2).await;
            a + b
        });
        assert!(poll_once(fut.as_mut()).is_pending());
        assert_eq!(mb.take_posted(), Some(1));
        assert!(poll_once(fut.as_mut()).is_pending(), "no result yet");
        mb.complete(10);
        assert!(poll_once(fut.as_mut()).is_pending());
        assert_eq!(mb.take_posted(), Some(2));
        mb.complete(20);
        assert_eq!(poll_once(fut.as_mut()), Poll::Ready(30));
    }
}
