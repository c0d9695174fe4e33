//! Renewal latencies recorded into windows (quiet, storm, after), and the figures of each.

use super::*;

/// One recorded window: every renewal that started while it was open, per namespace. Windows
/// may overlap (the storm's own and its renewal round).
#[derive(Debug, Default)]
pub(super) struct Window {
    pub(super) open: bool,
    pub(super) opened: Option<Instant>,
    pub(super) by_namespace: Vec<Samples>,
    /// Renewals slower than the recorder's `slow` bound, first [`MAX_SLOW_KEPT`] of them.
    pub(super) slow: Vec<Slow>,
    /// Renewals started in the window and not yet answered.
    pub(super) in_flight: usize,
    pub(super) kept: usize,
    /// Renewals past [`MAX_WINDOW_SAMPLES`], not kept.
    pub(super) dropped: u64,
}

/// A renewal slower than the bound: its namespace, when it was sent (from the window's opening)
/// and how long it took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Slow {
    pub(super) namespace: usize,
    pub(super) at: Duration,
    pub(super) took: Duration,
}

/// Most slow renewals a window keeps the details of.
pub(super) const MAX_SLOW_KEPT: usize = 32;

/// What [`Recorded::close`] returns: the renewals of every namespace, the slow ones, and how
/// many renewals were not kept.
#[derive(Debug, Default)]
pub(super) struct Closed {
    pub(super) by_namespace: Vec<Samples>,
    pub(super) slow: Vec<Slow>,
    pub(super) dropped: u64,
}

/// Every window opened so far, at most [`MAX_WINDOWS`].
#[derive(Debug, Default)]
pub(super) struct Windows {
    pub(super) all: Vec<Window>,
}

/// A set of windows, one bit each (so [`MAX_WINDOWS`] is at most 32).
pub(super) type WindowSet = u32;

/// Per executor: whether a probe took it out (its renewals stop) and whether a renewal of it is
/// on the way.
#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) retired: AtomicBool,
    pub(super) busy: AtomicBool,
}

/// Clears a slot's `busy` however its renewal ends.
pub(super) struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, AtomicOrdering::SeqCst);
    }
}

/// A fleet whose renewals are timed and recorded by namespace while a window is open, and whose
/// executors can be taken out of the renewal schedule for a probe's deregistration.
#[derive(Debug)]
pub(super) struct Recorded {
    pub(super) fleet: Arc<LeaseholdFleet>,
    pub(super) namespace_of: Vec<usize>,
    pub(super) namespaces: usize,
    pub(super) slots: Vec<Slot>,
    /// What a retired executor's "renewal" answers, so its [`Cadence`] sleeps a third of it.
    pub(super) retired_ttl_ms: u64,
    /// Renewals slower than this are kept with when they were sent.
    pub(super) slow: Duration,
    pub(super) windows: Mutex<Windows>,
}

impl Recorded {
    pub(super) fn new(
        fleet: Arc<LeaseholdFleet>,
        namespaces: usize,
        executors: usize,
        lease: Duration,
        slow: Duration,
    ) -> Self {
        let size = fleet.size();
        Self {
            fleet,
            namespace_of: (0..size).map(|i| i / executors.max(1)).collect(),
            namespaces,
            slots: (0..size).map(|_| Slot::default()).collect(),
            retired_ttl_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            slow,
            windows: Mutex::new(Windows::default()),
        }
    }

    pub(super) fn windows(&self) -> std::sync::MutexGuard<'_, Windows> {
        const _: () = assert!(MAX_WINDOWS <= WindowSet::BITS as usize);
        self.windows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Opens a window; renewals from now on are recorded in it until [`Recorded::close`].
    pub(super) fn open(&self) -> Result<usize> {
        let mut windows = self.windows();
        if windows.all.len() >= MAX_WINDOWS {
            bail!("B12: more than {MAX_WINDOWS} windows");
        }
        windows.all.push(Window {
            open: true,
            opened: Some(Instant::now()),
            by_namespace: (0..self.namespaces).map(|_| Samples::default()).collect(),
            ..Window::default()
        });
        Ok(windows.all.len() - 1)
    }

    /// Closes window `id` and, once every renewal that started in it is answered (at most
    /// [`STRAGGLERS_BOUND`]), returns its samples by namespace and how many it did not keep.
    pub(super) async fn close(&self, id: usize) -> Result<Closed> {
        if let Some(window) = self.windows().all.get_mut(id) {
            window.open = false;
        }
        let deadline = Instant::now() + STRAGGLERS_BOUND;
        loop {
            {
                let mut windows = self.windows();
                let window = windows.all.get_mut(id).context("B12: no such window")?;
                if window.in_flight == 0 {
                    return Ok(Closed {
                        by_namespace: std::mem::take(&mut window.by_namespace),
                        slow: std::mem::take(&mut window.slow),
                        dropped: window.dropped,
                    });
                }
                if Instant::now() > deadline {
                    bail!(
                        "B12: {} renewals of the window still unanswered after {STRAGGLERS_BOUND:?}",
                        window.in_flight
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes executor `index` out of the renewal schedule, waiting for a renewal of it on the way
    /// to be answered, so that nothing renews it after its deregistration.
    pub(super) async fn retire(&self, index: usize) -> Result<()> {
        let slot = self.slots.get(index).context("B12: no such executor")?;
        slot.retired.store(true, AtomicOrdering::SeqCst);
        let deadline = Instant::now() + STRAGGLERS_BOUND;
        while slot.busy.load(AtomicOrdering::SeqCst) {
            if Instant::now() > deadline {
                bail!("B12: executor {index}'s renewal unanswered after {STRAGGLERS_BOUND:?}");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// The open windows, each counting one more renewal in flight.
    pub(super) fn start_renewal(&self) -> WindowSet {
        let mut windows = self.windows();
        let mut set = 0;
        for (id, window) in windows.all.iter_mut().enumerate() {
            if window.open {
                window.in_flight += 1;
                set |= 1 << id;
            }
        }
        set
    }

    /// Records a renewal of `namespace` sent at `sent` in every window of `set`.
    pub(super) fn finish_renewal(
        &self,
        set: WindowSet,
        namespace: usize,
        sent: Instant,
        result: Result<Duration, String>,
    ) {
        let mut windows = self.windows();
        for (id, window) in windows.all.iter_mut().enumerate() {
            if set & (1 << id) == 0 {
                continue;
            }
            window.in_flight = window.in_flight.saturating_sub(1);
            if window.kept >= MAX_WINDOW_SAMPLES {
                window.dropped += 1;
                continue;
            }
            if let Some(samples) = window.by_namespace.get_mut(namespace) {
                samples.record(result.clone());
                window.kept += 1;
            }
            if let (Ok(took), Some(opened)) = (&result, window.opened) {
                if *took > self.slow && window.slow.len() < MAX_SLOW_KEPT {
                    window.slow.push(Slow {
                        namespace,
                        at: sent.saturating_duration_since(opened),
                        took: *took,
                    });
                }
            }
        }
    }
}

/// Counts a renewal of the windows `set` as answered (with a failure) if it is dropped
/// unanswered.
pub(super) struct InWindows<'a> {
    pub(super) recorded: &'a Recorded,
    pub(super) set: WindowSet,
    pub(super) namespace: usize,
    pub(super) sent: Instant,
    pub(super) done: bool,
}

impl Drop for InWindows<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.recorded.finish_renewal(
                self.set,
                self.namespace,
                self.sent,
                Err("cancelled".to_owned()),
            );
        }
    }
}

impl Renewer for Recorded {
    fn size(&self) -> usize {
        self.fleet.size()
    }

    fn executor_id(&self, index: usize) -> Option<&str> {
        self.fleet.executor_id(index)
    }

    async fn renew(&self, index: usize) -> Result<u64, RenewFailure> {
        let slot = self
            .slots
            .get(index)
            .ok_or_else(|| RenewFailure::Other(format!("no executor {index}")))?;
        // Busy before reading `retired`, as `retire` sets `retired` before reading busy: one of
        // the two sees the other's write.
        slot.busy.store(true, AtomicOrdering::SeqCst);
        let _busy = Busy(&slot.busy);
        if slot.retired.load(AtomicOrdering::SeqCst) {
            return Ok(self.retired_ttl_ms);
        }
        let namespace = self.namespace_of[index];
        let mut windows = InWindows {
            recorded: self,
            set: self.start_renewal(),
            namespace,
            sent: Instant::now(),
            done: false,
        };
        let sent = windows.sent;
        let result = self.fleet.renew(index).await;
        if windows.set != 0 {
            self.finish_renewal(
                windows.set,
                namespace,
                sent,
                result
                    .as_ref()
                    .map(|_| sent.elapsed())
                    .map_err(ToString::to_string),
            );
        }
        windows.done = true;
        result
    }
}

/// A window's renewals summed over namespaces.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Figures {
    pub(super) renewals: u64,
    pub(super) errors: u64,
    pub(super) first_error: Option<String>,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) max_ms: f64,
    /// The namespace with the highest p99, with that p99 and its renewals.
    pub(super) worst: Option<(usize, f64, u64)>,
    /// Renewals slower than the bound.
    pub(super) over_bound: u64,
    /// Namespaces whose p99 is above the bound.
    pub(super) namespaces_over: usize,
    /// The first slow renewals, with when they were sent.
    pub(super) slow: Vec<Slow>,
}

/// The renewals of every namespace of `closed` but `skip`, together and the worst namespace's
/// (by p99, nearest rank; the lower index among equals), against `bound_ms`.
pub(super) fn figures(closed: &Closed, skip: Option<usize>, bound_ms: f64) -> Figures {
    let mut all = Samples::default();
    let mut figures = Figures {
        slow: closed
            .slow
            .iter()
            .filter(|slow| Some(slow.namespace) != skip)
            .copied()
            .collect(),
        ..Figures::default()
    };
    let bound_us = bound_ms * 1000.0;
    for (namespace, samples) in closed.by_namespace.iter().enumerate() {
        if Some(namespace) == skip {
            continue;
        }
        all.latencies_us.extend_from_slice(&samples.latencies_us);
        all.errors += samples.errors;
        if all.first_error.is_none() {
            all.first_error.clone_from(&samples.first_error);
        }
        if samples.ok() == 0 {
            continue;
        }
        let p99 = samples.clone().quantile_ms(0.99);
        figures.over_bound += samples
            .latencies_us
            .iter()
            .filter(|&&us| us as f64 > bound_us)
            .count() as u64;
        if p99 > bound_ms {
            figures.namespaces_over += 1;
        }
        if figures.worst.is_none_or(|(_, worst, _)| p99 > worst) {
            figures.worst = Some((namespace, p99, samples.ok()));
        }
    }
    figures.renewals = all.ok();
    figures.errors = all.errors;
    figures.p50_ms = all.quantile_ms(0.50);
    figures.p99_ms = all.quantile_ms(0.99);
    figures.max_ms = all.quantile_ms(1.0);
    figures.first_error = all.first_error;
    figures
}

// ---------------------------------------------------------------------------------------------
// Replan probes
