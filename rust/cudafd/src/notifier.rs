//! The notifier: one cudafd notifier, its eventfd, and the table that routes
//! each completion to its [`Fence`].

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::os::raw::{c_int, c_void};
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::Waker;

use cudafd_sys as sys;

use crate::error::{check, CudaError, Error};
use crate::fence::Fence;

/// A raw `CUstream` handle, as the driver API and every CUDA binding have it.
///
/// Null is the legacy default stream of the calling thread's current
/// context; [`CU_STREAM_LEGACY`] and [`CU_STREAM_PER_THREAD`] are accepted
/// too. See the crate documentation for how to get one from cudarc and
/// other bindings.
pub type CUstream = *mut c_void;

/// A raw `CUevent` handle.
pub type CUevent = *mut c_void;

/// `CU_STREAM_LEGACY`: the legacy default stream of the current context.
pub const CU_STREAM_LEGACY: CUstream = 0x1 as CUstream;
/// `CU_STREAM_PER_THREAD`: the calling thread's default stream in the current context.
pub const CU_STREAM_PER_THREAD: CUstream = 0x2 as CUstream;

/// How a notifier learns that the GPU passed a point (`CUDAFD_MECH_*`).
///
/// All three report the same completions and faults; they differ in what
/// they cost while waits are pending. `Event` suits most programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Mechanism {
    /// A pooled event recorded on the stream; the core's one poller thread
    /// asks about it again after a sixteenth of the wait's age, but no
    /// sooner than a quarter of the notifier's `max_lateness` and no later
    /// than all of it, so it is found at most `max_lateness` after its work
    /// ends.
    #[default]
    Event,
    /// `cuLaunchHostFunc` on a side stream; a watchdog thread surfaces faults
    /// (a host function never runs after one).
    HostFunc,
    /// A pooled event; a shared waiter thread polls while waits are pending
    /// (lowest latency, one busy core meanwhile). A wait of
    /// [`Notifier::wait`] that is its notifier's only one is asked about by
    /// its own task instead, the waiter thread only backing it up.
    Spin,
}

impl Mechanism {
    fn raw(self) -> c_int {
        match self {
            Mechanism::Event => sys::CUDAFD_MECH_EVENT,
            Mechanism::HostFunc => sys::CUDAFD_MECH_HOSTFUNC,
            Mechanism::Spin => sys::CUDAFD_MECH_SPIN,
        }
    }

    /// Whether this mechanism can be used with the loaded driver (loads it);
    /// the error says why not.
    pub fn available(self) -> Result<(), Error> {
        check(
            unsafe { sys::cudafd_mechanism_available(self.raw()) },
            "cudafd_mechanism_available",
        )
    }
}

/// A handle on one cudafd notifier: watches streams and events, and owns the
/// eventfd that becomes readable when one of its waits finishes.
///
/// # Threads
///
/// `Notifier` is `Send + Sync` and cheap to clone (an `Arc`): share one
/// across every task and thread of the program. Each [`Fence`] keeps the
/// notifier alive; the C notifier and its fd are destroyed when the last
/// handle and the last fence are gone. cudafd's own threads (shared by all
/// notifiers) only queue completions and write the eventfd; they never run
/// Rust code. Wakers are woken on whichever thread drains the completions.
///
/// # Driving
///
/// One caller at a time drains the fd and hands every completion to its
/// fence (the *leader*): with the `tokio` feature, in a notifier created
/// inside a Tokio runtime, that is one of the fences being awaited, through
/// the runtime's reactor, and nothing else is needed. Elsewhere (async-io,
/// smol, a `poll(2)` loop), poll [`as_raw_fd`](AsRawFd::as_raw_fd) for
/// readability and call [`dispatch`](Notifier::dispatch) (see the crate
/// documentation), or block in [`Fence::wait`].
///
/// # Faults
///
/// A fault is sticky for its CUDA context: every pending wait of that
/// context (on any notifier) ends in [`Error::Gpu`] with the context's
/// error, and so does every later one. On a real GPU the fault ends every
/// context of the process, other GPUs' too (two H200s of one host), so
/// their waits end in the same error; a process per GPU keeps a fault to
/// its own.
#[derive(Clone)]
pub struct Notifier {
    pub(crate) inner: Arc<Inner>,
}

/// What asking the driver about one wait found ([`Inner::ask`]).
pub(crate) enum Asked {
    /// Over, with this status; the wait is the asker's now.
    Over(i64),
    /// Its work runs.
    Running,
    /// Not pending here any more (queued, cancelled, closed): the drain tells.
    Elsewhere,
}

/// A completion's slot: its status once drained, and who to wake.
#[derive(Default)]
pub(crate) struct Slot {
    pub(crate) status: Option<i64>,
    pub(crate) waker: Option<Waker>,
    /// The asking fence ([`State::asker`]) watched before this one on its
    /// stream: this one does not finish before it.
    pub(crate) after: Option<u64>,
}

pub(crate) struct State {
    /// Every live fence's token, and completions drained before their
    /// fence's watch call returned.
    pub(crate) waits: HashMap<u64, Slot>,
    /// Tokens dropped after their completion was queued: discarded when drained.
    pub(crate) cancelled: HashSet<u64>,
    /// The token whose fence polls the fd now.
    pub(crate) leader: Option<u64>,
    /// cudafd_drain said the notifier is closed.
    pub(crate) closed: bool,
    /// `spin`: whether the core leaves the waits watched next to their
    /// fences' asks (`cudafd_notifier_set_asking`), as last set.
    pub(crate) asking: bool,
    /// `spin`: the fence whose wait is left to its asks, and its stream's
    /// key (`cudafd_stream_key`), until its outcome is known. Its wait is
    /// in a lane of the core's apart from the stream's other waits, so
    /// those are kept from finishing before it here ([`Slot::after`]).
    pub(crate) asker: Option<(u64, u64)>,
}

impl State {
    /// Whether the slot waits for the asking fence watched before it.
    pub(crate) fn held(&self, slot: &Slot) -> bool {
        slot.after.is_some() && slot.after == self.asker.map(|(t, _)| t)
    }

    /// `token`'s outcome is known: if it was the asking fence, the fences
    /// held behind it are woken (returned, to be woken after the lock is
    /// released). True if it was.
    pub(crate) fn end_asker(&mut self, token: u64, wake: &mut Vec<Waker>) -> bool {
        if self.asker.map(|(t, _)| t) != Some(token) {
            return false;
        }
        self.asker = None;
        for slot in self.waits.values_mut() {
            if slot.after == Some(token) {
                slot.after = None;
                wake.extend(slot.waker.clone());
            }
        }
        true
    }

    /// Give up the lead if `token` has it: another fence that waits for the
    /// fd is woken to take it (returned, to be woken after the lock is
    /// released): one whose completion is not drained yet, or one held
    /// behind the asking fence, whose completion may be queued.
    pub(crate) fn release(&mut self, token: u64, wake: &mut Vec<Waker>) -> bool {
        if self.leader != Some(token) {
            return false;
        }
        self.leader = None;
        if let Some(w) = self
            .waits
            .iter()
            .filter(|(t, s)| **t != token && (s.status.is_none() || self.held(s)))
            .find_map(|(_, s)| s.waker.clone())
        {
            wake.push(w);
        }
        true
    }
}

pub(crate) struct Inner {
    raw: NonNull<sys::cudafd_notifier>,
    pub(crate) fd: RawFd,
    pub(crate) mechanism: Mechanism,
    state: Mutex<State>,
    /// Signalled whenever completions were dispatched or the lead was given up.
    pub(crate) changed: Condvar,
    #[cfg(feature = "tokio")]
    pub(crate) reactor: Option<tokio::io::unix::AsyncFd<Fd>>,
}

// Safety: every cudafd call used here is thread-safe (the notifier has its
// own lock); cudafd_notifier_destroy runs only in Drop, with no other
// reference left.
unsafe impl Send for Inner {}
unsafe impl Sync for Inner {}

/// The eventfd as the reactor sees it; the C notifier owns and closes it.
#[cfg(feature = "tokio")]
pub(crate) struct Fd(RawFd);

#[cfg(feature = "tokio")]
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

impl Inner {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned table is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a fence can lead by itself (through a reactor).
    pub(crate) fn has_reactor(&self) -> bool {
        #[cfg(feature = "tokio")]
        {
            self.reactor.is_some()
        }
        #[cfg(not(feature = "tokio"))]
        {
            false
        }
    }

    /// Ask the driver on this thread whether the wait of `token` is over
    /// (`cudafd_ask_token`, one event query). [`Asked::Over`]: the wait is
    /// then taken from the core (never drained). [`Asked::Elsewhere`]: it
    /// cannot be asked (queued already, cancelled, the notifier closed, or
    /// not an `event` or `spin` notifier): the drain tells.
    pub(crate) fn ask(&self, token: u64) -> Asked {
        let mut status = 0i64;
        match unsafe { sys::cudafd_ask_token(self.raw.as_ptr(), token, &mut status) } {
            1 => Asked::Over(status),
            0 => Asked::Running,
            _ => Asked::Elsewhere,
        }
    }

    /// Ask the driver about the asking fence's wait, with the state locked
    /// (`st`) as every ask is. Over: its status goes to its slot, for its
    /// fence to find, and the fences held behind it are let go (woken
    /// through `wake`). True if so.
    pub(crate) fn settle_asker(&self, st: &mut State, wake: &mut Vec<Waker>) -> bool {
        let token = match st.asker {
            Some((t, _)) => t,
            None => return false,
        };
        match self.ask(token) {
            Asked::Over(status) => {
                if let Some(slot) = st.waits.get_mut(&token) {
                    slot.status = Some(status);
                    wake.extend(slot.waker.take());
                }
                st.end_asker(token, wake)
            }
            _ => false,
        }
    }

    /// Watch through `call` (which stores the token) and make the fence. A
    /// `spin` notifier's watch made for a fence that will be awaited and is
    /// its notifier's only one (`awaited`) is left to the fence's asks, the
    /// core's poller only backing it up, so that one core spins, not two;
    /// every other watch of a `spin` notifier is spun on by the poller, as
    /// blocking waits and fd users need. The flag is the notifier's, so its
    /// setting and the watch are made under the state lock.
    ///
    /// `stream`: the watched stream, None for an event.
    pub(crate) fn watch_with(
        self: &Arc<Self>,
        stream: Option<CUstream>,
        awaited: bool,
        what: &'static str,
        call: impl FnOnce(*mut sys::cudafd_notifier, &mut u64) -> c_int,
    ) -> Result<Fence, Error> {
        let watch = |token: &mut u64| {
            check(call(self.raw.as_ptr(), token), what).map_err(|e| match e {
                // The context faulted before the watch: the wait ends as
                // the context's pending waits did.
                Error::Driver { error, .. } if error.is_fault() => Error::Gpu(error),
                e => e,
            })
        };
        let mut token = 0;
        if self.mechanism != Mechanism::Spin {
            watch(&mut token)?;
            return Ok(self.fence(token));
        }
        let mut st = self.lock();
        let lone = st.waits.is_empty();
        // The stream's key, only where it is used: for the asking fence's
        // own watch, and to hold a later watch behind it.
        let key = match stream {
            Some(s) if (awaited && lone) || st.asker.is_some() => {
                Some(unsafe { sys::cudafd_stream_key(s as usize) })
            }
            _ => None,
        };
        let asked = awaited && lone && key.is_some();
        if st.asking != asked {
            let rc = unsafe { sys::cudafd_notifier_set_asking(self.raw.as_ptr(), asked as c_int) };
            check(rc, "cudafd_notifier_set_asking")?;
            st.asking = asked;
        }
        watch(&mut token)?;
        let after = match (st.asker, key) {
            (Some((t, k)), Some(mine)) if k == mine => Some(t),
            _ => None,
        };
        if let (true, Some(k)) = (asked, key) {
            st.asker = Some((token, k));
        }
        st.waits.entry(token).or_default().after = after;
        drop(st);
        Ok(Fence::new(self.clone(), token, lone, asked))
    }

    /// Drain every queued completion into its slot and wake its fence.
    /// Drains until the queue is empty, which also clears the fd (so edge-
    /// and level-triggered polling both work).
    pub(crate) fn dispatch(&self) -> Result<usize, Error> {
        let mut batch = [sys::cudafd_completion::default(); 64];
        let mut wake = Vec::new();
        let mut total = 0;
        let mut closed = false;
        let result = {
            let mut st = self.lock();
            loop {
                let got = unsafe {
                    sys::cudafd_drain(self.raw.as_ptr(), batch.as_mut_ptr(), batch.len() as c_int)
                };
                if got == sys::CUDAFD_E_CLOSED {
                    st.closed = true;
                    closed = true;
                    wake.extend(st.waits.values_mut().filter_map(|s| s.waker.take()));
                    break Ok(total);
                }
                if got < 0 {
                    break check(got, "cudafd_drain").map(|_| total);
                }
                for c in &batch[..got as usize] {
                    if st.cancelled.remove(&c.token) {
                        continue;
                    }
                    // An unknown token is a fence whose watch call has not
                    // returned yet: it finds its status here.
                    let slot = st.waits.entry(c.token).or_default();
                    slot.status = Some(c.status);
                    wake.extend(slot.waker.take());
                    st.end_asker(c.token, &mut wake);
                }
                total += got as usize;
                if (got as usize) < batch.len() {
                    break Ok(total); // that call emptied the queue and cleared the fd
                }
            }
        };
        if total > 0 || closed {
            self.changed.notify_all(); // blocking waits look at their slots again
        }
        for w in wake {
            w.wake();
        }
        result
    }

    fn fence(self: &Arc<Self>, token: u64) -> Fence {
        let lone = {
            let mut st = self.lock();
            let lone = st.waits.is_empty();
            st.waits.entry(token).or_default();
            lone
        };
        Fence::new(self.clone(), token, lone, false)
    }

    /// Detach a dropped fence's wait (its GPU work goes on).
    pub(crate) fn forget(&self, token: u64) {
        let mut wake = Vec::new();
        {
            let mut st = self.lock();
            if let Some(slot) = st.waits.remove(&token) {
                if slot.status.is_none() && !st.closed {
                    let rc = unsafe { sys::cudafd_cancel(self.raw.as_ptr(), token) };
                    if rc == sys::CUDAFD_E_UNKNOWN_TOKEN {
                        // Completed and queued, not drained yet: drop it then.
                        st.cancelled.insert(token);
                    }
                }
            }
            let ended = st.end_asker(token, &mut wake);
            if st.release(token, &mut wake) || ended {
                self.changed.notify_all();
            }
        }
        for w in wake {
            w.wake();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Deregister from the reactor while the fd is still open: after the
        // destroy its number may belong to another file.
        #[cfg(feature = "tokio")]
        drop(self.reactor.take());
        // Pending waits are detached; their GPU work goes on.
        unsafe { sys::cudafd_notifier_destroy(self.raw.as_ptr()) }
    }
}

impl Notifier {
    /// A new notifier with its own eventfd (nonblocking, close-on-exec).
    ///
    /// Loads the driver if it is not loaded yet: `$CUDAFD_DRIVER` if set,
    /// else `libcuda.so.1` (see [`set_driver`](crate::set_driver) and
    /// [`sim`](crate::sim)). With the `tokio` feature and a Tokio runtime
    /// current on this thread, the fd is registered with that runtime's
    /// reactor, and fences complete by themselves when awaited on it; use the
    /// notifier with that runtime only. A runtime without IO (no
    /// `enable_io()`) gives [`Error::Io`] (with `panic = "unwind"`, Rust's
    /// default; Tokio's panic message is printed on the way).
    pub fn new(mechanism: Mechanism) -> Result<Notifier, Error> {
        crate::error::check_abi()?;
        let mut raw = ptr::null_mut();
        check(
            unsafe { sys::cudafd_notifier_create(mechanism.raw(), &mut raw) },
            "cudafd_notifier_create",
        )?;
        let raw = NonNull::new(raw).ok_or(Error::Cudafd {
            code: sys::CUDAFD_E_NOMEM,
            message: "cudafd_notifier_create returned no notifier".into(),
            call: "cudafd_notifier_create",
        })?;
        let fd = unsafe { sys::cudafd_notifier_fd(raw.as_ptr()) };
        #[allow(unused_mut)] // without tokio nothing more is set
        let mut inner = Inner {
            raw,
            fd,
            mechanism,
            state: Mutex::new(State {
                waits: HashMap::new(),
                cancelled: HashSet::new(),
                leader: None,
                closed: false,
                asking: false,
                asker: None,
            }),
            changed: Condvar::new(),
            #[cfg(feature = "tokio")]
            reactor: None,
        };
        #[cfg(feature = "tokio")]
        if tokio::runtime::Handle::try_current().is_ok() {
            // On error `inner` drops here, destroying the notifier. Tokio
            // panics where the runtime has no IO driver, and offers no way
            // to ask first.
            let afd = std::panic::catch_unwind(|| {
                tokio::io::unix::AsyncFd::with_interest(Fd(fd), tokio::io::Interest::READABLE)
            })
            .map_err(|_| {
                Error::io(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "the current Tokio runtime has no IO driver: build it with enable_io() \
                     (or enable_all()), or make the notifier outside it",
                ))
            })?
            .map_err(Error::io)?;
            inner.reactor = Some(afd);
        }
        Ok(Notifier {
            inner: Arc::new(inner),
        })
    }

    /// The mechanism it was created with.
    pub fn mechanism(&self) -> Mechanism {
        self.inner.mechanism
    }

    /// How late, at most, the event mechanism finds a wait of this notifier
    /// after its work ended (plus the machine's thread wake-up time), for the
    /// watches made from now on. A long wait then costs about one wake-up of
    /// cudafd's poller thread per `max_lateness`; faults surface within it too.
    /// Default 400 µs; between 1 µs and 10 s, else an error.
    pub fn set_max_lateness(&self, max_lateness: std::time::Duration) -> Result<(), Error> {
        let ns = i64::try_from(max_lateness.as_nanos()).unwrap_or(i64::MAX);
        check(
            unsafe { sys::cudafd_notifier_set_max_lateness(self.inner.raw.as_ptr(), ns) },
            "cudafd_notifier_set_max_lateness",
        )
    }

    /// Whether the fd is registered with a Tokio reactor, so that fences
    /// complete when awaited with no [`dispatch`](Notifier::dispatch) call.
    pub fn has_reactor(&self) -> bool {
        self.inner.has_reactor()
    }

    /// Mark the current end of `stream`: the fence completes once all work
    /// enqueued on it before this call has finished, or the context faulted.
    ///
    /// The point is taken now, not when the fence is first polled. Waits on
    /// one stream complete in the order they were watched. The stream's
    /// context is made current where needed and restored after, so any
    /// thread may call this. `stream` must be a live stream handle (null, or
    /// [`CU_STREAM_LEGACY`] / [`CU_STREAM_PER_THREAD`], for the calling
    /// thread's current context): as with any CUDA call, the real driver's
    /// behaviour for a destroyed handle is undefined (the simulator answers
    /// `CUDA_ERROR_INVALID_HANDLE` until a new stream takes the handle, as a
    /// driver hands it on). Waits on a new stream that got a destroyed
    /// stream's handle do not wait for the destroyed stream's work.
    ///
    /// Errors: [`Error::Closed`] after [`close`](Notifier::close);
    /// [`Error::Gpu`] with the fault when the stream's context faulted
    /// before the call (as its pending waits end); [`Error::Driver`] when
    /// another driver error failed the watch (a bad handle, no current
    /// context).
    pub fn watch(&self, stream: CUstream) -> Result<Fence, Error> {
        self.watch_stream(stream, false)
    }

    fn watch_stream(&self, stream: CUstream, awaited: bool) -> Result<Fence, Error> {
        self.inner.watch_with(
            Some(stream),
            awaited,
            "cudafd_watch_stream",
            |n, token| unsafe { sys::cudafd_watch_stream(n, stream as usize, token) },
        )
    }

    /// Watch `stream` now (as [`watch`](Notifier::watch), with the same
    /// promise that `stream` is a live handle) and return a future of the
    /// outcome: `Ok(())` once the GPU passed the point, else the
    /// error. The future is `Send + 'static`: spawn it, or await it in place.
    /// Dropping it before it finishes cancels the wait; the GPU work goes on.
    ///
    /// Under [`Mechanism::Spin`], a wait made while no other wait of the
    /// notifier is pending is asked about by its task, each time it is
    /// polled, until it is over: the task stays ready (one busy runtime
    /// thread; it yields as `tokio::task::yield_now` does) and resumes
    /// within a few microseconds of the work's end, and the core's waiter
    /// thread only backs the wait up, every max(max_lateness, 10 ms),
    /// instead of spinning on it too. A later wait
    /// on the same stream does not finish before it. Every other wait of a
    /// `spin` notifier (beside others, or made by [`watch`](Notifier::watch),
    /// which may be waited for by blocking or through the fd) is spun on by
    /// the waiter thread.
    ///
    /// In a spawned task on Rust before 1.64, bind the future first
    /// (`let w = notifier.wait(s); w.await`): there a raw stream pointer in
    /// the awaited expression makes the task's future `!Send`.
    pub fn wait(
        &self,
        stream: CUstream,
    ) -> impl Future<Output = Result<(), Error>> + Send + 'static {
        let fence = self.watch_stream(stream, true);
        async move { fence?.await }
    }

    /// Complete when the event's record that is latest now has completed (an
    /// event never recorded completes at once). The calling thread's current
    /// context hosts the wait, so one must be current; the event may be
    /// recorded again or destroyed once this returns. Until then `event` must
    /// be a live event handle: as for [`watch`](Notifier::watch), the real
    /// driver's behaviour for a destroyed or made-up one is undefined.
    pub fn watch_event(&self, event: CUevent) -> Result<Fence, Error> {
        self.inner
            .watch_with(None, false, "cudafd_watch_event", |n, token| unsafe {
                sys::cudafd_watch_event(n, event as usize, token)
            })
    }

    /// Make now the side streams this notifier's waits in `stream`'s context
    /// may need later, so that no later watch creates one (creating a stream
    /// can stall the device on some GPUs). Optional; best called once per
    /// context before the work starts. `stream` must be a live stream handle,
    /// as for [`watch`](Notifier::watch).
    pub fn prepare(&self, stream: CUstream) -> Result<(), Error> {
        check(
            unsafe { sys::cudafd_prepare(self.inner.raw.as_ptr(), stream as usize) },
            "cudafd_prepare",
        )
    }

    /// Drain every queued completion and wake the fences they belong to;
    /// returns how many there were. Never blocks.
    ///
    /// For event loops other than Tokio: call it whenever the fd is
    /// readable. It drains until the queue is empty, which clears the fd, so
    /// edge- and level-triggered polling both work. Any thread may call it,
    /// also concurrently with awaited fences. A blocking [`Fence::wait`] in
    /// progress notices completions drained here within 50 ms.
    pub fn dispatch(&self) -> Result<usize, Error> {
        self.inner.dispatch()
    }

    /// Waits watched and neither drained nor cancelled yet.
    pub fn pending(&self) -> usize {
        unsafe { sys::cudafd_notifier_pending(self.inner.raw.as_ptr()) }.max(0) as usize
    }

    /// Close the notifier: every pending wait is detached (its GPU work goes
    /// on) and its fence ends in [`Error::Closed`]; later watches fail with
    /// it. The fd stays open (and readable) until the last handle and fence
    /// are dropped. Idempotent; any thread.
    pub fn close(&self) -> Result<(), Error> {
        check(
            unsafe { sys::cudafd_notifier_close(self.inner.raw.as_ptr()) },
            "cudafd_notifier_close",
        )?;
        self.inner.dispatch().map(|_| ())
    }
}

impl AsRawFd for Notifier {
    /// The eventfd: readable exactly while completions are queued (or after
    /// close). Owned by the notifier; poll it, never read or close it.
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd
    }
}

impl AsFd for Notifier {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // Safety: the fd stays open as long as `inner` lives.
        unsafe { BorrowedFd::borrow_raw(self.inner.fd) }
    }
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("fd", &self.inner.fd)
            .field("mechanism", &self.inner.mechanism)
            .field("reactor", &self.inner.has_reactor())
            .finish()
    }
}

/// A completion status as a result.
pub(crate) fn outcome(status: i64) -> Result<(), Error> {
    match CudaError::new(status as i32) {
        None => Ok(()),
        Some(e) => Err(Error::Gpu(e)),
    }
}
