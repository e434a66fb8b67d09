//! The answer to one client command: a slot the conductor fills and the client takes.
//!
//! A command either succeeds and its resource reaches the client, or fails and leaves nothing
//! behind. The slot makes that decision atomic: the client gives up (timeout) by marking the
//! slot abandoned under its lock, and the conductor answers under the same lock, so exactly one
//! of these holds afterwards:
//! - the conductor answered first: the client takes the answer (even at its deadline);
//! - the client gave up first: [`ReplySlot::answer`] hands the result back and the conductor
//!   undoes what it created.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

enum State<T> {
    Pending,
    Answered(Result<T>),
    Taken,
    Abandoned,
}

/// Where the driver puts the answer to one command.
pub struct ReplySlot<T> {
    state: Mutex<State<T>>,
    ready: Condvar,
}

/// The shared handle both sides hold.
pub type Reply<T> = Arc<ReplySlot<T>>;

impl<T> Default for ReplySlot<T> {
    fn default() -> Self {
        ReplySlot { state: Mutex::new(State::Pending), ready: Condvar::new() }
    }
}

impl<T> ReplySlot<T> {
    /// A new, pending slot.
    pub fn new() -> Reply<T> {
        Arc::new(Self::default())
    }

    fn state(&self) -> Result<MutexGuard<'_, State<T>>> {
        self.state.lock().map_err(|_| Error::Driver("a thread panicked while answering a command".into()))
    }

    /// Driver side: delivers `result`. `Err(result)` gives it back when the client already gave
    /// up (or the slot was answered before), so the caller can undo what it created.
    pub fn answer(&self, result: Result<T>) -> std::result::Result<(), Result<T>> {
        let Ok(mut state) = self.state.lock() else { return Err(result) };
        if !matches!(*state, State::Pending) {
            return Err(result);
        }
        *state = State::Answered(result);
        drop(state);
        self.ready.notify_all();
        Ok(())
    }

    /// Client side: the answer if it has arrived.
    pub fn try_take(&self) -> Result<Option<Result<T>>> {
        let mut state = self.state()?;
        Ok(Self::take(&mut state))
    }

    fn take(state: &mut State<T>) -> Option<Result<T>> {
        match std::mem::replace(state, State::Taken) {
            State::Answered(result) => Some(result),
            other => {
                *state = other;
                None
            }
        }
    }

    /// Client side: waits for the answer until `deadline` (at most `step` at a time), returning
    /// `None` if it has not arrived yet.
    pub fn wait(&self, deadline: Instant, step: Duration) -> Result<Option<Result<T>>> {
        let mut state = self.state()?;
        if let Some(result) = Self::take(&mut state) {
            return Ok(Some(result));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        let wait = step.min(deadline - now);
        let (mut state, _) = self
            .ready
            .wait_timeout(state, wait)
            .map_err(|_| Error::Driver("a thread panicked while answering a command".into()))?;
        Ok(Self::take(&mut state))
    }

    /// Client side: gives up. Returns the answer if it arrived meanwhile (the client must then
    /// take it: the resource exists); otherwise the driver will undo whatever it creates.
    pub fn abandon(&self) -> Result<Option<Result<T>>> {
        let mut state = self.state()?;
        if let Some(result) = Self::take(&mut state) {
            return Ok(Some(result));
        }
        *state = State::Abandoned;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_after_abandon_is_handed_back_for_undo() {
        let slot = ReplySlot::<u32>::new();
        assert!(slot.abandon().unwrap().is_none());
        assert!(matches!(slot.answer(Ok(7)), Err(Ok(7))));
        assert!(slot.try_take().unwrap().is_none());
    }

    #[test]
    fn abandon_after_answer_returns_the_answer() {
        let slot = ReplySlot::<u32>::new();
        assert!(slot.answer(Ok(7)).is_ok());
        assert!(matches!(slot.abandon().unwrap(), Some(Ok(7))));
        // Taken once: a second answer is refused.
        assert!(slot.answer(Ok(8)).is_err());
    }

    #[test]
    fn wait_returns_an_answer_given_by_another_thread() {
        let slot = ReplySlot::<u32>::new();
        let driver = slot.clone();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            driver.answer(Ok(3)).is_ok()
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut answer = None;
        while answer.is_none() && Instant::now() < deadline {
            answer = slot.wait(deadline, Duration::from_millis(100)).unwrap();
        }
        assert!(matches!(answer, Some(Ok(3))));
        assert!(thread.join().unwrap());
    }

    #[test]
    fn wait_gives_up_at_the_deadline() {
        let slot = ReplySlot::<u32>::new();
        let start = Instant::now();
        let deadline = start + Duration::from_millis(30);
        while slot.wait(deadline, Duration::from_millis(5)).unwrap().is_none() && Instant::now() < deadline {}
        assert!(Instant::now() >= deadline);
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
