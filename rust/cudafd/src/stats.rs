//! libcudafd's own accounting (`cudafd_stats`): what it created and has not
//! freed yet, and cumulative totals.

use std::os::raw::c_int;
use std::time::{Duration, Instant};

use cudafd_sys as sys;

use crate::error::string;

/// The counts that return to zero once no notifier is left and cudafd's
/// threads have gone idle (their linger time, milliseconds).
pub const LIVE: &[&str] = &[
    "threads",
    "events",
    "eventfds",
    "pending",
    "notifiers",
    "contexts",
    "streams",
    "notifications",
];

/// A snapshot of `cudafd_stats`, by name: live counts (threads, events,
/// eventfds, pending, notifiers, contexts, streams, notifications) and
/// totals (completed, faults, ...). Process-wide, over every notifier.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    entries: Vec<(String, i64)>,
}

impl Stats {
    /// The count named `name` (`cudafd_stat_name`), if this library has it.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }

    /// Every count, in the library's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.entries.iter().map(|(n, v)| (n.as_str(), *v))
    }

    /// The [`LIVE`] counts that are not zero.
    pub fn live(&self) -> Vec<(&str, i64)> {
        self.iter()
            .filter(|(n, v)| *v != 0 && LIVE.contains(n))
            .collect()
    }
}

/// The counts now.
pub fn stats() -> Stats {
    let mut v = [0i64; sys::CUDAFD_STAT_COUNT as usize];
    let n = unsafe { sys::cudafd_stats(v.as_mut_ptr(), v.len() as c_int) }.max(0) as usize;
    let entries = (0..n.min(v.len()))
        .map(|i| (unsafe { string(sys::cudafd_stat_name(i as c_int)) }, v[i]))
        .collect();
    Stats { entries }
}

/// Destroy the idle events and the side streams libcudafd keeps for later
/// notifiers (made once per context, so that no later watch makes a stream
/// while the GPU is busy), with the records, of every context with no wait
/// in flight, notifiers open or not; first it waits until no cancelled wait
/// or wait of a closed notifier is asked about any more. Returns how many
/// streams it destroyed. Call it before destroying a CUDA context of your
/// own that cudafd watched work in, once those waits ended, were cancelled
/// or their notifiers dropped (`cudafd_release_idle` in cudafd.h).
pub fn release_idle() -> usize {
    unsafe { sys::cudafd_release_idle() }.max(0) as usize
}

/// Wait until every [`LIVE`] count is zero, up to `timeout`: `Ok` with the
/// final counts, or `Err` with the last counts seen. For leak checks after
/// the last notifier and fence are dropped (cudafd's threads exit a few
/// milliseconds after their last wait; GPU work of detached waits must end).
/// Releases the kept side streams first ([`release_idle`]). A timeout past
/// what [`Instant`] can count is no limit.
pub fn wait_for_zero(timeout: Duration) -> Result<Stats, Stats> {
    let deadline = Instant::now().checked_add(timeout);
    loop {
        release_idle();
        let s = stats();
        if s.live().is_empty() {
            return Ok(s);
        }
        if deadline.map_or(false, |d| Instant::now() >= d) {
            return Err(s);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
