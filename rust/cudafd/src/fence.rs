//! A fence: one watched point, awaitable, pollable through its notifier's
//! fd, or waited for by blocking.

use std::future::Future;
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::notifier::{outcome, Asked, Inner, Mechanism, Notifier, State};

/// How long a blocking wait sleeps at most before it looks again, for
/// completions that another thread drained meanwhile.
const SLICE: Duration = Duration::from_millis(50);

/// How long after its watch an awaited fence asks the driver itself, each
/// time its task is polled, before it leaves the wait to the notifier's fd
/// (`event` and `spin` notifiers), when no other fence of its notifier was
/// alive at its watch (a lone `spin` wait of [`Notifier::wait`] asks until
/// it is over instead). A kernel of a few microseconds is over before any
/// thread could be woken to say so: on an H200 a Tokio task awaiting 5 µs
/// kernels through the fd resumed 110–116 µs after a loop on `stream_done`
/// would have (`event`; 11–15 µs under `spin`), and 1.0 µs (2 µs) later
/// asking. A longer wait costs the runtime's thread about those 20 µs more,
/// which buys nothing where other waits are in flight: there the work was
/// launched just before and runs for longer, and on 16 and 64 streams of
/// 50–3000 µs kernels every fence asking cost 0.12–0.55 cores more at the
/// same lateness (docs/performance.md, "Tokio").
const ASK_WINDOW: Duration = Duration::from_micros(20);

/// One watched point on a stream (or an event's record): a future of its
/// outcome, `Ok(())` or the error the work or its context ended in.
///
/// Made by [`Notifier::watch`] or [`Notifier::watch_event`]; the point is
/// the stream's end at that call. Three ways to wait:
///
/// - `.await` it. With the notifier registered with a Tokio reactor
///   ([`Notifier::has_reactor`]), that is all. Otherwise something must call
///   [`Notifier::dispatch`] when the fd is readable. A fence of an `event`
///   or `spin` notifier watched while no other fence of that notifier was
///   alive asks the driver itself for its first 20 µs, each time it is
///   polled, and wakes its task to be polled again, so work that ends that
///   soon resumes the task without going through the fd. A `spin`
///   notifier's lone wait made by [`Notifier::wait`] asks until it is over
///   (its doc says why).
/// - Poll its fd ([`AsRawFd`]: the notifier's fd, readable when any of the
///   notifier's completions is queued), then call [`try_wait`](Fence::try_wait).
/// - Block the thread in [`wait`](Fence::wait) (never inside an async task).
///
/// Dropping a fence that has not finished cancels its wait: cudafd forgets
/// it and the GPU work goes on, unaffected.
///
/// # Threads and polling
///
/// A fence is `Send + Sync`: move it to any thread or task. Among the fences
/// of a notifier being awaited, one at a time polls the fd for all of them;
/// when it finishes or is dropped, another takes over. So a fence that was
/// polled must be polled again when its task is woken, or be dropped, as
/// `.await`, `select!` and `join!` do: a fence left polled once and then
/// neither polled nor dropped can hold up the others.
///
/// # Faults
///
/// A fault of the stream's context ends the fence in [`Error::Gpu`] (e.g.
/// `CUDA_ERROR_ILLEGAL_ADDRESS`), as it ends every pending wait of that
/// context, at once, also waits whose own work had not started.
#[must_use = "dropping a fence cancels its wait"]
pub struct Fence {
    inner: Arc<Inner>,
    token: u64,
    /// The outcome, once known (returned again to later calls).
    done: Option<Result<(), Error>>,
    /// Whether, and until when, an awaiting task asks the driver itself.
    asks: Asks,
}

/// When an awaited fence asks the driver itself, each time it is polled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Asks {
    /// Never (again): the notifier's fd tells.
    No,
    /// Until then ([`ASK_WINDOW`] after the watch).
    Until(Instant),
    /// Until its wait is over: the `spin` notifier's wait of
    /// [`Notifier::wait`] while it is its notifier's only one, which the
    /// core's poller only backs up.
    Always,
}

impl Fence {
    /// `lone`: no other fence of the notifier was alive at the watch;
    /// `asked`: the core left the wait to this fence's asks.
    pub(crate) fn new(inner: Arc<Inner>, token: u64, lone: bool, asked: bool) -> Fence {
        let asks = if asked {
            Asks::Always
        } else if lone && inner.mechanism != Mechanism::HostFunc {
            Asks::Until(Instant::now() + ASK_WINDOW)
        } else {
            Asks::No
        };
        Fence {
            inner,
            token,
            done: None,
            asks,
        }
    }

    /// While the fence asks ([`Asks`]), ask the driver about its wait: the
    /// outcome if it is over. Once its window has passed, or its wait went
    /// through the queue, it stops asking.
    fn ask_now(&mut self) -> Option<Result<(), Error>> {
        if self.asks == Asks::No {
            return None;
        }
        if self.done.is_some() {
            // Finished meanwhile (try_wait, a blocking wait): the usual path returns it.
            self.asks = Asks::No;
            return None;
        }
        // Asked with the state locked, as a held fence asks about the asking
        // one (settle): a wait taken by an ask is settled before any other
        // ask finds it gone.
        let mut st = self.inner.lock();
        match self.inner.ask(self.token) {
            Asked::Over(status) => {
                // Taken from the core: it is never drained, so settle it here.
                let mut wake = Vec::new();
                st.waits.remove(&self.token);
                let ended = st.end_asker(self.token, &mut wake);
                let released = st.release(self.token, &mut wake);
                drop(st);
                if released || ended {
                    self.inner.changed.notify_all();
                }
                wake_all(wake);
                self.asks = Asks::No;
                self.done = Some(outcome(status));
                self.done.clone()
            }
            Asked::Elsewhere => {
                // Queued (the poller found it first), taken by a held
                // fence's ask (its status is in the slot), or the notifier
                // closed: the usual path settles it.
                self.asks = Asks::No;
                None
            }
            Asked::Running => {
                if let Asks::Until(until) = self.asks {
                    if Instant::now() >= until {
                        self.asks = Asks::No;
                    }
                }
                None
            }
        }
    }

    /// The cudafd token of the wait (unique within its notifier).
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The notifier that watches it.
    pub fn notifier(&self) -> Notifier {
        Notifier {
            inner: self.inner.clone(),
        }
    }

    /// Whether the outcome is known (to this fence: a completion not yet
    /// drained does not count).
    pub fn is_finished(&self) -> bool {
        self.done.is_some()
    }

    /// The outcome if the wait finished, without blocking: drains the
    /// notifier's queued completions first ([`Notifier::dispatch`]).
    /// `None`: still pending. For `poll(2)` loops: call it when the fd is
    /// readable.
    pub fn try_wait(&mut self) -> Option<Result<(), Error>> {
        if self.done.is_none() {
            if let Err(e) = self.inner.dispatch() {
                return Some(Err(e));
            }
        }
        let inner = self.inner.clone();
        let mut wake = Vec::new();
        let r = settle(
            &inner,
            self.token,
            &mut self.done,
            &mut inner.lock(),
            &mut wake,
        );
        if r.is_some() {
            inner.changed.notify_all();
        }
        wake_all(wake);
        r
    }

    /// Block the calling thread until the wait finished or `timeout` passed
    /// (`None`: no limit). On [`Error::Timeout`] the wait stays pending: wait
    /// again, or drop the fence to cancel it. Any number of threads may
    /// block on fences of one notifier; one of them polls the fd for all.
    /// Do not call it on an async runtime's thread. A timeout past what
    /// [`Instant`] can count is no limit; at the deadline the fd is drained
    /// once more, so a wait that finished by then is never a timeout.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<(), Error> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let inner = self.inner.clone();
        let mut wake = Vec::new();
        let mut st = inner.lock();
        let mut last_look = false;
        loop {
            if let Some(r) = settle(&inner, self.token, &mut self.done, &mut st, &mut wake) {
                drop(st);
                inner.changed.notify_all(); // another blocking wait may take the lead
                wake_all(wake);
                return r;
            }
            let slice = match deadline {
                None => SLICE,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(SLICE),
                    _ if !last_look => {
                        // Its completion may be queued, not yet drained: look once.
                        last_look = true;
                        drop(st);
                        let r = inner.dispatch();
                        st = inner.lock();
                        if let Err(e) = r {
                            return give_up(&inner, st, self.token, wake, e);
                        }
                        continue;
                    }
                    _ => return give_up(&inner, st, self.token, wake, Error::Timeout),
                },
            };
            match st.leader {
                Some(t) if t != self.token => {
                    st = match inner.changed.wait_timeout(st, slice) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                }
                _ => {
                    st.leader = Some(self.token);
                    drop(st);
                    let r = poll_readable(inner.fd, slice).and_then(|_| inner.dispatch());
                    st = inner.lock();
                    if let Err(e) = r {
                        return give_up(&inner, st, self.token, wake, e);
                    }
                }
            }
        }
    }
}

/// The fence's outcome if known: its drained status, or Closed. Gives up
/// the lead when it is known.
fn settle(
    inner: &Inner,
    token: u64,
    done: &mut Option<Result<(), Error>>,
    st: &mut State,
    wake: &mut Vec<Waker>,
) -> Option<Result<(), Error>> {
    if done.is_none() {
        let (status, mut held) = st
            .waits
            .get(&token)
            .map_or((None, false), |s| (s.status, st.held(s)));
        if held && status.is_some() && !st.closed {
            // Its work is over, so the asking fence's, before it on the
            // stream, is too: nothing else may tell (its task may never
            // ask again, and an ask writes no fd).
            held = !inner.settle_asker(st, wake);
        }
        match status {
            // (after close nothing is held: the asking fence ends too)
            Some(status) if !held || st.closed => {
                st.waits.remove(&token);
                *done = Some(outcome(status));
            }
            _ if st.closed => {
                st.waits.remove(&token);
                *done = Some(Err(Error::Closed));
            }
            _ => {}
        }
    }
    if done.is_some() {
        st.end_asker(token, wake);
        st.release(token, wake);
    }
    done.clone()
}

/// A blocking wait ends without its outcome (`err`): it gives up the lead,
/// if it held it, to another blocking wait.
fn give_up(
    inner: &Inner,
    mut st: MutexGuard<'_, State>,
    token: u64,
    mut wake: Vec<Waker>,
    err: Error,
) -> Result<(), Error> {
    if st.release(token, &mut wake) {
        inner.changed.notify_all();
    }
    drop(st);
    wake_all(wake);
    Err(err)
}

fn wake_all(wake: Vec<Waker>) {
    for w in wake {
        w.wake();
    }
}

/// Wait up to `timeout` for `fd` to be readable (an early return is fine).
fn poll_readable(fd: RawFd, timeout: Duration) -> Result<(), Error> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // Rounded up, so that a wait never returns before its deadline.
    let ms = (timeout.as_nanos() + 999_999) / 1_000_000;
    let rc = unsafe { libc::poll(&mut p, 1, ms.min(i32::MAX as u128) as libc::c_int) };
    if rc < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(Error::io(e));
        }
    }
    Ok(())
}

/// Have the task polled again once the runtime's other ready tasks ran and
/// its reactor was polled: inside a Tokio runtime as `tokio::task::yield_now`
/// does, which defers the wake until after the reactor. A task woken at once
/// is always ready while it asks, and a current-thread runtime then looks at
/// its reactor only every 61 polls: the other tasks' fd events waited that
/// long (`tests/waits.rs`). Elsewhere the waker is woken at once.
fn yield_to_runtime(cx: &mut Context<'_>) {
    #[cfg(feature = "tokio")]
    {
        let y = tokio::task::yield_now();
        tokio::pin!(y);
        let _ = y.poll(cx); // Pending: the wake is deferred (or made at once outside a runtime)
    }
    #[cfg(not(feature = "tokio"))]
    cx.waker().wake_by_ref();
}

impl Future for Fence {
    type Output = Result<(), Error>;

    /// Ready once the wait finished (polling again returns the same outcome).
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Some(r) = this.ask_now() {
            return Poll::Ready(r);
        }
        if this.asks == Asks::Always {
            // Asking for as long as the work runs: poll again after the
            // runtime's other tasks and its reactor.
            yield_to_runtime(cx);
            return Poll::Pending;
        }
        if this.asks != Asks::No {
            // Young and not over: poll again after the runtime's other tasks
            // (at once: the window ends before a runtime kept busy looks at
            // its reactor anyway, and each pass through the reactor would
            // leave fewer asks in it).
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let inner = this.inner.clone();
        loop {
            let mut wake = Vec::new();
            {
                let mut st = inner.lock();
                if let Some(r) = settle(&inner, this.token, &mut this.done, &mut st, &mut wake) {
                    drop(st);
                    wake_all(wake);
                    inner.changed.notify_all(); // a blocking waiter may take the lead
                    return Poll::Ready(r);
                }
                if let Some(slot) = st.waits.get_mut(&this.token) {
                    if !slot
                        .waker
                        .as_ref()
                        .map_or(false, |w| w.will_wake(cx.waker()))
                    {
                        slot.waker = Some(cx.waker().clone());
                    }
                }
                if !inner.has_reactor() {
                    return Poll::Pending; // woken by whoever dispatches
                }
                match st.leader {
                    None => st.leader = Some(this.token),
                    Some(t) if t == this.token => {}
                    Some(_) => return Poll::Pending, // the leader wakes us
                }
            }
            match lead(&inner, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {} // dispatched: look again
                Poll::Ready(Err(e)) => {
                    let mut st = inner.lock();
                    st.release(this.token, &mut wake);
                    drop(st);
                    inner.changed.notify_all();
                    wake_all(wake);
                    this.done = Some(Err(e.clone()));
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

/// As the leader: wait for the fd through the reactor, then dispatch.
#[cfg(feature = "tokio")]
fn lead(inner: &Inner, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
    let reactor = match &inner.reactor {
        Some(r) => r,
        None => return Poll::Pending,
    };
    match reactor.poll_read_ready(cx) {
        Poll::Pending => Poll::Pending,
        Poll::Ready(Err(e)) => Poll::Ready(Err(Error::io(e))),
        Poll::Ready(Ok(mut guard)) => {
            let r = inner.dispatch();
            // Drained to empty: the reactor may now wait for the next edge (a
            // completion queued since has raised one, which this keeps).
            guard.clear_ready();
            Poll::Ready(r.map(|_| ()))
        }
    }
}

#[cfg(not(feature = "tokio"))]
fn lead(_inner: &Inner, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
    Poll::Pending
}

impl AsRawFd for Fence {
    /// The notifier's eventfd: readable while any of its completions is
    /// queued (not only this fence's). Poll it, then call
    /// [`try_wait`](Fence::try_wait).
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd
    }
}

impl AsFd for Fence {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // Safety: the fd stays open as long as `inner` lives.
        unsafe { BorrowedFd::borrow_raw(self.inner.fd) }
    }
}

impl Drop for Fence {
    /// An unfinished wait is cancelled (detached: the GPU work goes on).
    fn drop(&mut self) {
        self.inner.forget(self.token);
    }
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence")
            .field("token", &self.token)
            .field("done", &self.done)
            .finish()
    }
}
